"""What a failure's text shows (the runtime's report or the RayJob's status): a run with no
checkpoint to resume from, Ray's memory monitor, Ray's NCCL hang detector, a collective timeout,
a Ray node gone, workers
Ray Train could not place, a preemption, else an exception raised by the user's code
(`_from_text`).
"""

from __future__ import annotations

import re

from raytrain_contract.checkpoints import NO_CHECKPOINT
from raytrain_operator.status.triage.model import Evidence, FailureClass, Triage
from raytrain_operator.status.triage.ray_memory import _RAY_MEMORY, _ray_memory
from raytrain_operator.status.triage.tracebacks import exception_type, last_traceback_lines

#: torch.distributed's words for a collective that never completed or lost a peer.
_COLLECTIVE = re.compile(
    r"Watchdog caught collective operation timeout"
    r"|NCCL communicator was aborted"
    r"|ProcessGroupNCCL.*(?:timeout|timed out)"
    r"|NCCL.*(?:timeout|timed out)"
    r"|\[?gloo\]?.*(?:Timed out|timeout)"
    r"|Timed out waiting \d+ ?ms for (?:recv|send)"
    r"|gloo.*Connection closed by peer"
    r"|DistNetworkError|DistBackendError.*(?:timeout|timed out)"
    r"|CollectiveTimeoutError",
    re.IGNORECASE,
)
#: Ray Train's NCCL hang detector (on where spec.scaling.useGpu: trainer_runtime.trainer): a
#: communicator whose ranks stalled, the same fault the operator's hang watch finds.
_NCCL_HANG = re.compile(r"NCCLHangError")
#: Ray's own errors (a dead actor, a node gone, Ray's memory monitor), never the user's code.
_RAY_NODE = re.compile(r"NodeDiedError|node (?:\S+ )?(?:died|was terminated|is dead)", re.I)


_SYSTEM_EXCEPTIONS = frozenset(
    {
        "ActorDiedError",
        "ActorUnavailableError",
        "RayActorError",
        "RaySystemError",
        "WorkerCrashedError",
        "ObjectLostError",
        "OwnerDiedError",
        "NodeDiedError",
        "GetTimeoutError",
        "ConnectionError",
        "ConnectionResetError",
        "ConnectionRefusedError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "TimeoutError",
        "KeyboardInterrupt",
        "SystemExit",
        "TrainingFailedError",
        "WorkerGroupError",
        "ControllerError",
        "WorkerHealthCheckTimeoutError",
        "WorkerHealthCheckFailedError",
    }
)
#: Words of a passing fault (a network, a store that is busy): such an exception is not the
#: training code's bug even when the code raised it.
_TRANSIENT = re.compile(
    r"connection (?:refused|reset|aborted|closed)|timed out|temporar(?:y|ily) unavailable"
    r"|network is unreachable|name resolution|NETWORK_CONNECTION|service unavailable"
    r"|SlowDown|throttl",
    re.IGNORECASE,
)
#: Ray Train's words for a worker group that never got its resources, and for a preemption.
_RAY_UNPLACED = frozenset({"WorkerGroupStartupTimeoutError", "InsufficientClusterResourcesError"})
_RAY_PREEMPTED = frozenset({"PreemptionError"})
#: The next failed worker in the runtime's headline ("training failed: worker 0: ...; worker 1:").
_NEXT_WORKER = re.compile(r"; worker \d+: ")
#: The worker that said so, just before its words ("worker 0: ...NoUsableCheckpoint: ").
_WORKER_SAID = re.compile(r"worker (\d+): (?:[\w.]+: )?$")
#: Where the runtime's own advice begins after the checkpoints it names: the operator says its
#: own (a new TrainJob: spec.resumeFrom cannot change once a job has started).
_RUNTIME_ADVICE = " Nothing was deleted."
#: The most of the runtime's words kept, so that the fix after them is never cut off.
CHECKPOINT_QUOTE = 2400


def _checkpoint_unusable(text: str, source: str) -> Triage | None:
    """CheckpointUnusable when the runtime says that no checkpoint of the run (or the one
    spec.resumeFrom names) passes its check: its words name each checkpoint and what was wrong.
    Permanent: a retry meets the same checkpoints and fails the same way."""
    at = text.find(NO_CHECKPOINT)
    if at < 0:
        return None
    rank = _WORKER_SAID.search(text[:at].rsplit("\n", 1)[-1])
    if rank is not None:
        source = f"{source}, Ray Train worker {rank.group(1)}"
    said = text[at + len(NO_CHECKPOINT) :].split("\n", 1)[0]
    nxt = _NEXT_WORKER.search(said)
    said = said[: nxt.start()] if nxt else said
    said = said.split(_RUNTIME_ADVICE, 1)[0].strip().rstrip(".")
    if len(said) > CHECKPOINT_QUOTE:
        said = said[:CHECKPOINT_QUOTE] + " ... (cut)"
    return Triage(
        FailureClass.CHECKPOINT_UNUSABLE,
        f"no checkpoint to resume from ({source}: {said or 'no detail'}). Nothing was deleted, "
        "and the job does not start over on its own. To go on, create a new TrainJob: with "
        "spec.resumeFrom.checkpoint naming a checkpoint that passes its check, or without "
        "spec.resumeFrom to start a new run from the beginning (a new TrainJob gets a new run "
        "name)",
        permanent=True,
    )


def _from_text(
    text: str,
    source: str,
    *,
    user_needs_traceback: bool = False,
    evidence: Evidence | None = None,
) -> Triage | None:
    """The class a failure message shows. With `user_needs_traceback` (KubeRay's words, which
    quote the driver's log), only a Python traceback makes it a user exception. `evidence`
    (its pods, both texts, the memory settings) tells where Ray's memory monitor killed."""
    if not text.strip():
        return None
    found = _checkpoint_unusable(text, source)
    if found is not None:
        return found
    if _RAY_MEMORY.search(text):
        return _ray_memory(text, source, evidence or Evidence(rayjob_status={}))
    exc = exception_type(text)
    if _NCCL_HANG.search(text):
        return Triage(
            FailureClass.HUNG,
            f"Ray Train's NCCL hang detector found a communicator whose ranks made no progress "
            f"({source}: {last_traceback_lines(text, 6)}). Its per-rank stack traces are in the "
            "run's hang_detector/stack_traces/ directory beside the checkpoints",
            exception=exc,
        )
    if _COLLECTIVE.search(text):
        return Triage(
            FailureClass.COLLECTIVE_TIMEOUT,
            f"a collective operation (NCCL/gloo) timed out or lost a peer ({source}"
            f"{': ' + exc if exc else ''}):\n{last_traceback_lines(text)}\nA worker stalled or "
            "died while the others waited. If it recurs at the same step, look for a rank "
            "that skips a collective",
            exception=exc,
        )
    if _RAY_NODE.search(text):
        return Triage(
            FailureClass.NODE_LOST,
            f"a Ray node died ({source}: {last_traceback_lines(text, 4)})",
        )
    short = exc.rsplit(".", 1)[-1] if exc else None
    if short in _RAY_UNPLACED:
        return Triage(
            FailureClass.UNSCHEDULABLE,
            f"Ray Train could not place its workers ({source}: {last_traceback_lines(text, 4)})"
            "; the Ray cluster lacks the resources spec.scaling asks for: lower "
            "resourcesPerWorker or numWorkers, or add nodes",
            exception=exc,
        )
    if short in _RAY_PREEMPTED:
        return Triage(
            FailureClass.NODE_LOST,
            f"a node was preempted ({source}: {last_traceback_lines(text, 4)})",
            exception=exc,
        )
    traced = "Traceback (most recent call last):" in text
    if _TRANSIENT.search(text):
        return None
    if exc and short not in _SYSTEM_EXCEPTIONS and (traced or not user_needs_traceback):
        return Triage(
            FailureClass.USER_EXCEPTION,
            f"the training code raised {exc} ({source}):\n{last_traceback_lines(text)}",
            exception=exc,
        )
    return None
