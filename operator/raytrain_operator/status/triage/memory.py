"""Running out of memory: what to raise for the head or a worker (`head_fix`, `worker_fix`),
and `head_out_of_memory`, the head's OOM kills its watcher saw (status.outOfMemory).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytrain_operator.status.triage.model import FailureClass, Triage


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


def head_out_of_memory(
    status: Mapping[str, Any], attempt: int, found: Triage, head_memory: str | None
) -> Triage:
    """OOMKilled on the head when its watcher saw the kernel kill a process in the head's
    container during this attempt (status.outOfMemory).

    The container lives on, so its pod never says OOMKilled, and what the attempt's failure
    looks like then (a lost driver, a job server that stopped answering, Unknown) only follows
    from it. An OOM kill the pods themselves showed is kept: it names its own pod.
    """
    seen = status.get("outOfMemory") or {}
    if seen.get("attempt") != attempt or not seen.get("kills"):
        return found
    if found.failure_class is FailureClass.OOM_KILLED and found.pod is not None:
        return found
    pod = str(seen.get("pod") or "?")
    container = str(seen.get("container") or "?")
    process = seen.get("process")
    if process:
        size = f", {seen['processMemory']} resident" if seen.get("processMemory") else ""
        killed = f"killed {process}{size}"
    else:
        killed = "killed a process"
    kills = int(seen["kills"])
    more = f" ({kills} kills in all)" if kills > 1 else ""
    limit = f" at its limit {seen['limit']}" if seen.get("limit") else ""
    peak = f" (peak {seen['peak']})" if seen.get("peak") else ""
    message = (
        f"the Ray head (pod {pod}) ran out of memory: the kernel {killed} inside container "
        f"{container}{limit}{peak}{more}; the container kept running, so the pod does not say "
        f"OOMKilled; {head_fix(head_memory or seen.get('limit'))}"
    )
    return Triage(FailureClass.OOM_KILLED, message, pod=pod, container=container)
