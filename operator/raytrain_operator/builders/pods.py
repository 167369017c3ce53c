"""Pod templates of the Ray head, workers and submitter: storage, contract, resources,
placement, and the hardening every pod gets. The worker's resources and placement come from
builders/scaling.py, /dev/shm, the security context and the preStop hooks from
builders/hardening.py (the names other modules import from here are re-exported).

Every pod (head and workers) gets the same storage wiring and the contract mount, so a path
written by one worker is the same path on every other and on the head. Credentials reach the
pods only as `secretKeyRef` environment variables: the builders never see a Secret's values.
Every pod, KubeRay's submitter included, runs as the runtime image's non-root user with no
capabilities and the runtime's seccomp profile, so the pods pass the `restricted` Pod Security
Standard (docs/operator.md, "Pod hardening").
"""

from __future__ import annotations

import copy
from typing import Any

from raytrain_contract.api.v1alpha1 import (
    NetworkProfile,
    PodOverrides,
    TrainJobSpec,
)
from raytrain_contract.meta import (
    LABEL_ROLE,
    Meta,
    allowed_from_parent,
    base_labels,
    without_denied,
)
from raytrain_contract.pods import (
    STORAGE_VOLUME,
    SUBMITTER_CONTAINER,
    chosen_service_account,
    storage_env,
    storage_mounts,
    storage_volumes,
    user_env,
)
from raytrain_operator.builders.contract import (
    CONTRACT_DIR,
    CONTRACT_KEY,
    CONTRACT_PATH,
    check_s3_endpoint,
    gpu_resource_name,
    gpus_per_worker,
)
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.builders.hardening import (
    SHM_PATH,
    SHM_VOLUME,
    add_drain_hook,
    add_head_hook,
    harden_pod,
    shm_volume,
)
from raytrain_operator.builders.hardening import shm_size_limit as shm_size_limit
from raytrain_operator.builders.names import contract_configmap_name, runtime_account_name
from raytrain_operator.builders.scaling import GPU_RESOURCE as GPU_RESOURCE
from raytrain_operator.builders.scaling import custom_group_resources as custom_group_resources
from raytrain_operator.builders.scaling import (
    merge_affinity,
    placement_affinity,
    spread_constraints,
)
from raytrain_operator.builders.scaling import worker_resources as worker_resources

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

#: The pod's IP (the downward API), given to `ray start --node-ip-address` in host-network pods.
ENV_POD_IP = "RAYTRAIN_POD_IP"

#: KubeRay's own defaults for the submitter (GetDefaultSubmitterContainer): giving a
#: submitterPodTemplate replaces its whole default container, so they are restated here.
SUBMITTER_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "500m", "memory": "200Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
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
    check_s3_endpoint(spec)
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
            raise SpecError(
                f"{field}: the volume {mount.get('name')!r} is mounted by the operator; mount a "
                "volume of your own"
            )
        for used, what in taken:
            if path == used or path.startswith(used + "/") or used.startswith(path + "/"):
                raise SpecError(
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
