"""The hang watch: when an attempt's reports stop for the hang timeout, every training process
is asked for its stacks, and the driver stores them and reports where each rank was.

It runs in Ray Train's controller (a worker-group and report callback: Ray's internal API,
as the NCCL hang detector of Ray 2.60 uses it), which sees every report and can reach every
training worker while the training thread is stuck: a worker actor runs the training function
in a thread of its own and still answers calls. The timeout is the contract's
``failure.hangTimeoutSeconds`` or the default derived from the report interval
(raytrain_contract.hang), counted from the latest report or, before the first, from the start
of the worker group. Once it passes, one dump per stall: ``dump_stacks`` runs in each worker
process and reads every thread's frames with ``sys._current_frames`` (no ptrace, no py-spy,
nothing a restricted pod lacks). A process whose interpreter is held by native code cannot
answer; its rank is named as such after ``STACKS_ANSWER_SECONDS``.

The stacks go to the driver through the report queue: the run log writes ``stacks.txt`` beside
the attempt's ``driver.log`` and the reporter writes ``status.trainerStatus.hang``. The
operator decides what the hang gets (spec.failure.onHang): the runtime only watches and tells.
For a GPU job it also turns on Ray Train's own NCCL hang detector (``nccl_hang_detection``).
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from raytrain_contract import Contract, hang
from trainer_runtime import steptime

log = logging.getLogger("trainer_runtime.hangwatch")

#: The training thread of this process, once the loop started (``with_watched_thread``).
_TRAINING_THREAD: int | None = None
#: Ray Train names the thread it runs the training function in so (thread_runner.py).
RAY_TRAINING_THREAD = "TrainingThread"
#: Characters of one rank's stack text kept (a process with hundreds of threads).
STACK_TEXT_LIMIT = 64 * 1024


def with_watched_thread(train_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``train_fn`` (same arity and name) that marks its thread as the training thread (the
    stacks of a hang start with it) and times its waits on the other ranks (steptime)."""

    from trainer_runtime.entrypoint import wrap_loop  # imports Ray: only where the loop runs

    def watched(run: Callable[[], Any]) -> Any:
        mark_training_thread()
        return run()

    return wrap_loop(train_fn, watched)


def mark_training_thread() -> None:
    """This thread runs the training loop. A function of the module, not of the closure above:
    Ray pickles the closure by value, with a copy of the globals it reads, and only the module's
    own functions see (and set) the module's globals in the worker process."""
    global _TRAINING_THREAD
    _TRAINING_THREAD = threading.get_ident()
    try:
        steptime.install(_TRAINING_THREAD)
    except Exception:  # timing must never stop training
        log.exception("could not time the waits of the training thread")


#: Ray Train 2.60's NCCL hang detector (off by default in Ray): its switch, its action and how
#: long a communicator must stall before it acts (ray/train/v2/_internal/constants.py).
NCCL_HANG_DETECTOR_ENV = "RAY_TRAIN_ENABLE_NCCL_HANG_DETECTOR"
NCCL_RAS_ACTION_ENV = "RAY_TRAIN_NCCL_RAS_ACTION"
NCCL_RAS_CONFIRM_ENV = "RAY_TRAIN_NCCL_RAS_CONFIRM_DURATION_S"


def nccl_hang_detection(contract: Contract) -> dict[str, str]:
    """The driver's environment that turns Ray's NCCL hang detector on for a GPU job whose
    hang watch is on: it raises NCCLHangError (the operator's class Hung) once a communicator's
    ranks stalled for the hang timeout (the floor of the derived one when unset), or only logs
    with spec.failure.onHang Report. It asks NCCL's RAS through the ``ncclras`` client (NCCL
    2.28 or later) in each worker; where the image has none, Ray says so once in the log and
    the runtime's own watch still covers the job."""
    failure = contract.failure
    if not contract.scaling.use_gpu or failure.hang_timeout_seconds == 0:
        return {}
    confirm = failure.hang_timeout_seconds or hang.DEFAULT_FLOOR_SECONDS
    return {
        NCCL_HANG_DETECTOR_ENV: "1",
        NCCL_RAS_ACTION_ENV: "observe" if failure.on_hang == hang.ON_HANG_REPORT else "fail",
        NCCL_RAS_CONFIRM_ENV: f"{confirm:g}",
    }


# -- in each training process ---------------------------------------------------------------------


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(os.path.realpath(p) + os.sep for p in found))


def frames_of(frame: Any, libraries: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """A thread's frames, outermost first, as raytrain_contract.hang.place reads them."""
    libraries = _library_dirs() if libraries is None else libraries
    out = []
    for summary in traceback.extract_stack(frame):
        path = os.path.realpath(summary.filename)
        out.append(
            {
                "file": summary.filename,
                "line": summary.lineno,
                "function": summary.name,
                "source": (summary.line or "").strip(),
                "library": path.startswith(tuple(libraries))
                or "/site-packages/" in path
                or "/dist-packages/" in path,
            }
        )
    return out


def _training_thread(frames: Mapping[int, Any], threads: Mapping[int, threading.Thread]) -> int:
    if _TRAINING_THREAD is not None and _TRAINING_THREAD in frames:
        return _TRAINING_THREAD
    for ident, thread in threads.items():
        if thread.name.startswith(RAY_TRAINING_THREAD) and ident in frames:
            return ident
    return -1


def dump_stacks() -> dict[str, Any]:
    """Every thread's stack of this process, the training thread's first and as frames too.

    Runs in a training worker process (Ray Train's ``execute`` on its actor), beside the
    training thread, which may be stuck anywhere.
    """
    frames = sys._current_frames()
    threads = {t.ident: t for t in threading.enumerate() if t.ident is not None}
    me = threading.get_ident()
    training = _training_thread(frames, threads)
    pod, node = steptime.identity()
    lines = [f"pid {os.getpid()}, pod {pod or '?'}, node {node or '?'}"]

    def first_the_training_thread(ident: int) -> tuple[bool, str]:
        return ident != training, threads[ident].name if ident in threads else ""

    order = sorted((i for i in frames if i != me), key=first_the_training_thread)
    for ident in order:
        name = threads[ident].name if ident in threads else "?"
        mark = " [the training loop]" if ident == training else ""
        lines.append(f'\nThread "{name}" (0x{ident:x}){mark}, most recent call last:')
        lines.append("".join(traceback.format_stack(frames[ident])).rstrip("\n"))
    text = "\n".join(lines)
    if len(text) > STACK_TEXT_LIMIT:
        text = text[:STACK_TEXT_LIMIT] + "\n[... cut to bound the dump ...]"
    return {
        "pid": os.getpid(),
        "pod": pod,
        "node": node,
        "frames": frames_of(frames[training]) if training in frames else [],
        "text": text,
    }


# -- in Ray Train's controller --------------------------------------------------------------------


class Watch:
    """When a dump is due: the timeout from the report intervals, counted from the latest
    report (or the worker group's start), one dump per stall. Pure; times in seconds."""

    def __init__(self, configured: float | None) -> None:
        self.configured = configured
        self.intervals: list[float] = []
        self.reports = 0
        self.last: float | None = None
        self._last_report: float | None = None
        self.fired = False

    def start(self, now: float) -> None:
        """A worker group started: the watch counts from here (its intervals start anew)."""
        self.last, self._last_report, self.fired = now, None, False
        self.intervals = []

    def report(self, now: float) -> None:
        self.reports += 1
        if self._last_report is not None:
            self.intervals.append(now - self._last_report)
            del self.intervals[: -hang.INTERVALS_KEPT]
        self.last = self._last_report = now
        self.fired = False

    def timeout(self) -> float | None:
        return hang.timeout_seconds(self.configured, hang.median_interval(self.intervals))

    def due(self, now: float) -> float | None:
        """The timeout, when it has passed since the last progress and no dump was made for
        this stall; else None."""
        timeout = self.timeout()
        if timeout is None or self.fired or self.last is None:
            return None
        return timeout if now - self.last >= timeout else None


def collect(
    workers: Sequence[Any],
    dump: Callable[[], dict[str, Any]] = dump_stacks,
    answer_seconds: float = hang.STACKS_ANSWER_SECONDS,
) -> tuple[list[dict[str, Any]], dict[int, str], list[int]]:
    """Ask every worker for its stacks: (ranks with where each one is, texts by rank, ranks
    that did not answer in time)."""
    import ray

    refs: dict[Any, int] = {}
    unanswered: list[int] = []
    for index, worker in enumerate(workers):
        context = getattr(worker, "distributed_context", None)
        rank = int(getattr(context, "world_rank", index))
        try:
            refs[worker.execute_async(dump)] = rank
        except Exception as exc:
            log.warning("could not ask rank %d for its stacks: %s", rank, exc)
            unanswered.append(rank)
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=answer_seconds)
    ranks: list[dict[str, Any]] = []
    texts: dict[int, str] = {}
    for ref, rank in refs.items():
        if ref not in ready:
            unanswered.append(rank)
            texts[rank] = f"no answer within {answer_seconds:g} s"
            continue
        try:
            found = ray.get(ref)
        except Exception as exc:
            unanswered.append(rank)
            texts[rank] = f"the dump failed: {type(exc).__name__}: {exc}"
            continue
        where = hang.place(found.get("frames") or [])
        ranks.append(
            {
                "rank": rank,
                "pod": found.get("pod"),
                "node": found.get("node"),
                "where": where.where,
                "waiting": where.waiting,
            }
        )
        texts[rank] = str(found.get("text") or "")
    return sorted(ranks, key=lambda r: r["rank"]), texts, sorted(unanswered)


def make_hang_watch(
    queue: Any, configured: float | None, clock: Callable[[], float] = time.time
) -> Any | None:
    """The controller's callback that dumps every rank's stacks on a hang and puts them on
    ``queue`` for the driver; None when the watch is off (``configured`` 0) or this Ray has no
    such callbacks."""
    if configured is not None and configured <= 0:
        return None
    try:
        from ray.train.v2._internal.execution.callback import ReportCallback, WorkerGroupCallback
    except ImportError:
        return None

    class HangWatch(WorkerGroupCallback, ReportCallback):  # type: ignore[misc]
        # Every hook runs on the controller's own loop, one at a time: no lock (and none could
        # be pickled to the controller with the callback).
        def __init__(self) -> None:
            self.watch = Watch(configured)
            self._workers: list[Any] = []

        def after_worker_group_start(self, worker_group: Any) -> None:
            try:
                self._workers = list(worker_group.get_workers())
                self.watch.start(clock())
                queue.put_nowait(("started", {"workers": len(self._workers)}, None))
            except Exception:  # the watch must never break training
                log.exception("the hang watch could not follow the new worker group")

        def before_worker_group_shutdown(self, worker_group: Any) -> None:
            self._workers = []

        def after_report(self, training_report: Any, metrics: Any) -> None:
            self.watch.report(clock())

        def after_worker_group_poll_status(self, worker_group_status: Any) -> None:
            timeout = self.watch.due(clock())
            if timeout is None or not self._workers:
                return
            self.watch.fired = True
            workers, last = list(self._workers), self.watch.last
            # Off the controller's loop: the dump waits for every worker's answer.
            threading.Thread(
                target=self._dump,
                args=(workers, timeout, last),
                name="raytrain-hang-dump",
                daemon=True,
            ).start()

        def _dump(self, workers: list[Any], timeout: float, last: float | None) -> None:
            try:
                log.warning(
                    "no training report for %.0f s (hang timeout %s): asking the %d training "
                    "processes for their stacks",
                    clock() - (last or clock()),
                    f"{timeout:g} s",
                    len(workers),
                )
                ranks, texts, unanswered = collect(workers)
                payload = {
                    "timeoutSeconds": timeout,
                    "lastProgress": last,
                    "time": clock(),
                    "workers": len(workers),
                    "ranks": ranks,
                    "unanswered": unanswered,
                    "texts": {str(r): t for r, t in texts.items()},
                }
                log.warning("where the ranks are: %s", hang.describe_ranks(ranks, len(workers)))
                queue.put_nowait(("hang", payload, None))
            except Exception:
                log.exception("the hang watch could not collect the ranks' stacks")

    return HangWatch()


# -- on the driver --------------------------------------------------------------------------------


def stacks_text(payload: Mapping[str, Any], run_name: str, attempt: int) -> str:
    """One dump as stacks.txt holds it: what was found, grouped, then each rank's stacks."""
    from raytrain_contract.timefmt import rfc3339

    ranks = [r for r in payload.get("ranks") or [] if isinstance(r, Mapping)]
    workers = payload.get("workers")
    taken = payload.get("time")
    last = payload.get("lastProgress")
    timeout = payload.get("timeoutSeconds")
    when = rfc3339(float(taken)) if isinstance(taken, int | float) else "?"
    quiet = (
        f"no training report for {float(taken) - float(last):.0f} s"
        if isinstance(taken, int | float) and isinstance(last, int | float)
        else "no training report"
    )
    limit = f" (hang timeout {timeout:g} s)" if isinstance(timeout, int | float) else ""
    lines = [
        f"Stacks of the training processes of run {run_name}, attempt {attempt}, taken {when}: "
        f"{quiet}{limit}.",
        "",
        "Where the ranks were: "
        + hang.describe_ranks(ranks, workers if isinstance(workers, int) else None)
        + ".",
    ]
    suspects = hang.suspects(ranks)
    if suspects:
        lines.append(
            "Not waiting on the others (the likely cause): "
            + ", ".join(f"rank {r}" for r in suspects)
            + "."
        )
    texts = payload.get("texts") or {}
    by_rank = {int(r["rank"]): r for r in ranks if isinstance(r.get("rank"), int)}
    for key in sorted(texts, key=lambda k: int(k)):
        rank = int(key)
        entry = by_rank.get(rank, {})
        lines += ["", f"=== rank {rank}: {entry.get('where') or 'no stacks'} ===", str(texts[key])]
    return "\n".join(lines) + "\n"
