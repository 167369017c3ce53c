"""What every pod we template gets besides its job: a /dev/shm sized for Ray's object store, the
security context, the grace period and shared PID namespace, and the preStop hooks of the
workers (drain) and the head (disruption). builders/pods.py applies them.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from raytrain_contract.pods import container_security_context, pod_security_context
from raytrain_operator.builders import quantities

SHM_VOLUME = "raytrain-shm"
SHM_PATH = "/dev/shm"
#: Ray's default object store size as a share of the memory Ray sees (the container's limit):
#: `ray._private.ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION`. Ray keeps the store in
#: /dev/shm only when /dev/shm holds all of it; otherwise it falls back to /tmp on disk and warns
#: that this "will harm performance".
OBJECT_STORE_SHARE = Decimal("0.3")
#: Beyond the object store, /dev/shm also carries PyTorch DataLoader workers' tensors and NCCL's
#: shared-memory transport between the GPUs of one pod.
SHM_HEADROOM_SHARE = Decimal("0.1")
MEBIBYTE = 2**20

#: Time a pod has between SIGTERM (a delete, a node drain, a suspend) and SIGKILL. Kubernetes'
#: default of 30 s is shorter than writing a multi-GB checkpoint to S3 (at the ~400 MB/s measured
#: against MinIO on loopback, 10 GB take 25 s; a real bucket is several times slower).
#: It bounds what runs before the SIGTERM (a preStop hook): nothing waits for it otherwise.
DEFAULT_TERMINATION_GRACE_SECONDS = 120
#: A worker's preStop hook (trainer_runtime/drain.py) tells Ray its node goes at the end of the
#: grace period less this margin, which is left for Ray's own shutdown after the SIGTERM.
DRAIN_MARGIN_SECONDS = 10
DRAIN_COMMAND = ["python", "-m", "trainer_runtime.drain"]
#: Seconds from the start of a worker's deletion to the deadline its drain gives Ray.
ENV_DRAIN_SECONDS = "RAYTRAIN_DRAIN_SECONDS"
#: A Ray pod's own name (the downward API), for its preStop hook.
ENV_POD_NAME = "RAYTRAIN_POD_NAME"


def shm_size_limit(resources: dict[str, Any], field: str) -> str | None:
    """Size of /dev/shm for a container with these resources; None without a memory limit.

    Ray sizes its object store from the memory it sees, which is the container's memory limit
    when there is one. Without a limit Ray sees the node's memory and the tmpfs is sized to the
    node as well, so no limit is the only size that still holds the object store.
    """
    limit = (resources.get("limits") or {}).get("memory")
    if limit is None:
        return None
    memory = quantities.parse(limit, field)
    share = memory * (OBJECT_STORE_SHARE + SHM_HEADROOM_SHARE)
    mebibytes = -(-quantities.as_bytes(share) // MEBIBYTE)
    return quantities.memory_string(Decimal(mebibytes * MEBIBYTE))


def shm_volume(size_limit: str | None) -> dict[str, Any]:
    """A memory-backed emptyDir for /dev/shm.

    The container runtime's default /dev/shm is 64 MiB, far below Ray's object store. KubeRay
    mounts one sized to the whole memory limit when the template has none; ours is sized for
    the object store, so a full /dev/shm fails writes with ENOSPC instead of leaving the
    training processes no memory (tmpfs pages count against the container's limit).
    """
    empty_dir: dict[str, Any] = {"medium": "Memory"}
    if size_limit is not None:
        empty_dir["sizeLimit"] = size_limit
    return {"name": SHM_VOLUME, "emptyDir": empty_dir}


def harden_pod(pod: dict[str, Any], grace_seconds: int | None) -> None:
    """Security context, grace period and PID namespace shared by every pod we template.

    PID 1: KubeRay replaces the Ray container's command with `/bin/bash -c -- "ulimit -n 65536;
    ray start ... --block"` (common/pod.go, BuildPod) and the submitter's with `/bin/bash -ce --
    "... ray job logs --follow ..."`, so neither tini nor an entrypoint of ours can come first
    (KubeRay's `ray.io/overwrite-container-cmd` would let tini in, but only in images that ship
    it, and we would then own the generated `ray start` line). A bash or Python PID 1 has no
    SIGTERM handler and the kernel drops signals a PID 1 does not handle: every delete waited
    the whole grace period, then SIGKILL. With a shared process namespace the pause process is
    PID 1 (and reaps orphans); the container's process takes SIGTERM's default action and exits,
    and the runtime kills the rest of a container that shares a PID namespace when its first
    process exits (containerd's runc shim, ShouldKillAllOnExit), so a pod goes in about a second
    however long the grace period is. The grace period is then the budget of what runs before
    that SIGTERM, a preStop hook such as one that lets a checkpoint upload finish. The price of
    sharing, containers of the pod seeing each other's processes, is paid between containers
    that run the same image as the same user.
    """
    pod["securityContext"] = pod_security_context()
    pod["shareProcessNamespace"] = True
    pod["terminationGracePeriodSeconds"] = (
        grace_seconds if grace_seconds is not None else DEFAULT_TERMINATION_GRACE_SECONDS
    )
    for container in pod["containers"]:
        container["securityContext"] = container_security_context()


def add_drain_hook(container: dict[str, Any], grace_seconds: int) -> None:
    """A preStop hook that drains the worker's Ray node before the container gets SIGTERM.

    Ray Train (2.60) watches Ray's draining nodes: the training loop then sees
    `ray.train.get_preemption_info()` and can report a checkpoint, and the controller restarts
    the worker group once the deadline passes, against FailureConfig.max_preemption_failures
    rather than max_failures. The hook waits while the pod's Ray Train worker lives, up to the
    deadline; a pod with none (the job has finished), or that is deleted without a
    DisruptionTarget condition (a suspend, a retry), stops at once.
    """
    container["lifecycle"] = {"preStop": {"exec": {"command": list(DRAIN_COMMAND)}}}
    seconds = max(1, grace_seconds - DRAIN_MARGIN_SECONDS)
    container["env"].append({"name": ENV_DRAIN_SECONDS, "value": str(seconds)})
    container["env"].append(pod_name_env())


def add_head_hook(container: dict[str, Any]) -> None:
    """A preStop hook that records in the TrainJob's status (status.disrupted) that the head
    was evicted or preempted, read from its own pod's DisruptionTarget condition: the attempt
    ends with the head, and the pod may be gone before the operator reads it."""
    container["lifecycle"] = {"preStop": {"exec": {"command": [*DRAIN_COMMAND, "--head"]}}}
    container["env"].append(pod_name_env())


def pod_name_env() -> dict[str, Any]:
    """The pod's own name (the downward API), for its preStop hook."""
    return {"name": ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
