"""Why an attempt failed: one class from what the operator observes, and whether to retry.

Pure: the handlers gather the RayJob's status, the attempt's Ray pods, the events they have
(a RayCluster's ReplicaFailure, shaped as an Event) and the runtime's report; `classify` turns
them into a `Triage` with a stable reason (the condition reason, the Event reason and the
`reason` label of `raytrain_attempt_failures_total`), a message that names the pod, container,
exit code and what to do, and whether the fault is the infrastructure's or the user's.

Evidence is weighed from the most specific to the least: a container the kernel killed for
memory, an image that cannot be pulled, a pod that cannot be placed or whose node went away,
then what the runtime (or KubeRay) said: a collective timeout, a Python exception raised by the
user's code, else `Unknown`. `retry_decision` applies a `RetryPolicy` (class -> retry, plus
exit-code overrides): `DEFAULT_POLICY` merged with the job's `spec.retryPolicy` (`merge_policy`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypedDict

from raytrain_contract.frames import without_runtime_frames
from raytrain_contract.meta import LABEL_ROLE


class FailureClass(str, Enum):
    OOM_KILLED = "OOMKilled"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    UNSCHEDULABLE = "Unschedulable"
    NODE_LOST = "NodeLost"
    USER_EXCEPTION = "UserException"
    COLLECTIVE_TIMEOUT = "CollectiveTimeout"
    UNKNOWN = "Unknown"


#: The faults of the platform rather than of the user's code or sizing.
INFRASTRUCTURE = frozenset(
    {
        FailureClass.IMAGE_PULL_FAILED,
        FailureClass.UNSCHEDULABLE,
        FailureClass.NODE_LOST,
        FailureClass.COLLECTIVE_TIMEOUT,
    }
)


class RetryPolicy(TypedDict):
    """Class -> retry, and exit code -> retry (an exit code named here wins over its class)."""

    classes: Mapping[str, bool]
    exitCodes: Mapping[int, bool]


#: OOMKilled is not retried: the same memory limit and batch fail the same way (the next attempt
#: resumes from a checkpoint only to be killed again). A user exception is a bug in the training
#: loop and fails fast. Unknown keeps the retries every failure had before this classification.
DEFAULT_POLICY: RetryPolicy = {
    "classes": {
        FailureClass.OOM_KILLED.value: False,
        FailureClass.IMAGE_PULL_FAILED.value: True,
        FailureClass.UNSCHEDULABLE.value: True,
        FailureClass.NODE_LOST.value: True,
        FailureClass.USER_EXCEPTION.value: False,
        FailureClass.COLLECTIVE_TIMEOUT.value: True,
        FailureClass.UNKNOWN.value: True,
    },
    "exitCodes": {},
}


def merge_policy(
    classes: Mapping[str, bool] | None, exit_codes: Mapping[int, bool] | None
) -> RetryPolicy:
    """DEFAULT_POLICY with a job's spec.retryPolicy over it: a class it leaves out keeps its
    default; its exit codes are the only ones (the default names none)."""
    return {
        "classes": {**DEFAULT_POLICY["classes"], **(classes or {})},
        "exitCodes": {**DEFAULT_POLICY["exitCodes"], **(exit_codes or {})},
    }


UNKNOWN_HINT = (
    "the operator could not tell why (no OOMKilled, image, scheduling or node problem on the "
    "attempt's pods, no exception named); the driver's log says more: kubectl raytrain logs"
)

#: Lines of a traceback kept in a message (its end: the frames nearest the raise).
TRACEBACK_LINES = 12


@dataclass(frozen=True)
class Triage:
    failure_class: FailureClass
    message: str
    pod: str | None = None
    container: str | None = None
    exit_code: int | None = None
    #: The same input fails the same way (an invalid image name): no retry whatever the policy.
    permanent: bool = False
    #: The exception type a user exception or collective error names, if any.
    exception: str | None = None

    @property
    def reason(self) -> str:
        return self.failure_class.value

    @property
    def infrastructure(self) -> bool:
        return self.failure_class in INFRASTRUCTURE


def retry_decision(
    failure_class: FailureClass | str,
    exit_code: int | None,
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    permanent: bool = False,
) -> bool:
    """Whether an attempt that failed so is worth another attempt under `policy`."""
    if permanent:
        return False
    if exit_code is not None and exit_code in policy["exitCodes"]:
        return bool(policy["exitCodes"][exit_code])
    key = failure_class.value if isinstance(failure_class, FailureClass) else str(failure_class)
    return bool(policy["classes"].get(key, policy["classes"].get("Unknown", True)))


# ------------------------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class Evidence:
    """What the operator observed about one failed attempt."""

    rayjob_status: Mapping[str, Any]
    pods: Sequence[Mapping[str, Any]] = ()
    #: Kubernetes Events (reason, message, involvedObject), or a RayCluster's ReplicaFailure.
    events: Sequence[Mapping[str, Any]] = ()
    #: The runtime's report (status.trainerStatus) of this attempt, or {}.
    report: Mapping[str, Any] = field(default_factory=dict)
    #: spec.scaling.resourcesPerWorker.memory as written, for the OOM advice.
    worker_memory: str | None = None
    #: The head's memory limit as its pod gets it (spec.head.resources.limits.memory, or the
    #: operator's default said as such), for the OOM advice.
    head_memory: str | None = None


_IMAGE_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
_IMAGE_PERMANENT = ("InvalidImageName", "ErrImageNeverPull")
_IMAGE_NOT_FOUND = re.compile(
    r"not found|manifest unknown|repository does not exist|name unknown|invalid reference",
    re.IGNORECASE,
)
#: DisruptionTarget reasons that mean the node (not the user) took the pod away.
NODE_DISRUPTIONS = ("DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet")
_QUOTA = re.compile(r"exceeded quota|forbidden: .*quota", re.IGNORECASE)

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
    r"|CollectiveTimeoutError|NCCLHangError",
    re.IGNORECASE,
)
#: Ray's own errors (a dead actor, a node gone, Ray's memory monitor), never the user's code.
_RAY_NODE = re.compile(r"NodeDiedError|node (?:\S+ )?(?:died|was terminated|is dead)", re.I)
#: How much of Ray's memory monitor text a message quotes.
RAY_MEMORY_QUOTE = 600
#: The raylet's words when its memory monitor kills a worker; a report may keep only the
#: later ones ("... address the out of memory issue ..."), cut by the message's length.
_RAY_MEMORY = re.compile(
    r"ray\.exceptions\.OutOfMemoryError|running low on memory|address the out of memory issue",
    re.I,
)
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
#: Ray Train V2 carries a worker's exception in this wrapper; the type after it is the user's.
_WRAPPER = re.compile(r"UserExceptionWithTraceback:\s*")
#: A dotted type name as Python prints it (a class defined in a function has `<locals>` in it).
_EXC_NAME = r"((?:[A-Za-z_]\w*\.|<locals>\.)*[A-Za-z_]\w*)"
_TRACEBACK_END = re.compile(r"^" + _EXC_NAME + r"(?::\s|$)")
_NAMED_EXCEPTION = re.compile(
    r"(?:^|worker \d+: |failed: |controller: |raised |\n)"
    + r"((?:[A-Za-z_]\w*\.|<locals>\.)*"
    + r"[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Iteration))"
    + r"(?::|$|\s)",
    re.MULTILINE,
)


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "?")


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    st = pod.get("status") or {}
    return [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]


def _node_type(pod: Mapping[str, Any]) -> str | None:
    """head or worker: KubeRay's label of a Ray pod, else ours (the submitter's is neither)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    node_type = labels.get("ray.io/node-type") or labels.get(LABEL_ROLE)
    return str(node_type) if node_type else None


def _is_head(pod: Mapping[str, Any]) -> bool:
    return _node_type(pod) == "head" or _name(pod).endswith("-head") or ("-head-" in _name(pod))


def _memory_limit(container: Any, pod: Mapping[str, Any]) -> str | None:
    """The memory limit of one container of the pod, as its spec says."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == container:
            limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            return str(limit) if limit is not None else None
    return None


def _now(memory: str | None) -> str:
    return f" (now {memory})" if memory else " (unset now)"


def _raise_head(head_memory: str | None) -> str:
    return f"raise spec.head.resources.limits.memory{_now(head_memory)}"


def head_fix(head_memory: str | None) -> str:
    """What to raise when the head ran out of memory."""
    return (
        f"{_raise_head(head_memory)}: the head holds the driver, Ray Train's controller and "
        "Ray's own processes (GCS, dashboard, raylet); or keep less in the driver"
    )


def worker_fix(worker_memory: str | None) -> str:
    """What to raise when a worker pod ran out of memory."""
    return (
        f"raise spec.scaling.resourcesPerWorker.memory{_now(worker_memory)} or lower the batch "
        "size / model size per worker"
    )


def _oom(
    pods: Sequence[Mapping[str, Any]], worker_memory: str | None, head_memory: str | None
) -> Triage | None:
    for pod in pods:
        for cs in _statuses(pod):
            for key in ("state", "lastState"):
                term = (cs.get(key) or {}).get("terminated") or {}
                if term.get("reason") != "OOMKilled":
                    continue
                code = term.get("exitCode")
                code = code if isinstance(code, int) else None
                name, container = _name(pod), str(cs.get("name") or "?")
                # The callers that know the spec pass its values; else the pod's own limit.
                limit = _memory_limit(cs.get("name"), pod)
                if _is_head(pod):
                    what, fix = "the Ray head", head_fix(head_memory or limit)
                else:
                    fix = worker_fix(worker_memory)
                    if worker_memory is None and limit is not None:
                        fix = worker_fix(f"{limit} for the pod")
                    what = "a Ray worker"
                return Triage(
                    FailureClass.OOM_KILLED,
                    f"container {container} of pod {name} ({what}) was killed by the kernel for "
                    f"exceeding its memory limit (OOMKilled, exit code "
                    f"{code if code is not None else '?'}; the whole container, every process "
                    f"in it); {fix}",
                    pod=name,
                    container=container,
                    exit_code=code,
                )
    return None


def _image(pods: Sequence[Mapping[str, Any]]) -> Triage | None:
    for pod in pods:
        for cs in _statuses(pod):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = str(waiting.get("reason") or "")
            if reason not in _IMAGE_WAITING:
                continue
            detail = str(waiting.get("message") or "no message")
            image = str(cs.get("image") or "?")
            permanent = reason in _IMAGE_PERMANENT or bool(_IMAGE_NOT_FOUND.search(detail))
            name, container = _name(pod), str(cs.get("name") or "?")
            if permanent:
                fix = (
                    "the image reference cannot work as written: fix spec.image (name, tag, "
                    "registry)"
                )
            else:
                fix = (
                    "check that the node reaches the registry and that the pods' pull "
                    "credentials may read the image"
                )
            return Triage(
                FailureClass.IMAGE_PULL_FAILED,
                f"container {container} of pod {name} cannot pull image {image} ({reason}: "
                f"{detail}); {fix}",
                pod=name,
                container=container,
                permanent=permanent,
            )
    return None


def _node_lost(pods: Sequence[Mapping[str, Any]]) -> Triage | None:
    for pod in pods:
        st = pod.get("status") or {}
        name = _name(pod)
        reason = str(st.get("reason") or "")
        if reason in ("NodeLost", "Evicted", "Terminated", "NodeShutdown"):
            detail = str(st.get("message") or reason)
            node = (pod.get("spec") or {}).get("nodeName")
            where = f" on node {node}" if node else ""
            return Triage(
                FailureClass.NODE_LOST,
                f"pod {name}{where} was lost ({reason}: {detail}); the node, not the training "
                "code, ended the attempt",
                pod=name,
            )
        for cond in st.get("conditions") or []:
            if (
                cond.get("type") == "DisruptionTarget"
                and cond.get("status") == "True"
                and cond.get("reason") in NODE_DISRUPTIONS
            ):
                node = (pod.get("spec") or {}).get("nodeName")
                return node_deleted(name, cond.get("reason"), cond.get("message"), node=node)
    return None


def node_deleted(
    name: str, reason: Any, message: Any, *, node: str | None = None, what: str = "pod"
) -> Triage:
    """NodeLost for a pod Kubernetes deleted for its node (a NODE_DISRUPTIONS reason)."""
    where = f" on node {node}" if node else ""
    return Triage(
        FailureClass.NODE_LOST,
        f"{what} {name}{where} was deleted by Kubernetes ({reason}: {message or 'no message'}); "
        "the node went away, not the training code",
        pod=name,
    )


def _unschedulable(
    pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> Triage | None:
    for event in events:
        message = str(event.get("message") or "")
        if _QUOTA.search(message):
            obj = event.get("involvedObject") or {}
            who = f"{obj.get('kind') or 'object'} {obj.get('name') or '?'}"
            return Triage(
                FailureClass.UNSCHEDULABLE,
                f"a ResourceQuota refuses the pods ({event.get('reason') or 'FailedCreate'} on "
                f"{who}: {message}); ask for more quota in the namespace or lower "
                "spec.scaling (numWorkers, resourcesPerWorker)",
            )
    for pod in pods:
        cond = unschedulable_condition(pod)
        if cond is not None:
            name = _name(pod)
            message = str(cond.get("message") or "no message")
            advice = host_ports_advice(pod, message) or (
                "no node has the resources the pod requests: lower spec.scaling "
                "(resourcesPerWorker, numWorkers) or add nodes"
            )
            return Triage(
                FailureClass.UNSCHEDULABLE,
                f"pod {name} cannot be scheduled: {message}; {advice}",
                pod=name,
            )
    return None


def host_ports_advice(pod: Mapping[str, Any], message: str) -> str | None:
    """What to do when a host-network Ray pod is refused for its ports, else None.

    On the node's network a Ray pod's ports (KubeRay's metrics port 8080, and on the head GCS,
    dashboard and client) are the node's: the scheduler places one such pod of the job per
    node (seen on a real node: the second worker stayed Pending with "didn't have free ports").
    """
    if not (pod.get("spec") or {}).get("hostNetwork") or "free ports" not in message:
        return None
    return (
        "with hostNetwork every Ray pod holds Ray's ports on its node, so one pod of the job "
        "fits per node: put the workers in fewer pods (spec.scaling.workersPerPod), add "
        "nodes, or remove hostNetwork from spec.workerTemplate / spec.head"
    )


def unschedulable_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's PodScheduled=False condition with reason Unschedulable, if it has one."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return dict(cond)
    return None


#: Where Ray's memory monitor killed: the node's IP in its words ("Memory on the node (IP:
#: 10.0.0.5, ID: ...)") or in a dead actor's fields ("ip: 10.0.0.5").
_RAY_NODE_IP = re.compile(
    r"Memory on the node \(IP: ([0-9A-Fa-f.:]+)|^\s*ip: ([0-9A-Fa-f.:]+)\s*$", re.M
)
#: The process it killed, as each Ray version words it: "name=f, pid=7" (2.2 on); "Selected to
#: kill: (Task: ..., task name=f, required resources={...}, pid=7, ...)" among the workers its
#: policy considered (2.56 on, which may kill several: the first is named); "Actor(<id>)
#: pid=7"; a dead actor's own fields ("class_name: A", "pid: 7").
_SELECTED = re.compile(
    r"Selected to kill: \([^\n]*?\bname=(?P<name>[^,\n]+?),[^\n]*?\bpid=(?P<pid>\d+)"
)
_KILLED = re.compile(r"\bname=(?P<name>[^,\n]+?),[^\n]*?\bpid=(?P<pid>\d+)")
_KILLED_ACTOR = re.compile(r"\b(?P<name>Actor\([0-9a-f]+\)) pid=(?P<pid>\d+)")
_CLASS_NAME = re.compile(r"^\s*class_name: (\S+)\s*$", re.M)
_PID_FIELD = re.compile(r"^\s*pid: (\d+)\s*$", re.M)
#: How full the node was: "was 1.95GB / 2.00GB (0.975)" (before 2.56, then "which exceeds the
#: memory usage threshold of 0.95"), "was 1.95GB used / 2.00GB limit (0.975000)" (2.56 on).
_RAY_USAGE = re.compile(r"\bwas ([\d.]+GB(?: used)? / [\d.]+GB(?: limit)? \(\d*\.?\d+\))")
_RAY_THRESHOLD = re.compile(r"memory usage threshold of (\d*\.\d+)")
#: A line of Ray's "Top 10 memory users" (PID, MEM(GB), COMMAND).
_MEMORY_USER = re.compile(r"^\s*(\d+)\s+\d+(?:\.\d+)?\s+(\S[^\n]*?)\s*$", re.M)
#: Processes only the head runs: the driver (`python -m trainer_runtime`), Ray Train's
#: controller (Ray places it on the driver's node), the job supervisor, GCS and the dashboard
#: (Ray cuts the dashboard's command short: ".../ray/dashboard/dashboa...").
_HEAD_PROCESS = re.compile(
    r"-m trainer_runtime\b(?!\.)|TrainController|JobSupervisor|gcs_server|dashboard/dashboa"
)
#: Ray Train's worker actor; the head starts with no CPU (HEAD_START_PARAMS), so none runs there.
_WORKER_PROCESS = re.compile(r"RayTrainWorker")
#: The runtime's report names who failed (trainer_runtime/failure.py, `headline`).
_CONTROLLER_FAILED = re.compile(r"training failed in the Ray Train controller")
_RANK_FAILED = re.compile(r"(?:^|training failed: |; )worker (\d+): ", re.M)

HEAD, WORKER = "head", "worker"


@dataclass(frozen=True)
class _Place:
    """Where Ray's memory monitor killed: the pod's role and name, the rank, the process."""

    role: str | None = None
    pod: str | None = None
    rank: str | None = None
    process: str | None = None


def _killed_process(text: str) -> tuple[str | None, str | None]:
    """The pid and the name (or command) of the process Ray's memory monitor killed."""
    found = _SELECTED.search(text) or _KILLED.search(text) or _KILLED_ACTOR.search(text)
    pid = found.group("pid") if found else None
    name = found.group("name").strip() if found else None
    if found is None:
        cls, field = _CLASS_NAME.search(text), _PID_FIELD.search(text)
        pid, name = (field.group(1) if field else None), (cls.group(1) if cls else None)
    if pid is not None and (name is None or name.startswith("Actor(")):
        for user_pid, command in _MEMORY_USER.findall(text):
            if user_pid == pid:
                name = command
                break
    return pid, name


def _role(pod: Mapping[str, Any]) -> str:
    return HEAD if _is_head(pod) else WORKER


def _ray_memory_place(text: str, pods: Sequence[Mapping[str, Any]]) -> _Place:
    """Which pod Ray's memory monitor killed on, from the most to the least certain: the node's
    IP among the pods' IPs (pods on the node's network share one and do not decide), the
    process it killed, the processes using the most memory there, who the runtime says failed."""
    pid, name = _killed_process(text)
    process = f"process {pid} ({name})" if pid and name else f"process {pid}" if pid else None
    # The submitter runs no Ray node: only the head's and the workers' IPs place a kill.
    ray_pods = [p for p in pods if _is_head(p) or _node_type(p) == WORKER]
    for groups in _RAY_NODE_IP.findall(text):
        ip = next(g for g in groups if g)
        there = [p for p in ray_pods if (p.get("status") or {}).get("podIP") == ip]
        if len({_role(p) for p in there}) == 1:
            named = _name(there[0]) if len(there) == 1 else None
            return _Place(_role(there[0]), named, process=process)
    role: str | None = None
    if name and _HEAD_PROCESS.search(name):
        role = HEAD
    elif name and _WORKER_PROCESS.search(name):
        role = WORKER
    elif _CONTROLLER_FAILED.search(text) or any(
        _HEAD_PROCESS.search(command) for _, command in _MEMORY_USER.findall(text)
    ):
        role = HEAD
    rank = _RANK_FAILED.search(text)
    if role is None and rank is not None:
        role = WORKER
    pod = None
    if role == HEAD:
        heads = [p for p in ray_pods if _is_head(p)]
        pod = _name(heads[0]) if len(heads) == 1 else None
    return _Place(role, pod, rank.group(1) if rank and role == WORKER else None, process)


def _ray_memory(text: str, source: str, evidence: Evidence) -> Triage:
    """OOMKilled by Ray's memory monitor: the pod it killed on and the field that sizes it."""
    # Ray's text is long (its settings, its policy's history): the fix must not be cut off.
    said = last_traceback_lines(text, 4)
    usage, threshold = _RAY_USAGE.search(text), _RAY_THRESHOLD.search(text)
    if usage is not None:
        over = f" over the threshold {threshold.group(1)}" if threshold else ""
        said = f"Ray saw {usage.group(1)}{over}\n{said}"
    said = said if len(said) <= RAY_MEMORY_QUOTE else said[:RAY_MEMORY_QUOTE] + " ..."
    # The other text (the report or KubeRay's) may keep what this one lost, the IP first.
    texts = [str((evidence.report or {}).get("message") or "")]
    rj = evidence.rayjob_status
    texts += [str(rj.get(k)) for k in ("message", "failedReason", "reason") if rj.get(k)]
    place = _ray_memory_place("\n".join([text, *(t for t in texts if t != text)]), evidence.pods)
    killed = f"Ray's memory monitor killed {place.process or 'a process'}"
    why = "when the pod's memory passed Ray's threshold"
    if place.role == HEAD:
        where = f"the Ray head (pod {place.pod})" if place.pod else "the Ray head"
        message = f"{killed} on {where} {why} ({source}: {said}); {head_fix(evidence.head_memory)}"
    elif place.role == WORKER:
        if place.pod:
            where = f"Ray worker pod {place.pod}"
        elif place.rank is not None:
            where = f"the pod of Ray Train worker {place.rank}"
        else:
            where = "a Ray worker pod"
        message = (
            f"{killed} on {where} {why} ({source}: {said}); {worker_fix(evidence.worker_memory)}"
        )
    else:
        message = (
            f"{killed} when its pod's memory passed Ray's threshold ({source}: {said}); Ray's "
            "words do not say which pod: if the head (its driver, Ray Train's controller, GCS, "
            f"dashboard), {_raise_head(evidence.head_memory)}; if a worker, "
            f"{worker_fix(evidence.worker_memory)}"
        )
    return Triage(FailureClass.OOM_KILLED, message)


def last_traceback_lines(text: str, count: int = TRACEBACK_LINES) -> str:
    """The last `count` non-empty lines of the last traceback in `text`, else of `text`,
    without the frames of the runtime's wrappers around the training function (the runtime's
    report leaves them out too)."""
    at = text.rfind("Traceback (most recent call last):")
    body = without_runtime_frames(text[at:] if at >= 0 else text)
    lines = [line for line in body.splitlines() if line.strip()]
    return "\n".join(lines[-count:])


def exception_type(text: str) -> str | None:
    """The exception a failure message names: the end of its last traceback, else the first
    `Name: ...` that looks like an exception type."""
    text = _WRAPPER.sub("", text)
    at = text.rfind("Traceback (most recent call last):")
    if at >= 0:
        lines = text[at:].splitlines()
        # The exception's line is the first one after the frames that is not indented: what
        # follows it (KubeRay puts the RayJob's reason after the quoted log) names no exception.
        for line in lines[1:]:
            if line.strip() and not line.startswith((" ", "\t")):
                found = _TRACEBACK_END.match(line.strip())
                if found:
                    return found.group(1)
                break
        for line in reversed(lines):
            found = _TRACEBACK_END.match(line.strip())
            if found and not line.startswith((" ", "\t")):
                return found.group(1)
    found = _NAMED_EXCEPTION.search(text)
    return found.group(1) if found else None


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
    if _RAY_MEMORY.search(text):
        return _ray_memory(text, source, evidence or Evidence(rayjob_status={}))
    exc = exception_type(text)
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


def classify_pods(
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]] = (),
    worker_memory: str | None = None,
    *,
    head_memory: str | None = None,
) -> Triage | None:
    """What the pods (and events) alone show: OOMKilled, ImagePullFailed, NodeLost or
    Unschedulable, else None. Also asked while a cluster starts or when a deadline ends it."""
    return (
        _oom(pods, worker_memory, head_memory)
        or _image(pods)
        or _node_lost(pods)
        or _unschedulable(pods, events)
    )


def classify(evidence: Evidence) -> Triage:
    """The class of a failed attempt from everything observed (see the module docstring)."""
    found = classify_pods(
        evidence.pods, evidence.events, evidence.worker_memory, head_memory=evidence.head_memory
    )
    if found is not None:
        return found
    report = evidence.report or {}
    if report.get("phase") == "Failed":
        found = _from_text(
            str(report.get("message") or ""),
            "reported by the trainer runtime",
            evidence=evidence,
        )
        if found is not None:
            return found
    rj = evidence.rayjob_status
    rj_text = "\n".join(str(rj.get(k)) for k in ("message", "failedReason", "reason") if rj.get(k))
    found = _from_text(
        rj_text,
        "from the RayJob's status",
        user_needs_traceback=True,
        evidence=evidence,
    )
    if found is not None:
        return found
    detail = str(report.get("message") or "") if report.get("phase") == "Failed" else ""
    detail = detail or rj_text or "no message"
    return Triage(FailureClass.UNKNOWN, f"{last_traceback_lines(detail, 6)}; {UNKNOWN_HINT}")


def advice(triage: Triage, retried: bool, policy: RetryPolicy = DEFAULT_POLICY) -> str:
    """What the retry decision was and how to change it (spec.retryPolicy)."""
    if retried:
        return ""
    if triage.permanent:
        return (
            " Not retried: the same input fails the same way on every attempt, so "
            "spec.backoffLimit is not spent on it."
        )
    code = triage.exit_code
    if code is not None and policy["exitCodes"].get(code) is False:
        return (
            f" Not retried: spec.retryPolicy.exitCodes says exit code {code} is not retried, so "
            "spec.backoffLimit is not spent on it; fix the cause and create the TrainJob again, "
            f"or set retry: true for code {code} in spec.retryPolicy.exitCodes."
        )
    setting = policy["classes"].get(triage.reason)
    if setting is False:
        why = {
            FailureClass.OOM_KILLED: "the same memory limit fails the same way",
            FailureClass.USER_EXCEPTION: "an exception in the training code fails the same "
            "way on every attempt",
        }.get(triage.failure_class, "this class is not retried")
        if DEFAULT_POLICY["classes"].get(triage.reason) is not False:
            why = f"spec.retryPolicy.classes.{triage.reason} is false"
        return (
            f" Not retried ({why}), so spec.backoffLimit is not spent on it; fix the cause "
            "and create the TrainJob again, or set "
            f"spec.retryPolicy.classes.{triage.reason}: true."
        )
    return ""


def replica_failure_events(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A RayCluster's ReplicaFailure (the raycluster index entries) shaped as Events."""
    out: list[dict[str, Any]] = []
    for entry in entries:
        failure = entry.get("replicaFailure") or {}
        if failure:
            out.append(
                {
                    "reason": failure.get("reason"),
                    "message": failure.get("message"),
                    "involvedObject": {"kind": "RayCluster", "name": entry.get("name")},
                }
            )
    return out
