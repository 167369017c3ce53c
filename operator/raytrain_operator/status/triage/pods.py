"""What the attempt's pods and events show: OOMKilled, an image that cannot be pulled, a node
that went away, a pod that cannot be placed (`classify_pods`); and a RayCluster's
ReplicaFailure shaped as Events (`replica_failure_events`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from raytrain_contract.meta import LABEL_ROLE
from raytrain_operator.status.triage.memory import head_fix, worker_fix
from raytrain_operator.status.triage.model import FailureClass, Triage

_IMAGE_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
_IMAGE_PERMANENT = ("InvalidImageName", "ErrImageNeverPull")
_IMAGE_NOT_FOUND = re.compile(
    r"not found|manifest unknown|repository does not exist|name unknown|invalid reference",
    re.IGNORECASE,
)
#: DisruptionTarget reasons that mean the node (not the user) took the pod away.
NODE_DISRUPTIONS = ("DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet")
_QUOTA = re.compile(r"exceeded quota|forbidden: .*quota", re.IGNORECASE)


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
