"""OOMKilled by Ray's memory monitor: its words in a failure's text, and which pod, rank and
process it killed, from the most to the least certain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raytrain_operator.status.triage.memory import _raise_head, head_fix, worker_fix
from raytrain_operator.status.triage.model import Evidence, FailureClass, Triage
from raytrain_operator.status.triage.pods import _is_head, _name, _node_type
from raytrain_operator.status.triage.tracebacks import last_traceback_lines

#: How much of Ray's memory monitor text a message quotes.
RAY_MEMORY_QUOTE = 600
#: The raylet's words when its memory monitor kills a worker; a report may keep only the
#: later ones ("... address the out of memory issue ..."), cut by the message's length.
_RAY_MEMORY = re.compile(
    r"ray\.exceptions\.OutOfMemoryError|running low on memory|address the out of memory issue",
    re.I,
)


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
