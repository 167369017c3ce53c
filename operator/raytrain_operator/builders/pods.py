"""Pod templates of the Ray head, workers and submitter: storage, contract, resources,
placement, and the hardening every pod gets.

Every pod (head and workers) gets the same storage wiring and the contract mount, so a path
written by one worker is the same path on every other and on the head. Credentials reach the
pods only as `secretKeyRef` environment variables: the builders never see a Secret's values.
Every pod, KubeRay's submitter included, runs as the runtime image's non-root user with no
capabilities and the runtime's seccomp profile, so the pods pass the `restricted` Pod Security
Standard (docs/operator.md, "Pod hardening").
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from raytrain_contract.api.v1alpha1 import (
    NVIDIA_GPU,
    NetworkProfile,
    PlacementStrategy,
    PodOverrides,
    TrainJobSpec,
)
from raytrain_contract.meta import (
    LABEL_ROLE,
    LABEL_TRAINJOB,
    Meta,
    allowed_from_parent,
    base_labels,
    without_denied,
)
from raytrain_contract.pods import (
    STORAGE_VOLUME,
    SUBMITTER_CONTAINER,
    chosen_service_account,
    container_security_context,
    pod_security_context,
    storage_env,
    storage_mounts,
    storage_volumes,
    user_env,
)
from raytrain_operator.builders import quantities
from raytrain_operator.builders.contract import (
    CONTRACT_DIR,
    CONTRACT_KEY,
    CONTRACT_PATH,
    gpu_resource_name,
    gpus_per_worker,
)
from raytrain_operator.builders.names import contract_configmap_name, runtime_account_name

GPU_RESOURCE = NVIDIA_GPU
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: Ray's resource for an accelerator type (`ray.util.accelerators`, ScalingConfig).
RAY_ACCELERATOR_PREFIX = "accelerator_type:"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
CONTRACT_VOLUME = "raytrain-contract"
HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
#: The head runs Ray's control processes and the driver, never training workers. For the
#: smallest loop (`nn.Linear(10, 2)` on two workers) they peaked at 2.16 GiB (usage less inactive
#: file, what Ray's memory monitor counts): the driver with torch, Ray Train's controller and its
#: helper actors, GCS, the raylet, the dashboard, its modules and agent (Ray 2.60, a head of
#: `--num-cpus=0` in a memory cgroup of its own). Ray kills at 95 % of the limit: 2Gi failed at
#: the first report; 4Gi leaves 1.6 GiB for a driver that holds a little data.
DEFAULT_HEAD_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "1", "memory": "4Gi"},
    "limits": {"memory": "4Gi"},
}

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
#: The pod's IP (the downward API), given to `ray start --node-ip-address` in host-network pods.
ENV_POD_IP = "RAYTRAIN_POD_IP"

#: KubeRay's own defaults for the submitter (GetDefaultSubmitterContainer): giving a
#: submitterPodTemplate replaces its whole default container, so they are restated here.
SUBMITTER_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "500m", "memory": "200Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}


#: What each network profile adds to a worker pod: its device resource and NCCL's environment
#: (raytrain_contract/api/v1alpha1.py, NetworkSpec, says why each variable is set).
NETWORK_DEVICE = {
    NetworkProfile.INFINIBAND: "rdma/ib",
    NetworkProfile.EFA: "vpc.amazonaws.com/efa",
}
NETWORK_ENV = {
    NetworkProfile.INFINIBAND: {"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB", "NCCL_DEBUG": "WARN"},
    NetworkProfile.EFA: {"FI_PROVIDER": "efa", "NCCL_DEBUG": "WARN"},
}
#: RDMA registers (pins) the buffers it sends from with the NIC: more locked memory than the
#: default limit allows without it.
RDMA_CAPABILITY = "IPC_LOCK"


def pod_service_account(spec: TrainJobSpec, meta: Meta, overrides: PodOverrides | None) -> str:
    """The pods' service account: the user's override, the IRSA account, or the per-job one."""
    return chosen_service_account(spec, overrides) or runtime_account_name(meta.name)


def contract_env(meta: Meta) -> list[dict[str, Any]]:
    return [
        {"name": "RAYTRAIN_CONTRACT", "value": CONTRACT_PATH},
        {"name": "RAYTRAIN_TRAINJOB_NAMESPACE", "value": meta.namespace},
        {"name": "RAYTRAIN_TRAINJOB_NAME", "value": meta.name},
    ]


def volumes(spec: TrainJobSpec, meta: Meta) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = [
        {
            "name": CONTRACT_VOLUME,
            "configMap": {
                "name": contract_configmap_name(meta.name),
                "items": [{"key": CONTRACT_KEY, "path": CONTRACT_KEY}],
            },
        }
    ]
    return vols + storage_volumes(spec)


def volume_mounts(spec: TrainJobSpec) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": CONTRACT_VOLUME, "mountPath": CONTRACT_DIR, "readOnly": True}
    ]
    return mounts + storage_mounts(spec)


def _scaled(name: str, amount: int | str, per_pod: int) -> str:
    """One resourcesPerWorker amount given by its Kubernetes name, times workersPerPod."""
    field = f"spec.scaling.resourcesPerWorker.{name}"
    value = quantities.parse(amount, field) * per_pod
    if "/" in name:
        return quantities.decimal_string(value)
    return quantities.memory_string(value)


def _scaling_resources(spec: TrainJobSpec) -> dict[str, tuple[str, str]]:
    """Worker pod amounts from scaling and network: resource -> (amount, the field it came from)."""
    res = spec.scaling.resources_per_worker
    per_pod = spec.scaling.workers_per_pod
    field = "spec.scaling.resourcesPerWorker"
    cpu = quantities.parse(
        res.cpu if res is not None and res.cpu is not None else 1, f"{field}.cpu"
    )
    amounts: dict[str, tuple[str, str]] = {
        "cpu": (quantities.cpu_string(cpu * per_pod), f"{field}.cpu")
    }
    if res is not None and res.memory is not None:
        memory = quantities.parse(res.memory, f"{field}.memory")
        amounts["memory"] = (quantities.memory_string(memory * per_pod), f"{field}.memory")
    for name, amount in (res.kubernetes if res is not None else {}).items():
        amounts[name] = (_scaled(name, amount, per_pod), f"{field}.{name}")
    gpus = gpus_per_worker(spec)
    gpu_name = gpu_resource_name(spec)
    if gpus and gpu_name not in amounts:
        source = (
            f"{field}.gpu" if res is not None and res.gpu is not None else "spec.scaling.useGpu"
        )
        amounts[gpu_name] = (str(gpus * per_pod), source)
    network = spec.network
    if network is not None:
        device = NETWORK_DEVICE[network.profile]
        if device in amounts:
            raise ValueError(
                f"spec.network.profile: {network.profile.value} adds {device} to every worker "
                f"pod, and {amounts[device][1]} sets it too; remove it from resourcesPerWorker "
                "(spec.network.devicesPerPod sets how many) or remove spec.network"
            )
        amounts[device] = (str(network.devices_per_pod), "spec.network.devicesPerPod")
    return amounts


def worker_resources(spec: TrainJobSpec) -> dict[str, Any]:
    """Container resources of one worker pod: resourcesPerWorker x workersPerPod, the network
    profile's devices, then workerTemplate.resources for any other resource (a name both set is
    refused) and its DRA claims."""
    ours = _scaling_resources(spec)
    amounts = {name: amount for name, (amount, _) in ours.items()}
    out: dict[str, Any] = {"requests": dict(amounts), "limits": dict(amounts)}
    theirs = (spec.worker_template.resources if spec.worker_template else None) or {}
    for kind in ("requests", "limits"):
        for name, amount in (theirs.get(kind) or {}).items():
            if name in ours:
                raise ValueError(
                    f"spec.workerTemplate.resources.{kind}.{name}: {amount!r} conflicts with "
                    f"{ours[name][1]}, which sets {name} of the workers; set it in one place "
                    "only (resourcesPerWorker for what each worker needs)"
                )
            out[kind][name] = amount
    if theirs.get("claims"):
        out["claims"] = copy.deepcopy(theirs["claims"])
    return out


def custom_group_resources(spec: TrainJobSpec) -> dict[str, str]:
    """Ray custom resources of one worker pod (KubeRay's group-level `resources`), exact, and the
    `accelerator_type:<acceleratorType>` resource that Ray Train asks every worker for (0.001
    each) when scaling.acceleratorType is set: Ray detects its own, different, names only on
    real GPUs (`A100`), so the group offers the one the node label and the contract use."""
    res = spec.scaling.resources_per_worker
    per_pod = spec.scaling.workers_per_pod
    custom = (res.custom if res is not None else None) or {}
    out = {
        name: quantities.decimal_string(quantities.exact(amount) * per_pod)
        for name, amount in custom.items()
    }
    if spec.scaling.accelerator_type:
        out[f"{RAY_ACCELERATOR_PREFIX}{spec.scaling.accelerator_type}"] = "1"
    return out


def placement_affinity(spec: TrainJobSpec, meta: Meta) -> dict[str, Any]:
    """Affinity derived from scaling: GPU product and the placement strategy of workers."""
    affinity: dict[str, Any] = {}
    if spec.scaling.accelerator_type:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": GPU_PRODUCT_LABEL,
                                "operator": "In",
                                "values": [spec.scaling.accelerator_type],
                            }
                        ]
                    }
                ]
            }
        }
    term = {
        "labelSelector": {"matchLabels": {LABEL_TRAINJOB: meta.name, LABEL_ROLE: "worker"}},
        "topologyKey": HOSTNAME_TOPOLOGY,
    }
    strategy = spec.scaling.placement_strategy
    if strategy is PlacementStrategy.STRICT_SPREAD:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    elif strategy is PlacementStrategy.STRICT_PACK:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    elif strategy is PlacementStrategy.PACK:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    return affinity


def spread_constraints(spec: TrainJobSpec, meta: Meta) -> list[dict[str, Any]]:
    if spec.scaling.placement_strategy is not PlacementStrategy.SPREAD:
        return []
    return [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_TOPOLOGY,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {LABEL_TRAINJOB: meta.name, LABEL_ROLE: "worker"}},
        }
    ]


def merge_affinity(ours: dict[str, Any], theirs: dict[str, Any] | None) -> dict[str, Any]:
    """Both must hold: required node terms are ANDed, every other list is concatenated."""
    merged = copy.deepcopy(theirs or {})
    for kind, part in ours.items():
        target = merged.setdefault(kind, {})
        for when, value in part.items():
            if kind == "nodeAffinity" and when == "requiredDuringSchedulingIgnoredDuringExecution":
                ours_expr = value["nodeSelectorTerms"][0]["matchExpressions"]
                terms = target.get(when, {}).get("nodeSelectorTerms") or [{}]
                for t in terms:
                    t["matchExpressions"] = list(t.get("matchExpressions") or []) + ours_expr
                target[when] = {"nodeSelectorTerms": terms}
            else:
                target[when] = list(target.get(when) or []) + list(value)
    return merged


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


def build_submitter_template(spec: TrainJobSpec, meta: Meta, attempt: int) -> dict[str, Any]:
    """KubeRay's submitter pod (K8sJobMode), hardened like the Ray pods.

    The container keeps KubeRay's name, the head's image and KubeRay's default resources, and
    no command: KubeRay then writes its `ray job submit` command into it. The submitter only
    talks to the Ray dashboard over HTTP, so it gets no Kubernetes API token. It is placed like
    the head (`head.nodeSelector`, `tolerations`, `affinity`, `priorityClassName`): a job pinned
    to a node pool keeps all of its pods there, and a submitter scheduled where the head may
    not run would never reach it.
    """
    labels = base_labels(meta, attempt, scheduling=True)
    labels[LABEL_ROLE] = "submitter"
    container: dict[str, Any] = {
        "name": SUBMITTER_CONTAINER,
        "image": spec.image,
        "resources": copy.deepcopy(SUBMITTER_RESOURCES),
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    head = spec.head
    if head is not None:
        if head.node_selector:
            pod["nodeSelector"] = dict(head.node_selector)
        if head.tolerations:
            pod["tolerations"] = copy.deepcopy(head.tolerations)
        if head.affinity:
            pod["affinity"] = copy.deepcopy(head.affinity)
        if head.priority_class_name:
            pod["priorityClassName"] = head.priority_class_name
        if head.image_pull_secrets:
            # The submitter runs the head's image: it needs the same credentials to pull it.
            pod["imagePullSecrets"] = copy.deepcopy(head.image_pull_secrets)
    harden_pod(pod, None)
    metadata: dict[str, Any] = {"labels": labels}
    annotations = allowed_from_parent(meta.annotations, scheduling=True)
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod}


def _env(
    spec: TrainJobSpec, meta: Meta, overrides: PodOverrides | None, role: str
) -> list[dict[str, Any]]:
    """Our variables first; the user's extra ones after, minus any that would shadow ours. The
    network profile's NCCL variables are defaults: the user's of the same name win."""
    ours = contract_env(meta) + storage_env(spec)
    names = {e["name"] for e in ours}
    extra = user_env(ours, overrides)
    theirs = {e.get("name") for e in extra}
    network: list[dict[str, Any]] = []
    if role == "worker" and spec.network is not None:
        network = [
            {"name": name, "value": value}
            for name, value in NETWORK_ENV[spec.network.profile].items()
            if name not in theirs and name not in names
        ]
    data: list[dict[str, Any]] = []
    if spec.datasets and PARQUET_FOOTER_ACTORS_ENV not in theirs | names:
        data = [{"name": PARQUET_FOOTER_ACTORS_ENV, "value": str(parquet_footer_actors(spec))}]
    return ours + network + data + copy.deepcopy(extra)


#: Ray Data's pool of actors that read Parquet footers (ReadFilesParquetV2), 32 by default.
PARQUET_FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
PARQUET_FOOTER_ACTORS_MAX = 32


def parquet_footer_actors(spec: TrainJobSpec) -> int:
    """One footer reader per worker pod, at most Ray Data's default.

    Each actor needs a CPU to be placed, and a worker pod has one CPU beside its training
    workers (builders/rayjob.py worker_start_params). With Ray Data's 32 on two worker pods the
    read of an S3 table never started: the actors waited to be placed, and the listing task that
    hands them the files held one of the two spare CPUs.
    """
    s = spec.scaling
    workers = s.num_workers if s.num_workers is not None else (s.max_workers or 1)
    return max(1, min(PARQUET_FOOTER_ACTORS_MAX, workers // s.workers_per_pod))


def check_mounts(spec: TrainJobSpec, mounts: list[dict[str, Any]], field: str) -> None:
    """Refuse a user mount where the builders mount the contract, /dev/shm or the claim (the
    CRD's rules say the same; this also covers specs that never went through the API server)."""
    taken = [(CONTRACT_DIR, "the contract"), (SHM_PATH, "/dev/shm")]
    if spec.storage.pvc is not None:
        taken.append((spec.storage.pvc.mount_path.rstrip("/"), "spec.storage.pvc.mountPath"))
    ours = {CONTRACT_VOLUME, STORAGE_VOLUME, SHM_VOLUME}
    for mount in mounts:
        path = str(mount.get("mountPath", "")).rstrip("/")
        if mount.get("name") in ours:
            raise ValueError(
                f"{field}: the volume {mount.get('name')!r} is mounted by the operator; mount a "
                "volume of your own"
            )
        for used, what in taken:
            if path == used or path.startswith(used + "/") or used.startswith(path + "/"):
                raise ValueError(
                    f"{field}: mountPath {mount.get('mountPath')!r} collides with {used} "
                    f"({what}, mounted by the operator); choose another directory such as "
                    "/data/cache"
                )


def apply_pod_surface(pod: dict[str, Any], overrides: PodOverrides) -> None:
    """The pod-level settings the user's override passes through as written."""
    if overrides.image_pull_secrets:
        pod["imagePullSecrets"] = copy.deepcopy(overrides.image_pull_secrets)
    if overrides.scheduler_name:
        pod["schedulerName"] = overrides.scheduler_name
    if overrides.runtime_class_name:
        pod["runtimeClassName"] = overrides.runtime_class_name
    if overrides.host_network:
        pod["hostNetwork"] = True
        # Without it a host-network pod resolves names with the node's resolver, and the Ray
        # workers could no longer find the head's Service.
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        # The node has several addresses; Ray must take the one that is the pod's IP (see
        # builders/rayjob.py, host_network_start_params).
        pod["containers"][0]["env"].append(
            {"name": ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        )
    if overrides.resource_claims:
        pod["resourceClaims"] = copy.deepcopy(overrides.resource_claims)


def build_pod_template(
    spec: TrainJobSpec, meta: Meta, attempt: int, role: str, overrides: PodOverrides | None
) -> dict[str, Any]:
    """The pod template of the head (`role="head"`) or the workers (`role="worker"`)."""
    labels = without_denied(overrides.labels if overrides else None)
    labels.update(base_labels(meta, attempt, scheduling=True))
    labels[LABEL_ROLE] = role
    annotations = allowed_from_parent(meta.annotations, scheduling=True)
    annotations.update(without_denied(overrides.annotations if overrides else None))

    if role == "head":
        resources = copy.deepcopy(
            overrides.resources if overrides and overrides.resources else DEFAULT_HEAD_RESOURCES
        )
    else:
        resources = worker_resources(spec)
    claims = list((overrides.resource_claims if overrides else None) or [])
    if claims and not resources.get("claims"):
        resources["claims"] = [{"name": claim["name"]} for claim in claims]
    field = "spec.head" if role == "head" else "spec.workerTemplate"
    user_mounts = list((overrides.volume_mounts if overrides else None) or [])
    check_mounts(spec, user_mounts, f"{field}.volumeMounts")

    memory_field = (
        "spec.head.resources.limits.memory"
        if role == "head"
        else "spec.scaling.resourcesPerWorker.memory"
    )
    container: dict[str, Any] = {
        "name": HEAD_CONTAINER if role == "head" else WORKER_CONTAINER,
        "image": spec.image,
        "env": _env(spec, meta, overrides, role),
        "resources": resources,
        "volumeMounts": [
            *volume_mounts(spec),
            {"name": SHM_VOLUME, "mountPath": SHM_PATH},
            *copy.deepcopy(user_mounts),
        ],
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    if overrides is not None and overrides.env_from:
        container["envFrom"] = copy.deepcopy(overrides.env_from)

    pod: dict[str, Any] = {
        "serviceAccountName": pod_service_account(spec, meta, overrides),
        "containers": [container],
        "volumes": [
            *volumes(spec, meta),
            shm_volume(shm_size_limit(resources, memory_field)),
            *copy.deepcopy((overrides.volumes if overrides else None) or []),
        ],
    }
    grace = overrides.termination_grace_period_seconds if overrides else None
    if grace is None and spec.disruption is not None:
        grace = spec.disruption.termination_grace_period_seconds
    harden_pod(pod, grace)
    if role == "worker":
        add_drain_hook(container, int(pod["terminationGracePeriodSeconds"]))
    else:
        add_head_hook(container)
    if role == "worker" and spec.network is not None:
        # Explicit and only where RDMA runs: every other capability stays dropped.
        container["securityContext"]["capabilities"]["add"] = [RDMA_CAPABILITY]
    if overrides is not None:
        apply_pod_surface(pod, overrides)
    ours = placement_affinity(spec, meta) if role == "worker" else {}
    affinity = merge_affinity(ours, overrides.affinity if overrides else None)
    if affinity:
        pod["affinity"] = affinity
    spread = spread_constraints(spec, meta) if role == "worker" else []
    if spread:
        pod["topologySpreadConstraints"] = spread
    tolerations = list(copy.deepcopy(overrides.tolerations or [])) if overrides else []
    if role == "worker" and gpus_per_worker(spec) > 0:
        gpu_toleration = {
            "key": gpu_resource_name(spec),
            "operator": "Exists",
            "effect": "NoSchedule",
        }
        if gpu_toleration not in tolerations:
            tolerations.append(gpu_toleration)
    if tolerations:
        pod["tolerations"] = tolerations
    if overrides is not None and overrides.node_selector:
        pod["nodeSelector"] = dict(overrides.node_selector)
    if overrides is not None and overrides.priority_class_name:
        pod["priorityClassName"] = overrides.priority_class_name

    metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod}
