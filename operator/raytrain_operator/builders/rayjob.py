"""The KubeRay RayJob (`ray.io/v1`) of one attempt of a TrainJob.

Each attempt is its own RayJob `<name>-<attempt>` with KubeRay's own retries off
(`backoffLimit: 0`): the operator retries at the cluster level, and every attempt runs under
the same Ray Train run name, so it resumes from the latest checkpoint.

Every Ray container learns which attempt and which cluster it belongs to from its environment
(`RAYTRAIN_ATTEMPT`, `RAYTRAIN_RAYJOB`, `RAYTRAIN_RAYCLUSTER`): unlike the shared contract
ConfigMap, a pod's environment never changes, so the runtime's reports name the attempt that
really made them and the operator can ignore a report from another one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from raytrain_contract.api.v1alpha1 import FailureSpec, PodOverrides, TrainJob
from raytrain_contract.meta import (
    ANNOTATION_GENERATION,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_SUSPENDED_BY_USER,
    KUEUE_ELASTIC_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    Meta,
    child_metadata,
)
from raytrain_contract.pods import container_security_context
from raytrain_operator.builders import quantities
from raytrain_operator.builders.names import WORKER_GROUP, rayjob_name
from raytrain_operator.builders.pods import (
    ENV_POD_IP,
    build_pod_template,
    build_submitter_template,
)
from raytrain_operator.builders.scaling import (
    custom_group_resources,
    merge_affinity,
    worker_resources,
)

RAYJOB_API_VERSION = "ray.io/v1"
ENTRYPOINT = "python -m trainer_runtime"
#: KubeRay keeps the finished cluster this long (logs, dashboard) before deleting it.
RAYJOB_TTL_SECONDS = 60
HEAD_START_PARAMS = {"num-cpus": "0", "dashboard-host": "0.0.0.0"}
# Ray's token authentication (RAY_AUTH_MODE=token) exists from Ray 2.52. With KubeRay's
# authOptions KubeRay makes a random token per cluster in a Secret of its own and gives it to
# every Ray container and the submitter: the dashboard, the job API and the GCS then refuse
# requests without it, so another pod that can reach the head cannot submit code to it.
TOKEN_AUTH_MIN_RAY = (2, 52)


def ray_token_auth(ray_version: str) -> bool:
    """Whether the image's Ray (spec.rayVersion, `MAJOR.MINOR...` by the schema) has token auth."""
    found = re.match(r"(\d+)\.(\d+)", ray_version)
    return found is not None and (int(found[1]), int(found[2])) >= TOKEN_AUTH_MIN_RAY


#: Per-field hashes of the spec a RayJob was built from (JSON: spec key -> hash): a spec change
#: that waits for the next attempt is reported by field name.
ANNOTATION_FIELD_HASHES = "raytrain.dev/spec-field-hashes"
#: The pod environment that binds the runtime's reports to their attempt and cluster.
ENV_ATTEMPT = "RAYTRAIN_ATTEMPT"
ENV_RAYJOB = "RAYTRAIN_RAYJOB"
ENV_RAYCLUSTER = "RAYTRAIN_RAYCLUSTER"
#: The pod's node (the downward API): a hung or straggling rank is named with it.
ENV_NODE_NAME = "RAYTRAIN_NODE_NAME"
#: KubeRay's label on every pod of a RayCluster: the cluster's name.
RAY_CLUSTER_LABEL = "ray.io/cluster"

#: Spec fields the operator applies to a running attempt at once (they are its own decisions,
#: not part of what the RayJob, its pods or the contract are built from). Every other field is
#: built into the attempt and waits for the next one (docs/operator.md, "Spec changes").
IMMEDIATE_FIELDS = frozenset(
    {
        "suspend",
        "backoffLimit",
        "activeDeadlineSeconds",
        "preRunningDeadlineSeconds",
        "ttlSecondsAfterFinished",
    }
)


def _digest(value: Any, size: int) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:size]


#: Keys of a spec field that the operator applies at once too: the hang watch's timeout and
#: what a hang gets are the operator's decisions. The runtime takes the timeout from the
#: contract for when it dumps the ranks' stacks, so there it changes with the next attempt.
IMMEDIATE_KEYS = {"failure": frozenset({"hangTimeoutSeconds", "onHang"})}
_DEFAULT_SECTIONS = {"failure": FailureSpec().model_dump(mode="json", by_alias=True)}


def _built_fields(trainjob: TrainJob) -> dict[str, Any]:
    spec = trainjob.spec.model_dump(mode="json", by_alias=True)
    built = {k: v for k, v in spec.items() if k not in IMMEDIATE_FIELDS}
    for field, keys in IMMEDIATE_KEYS.items():
        value = built.get(field)
        if isinstance(value, dict) and keys & set(value):
            rest = {k: v for k, v in value.items() if k not in keys}
            # A section written only for these keys hashes as the section left out.
            built[field] = None if rest == _DEFAULT_SECTIONS.get(field) else rest
    return built


def spec_hash(trainjob: TrainJob) -> str:
    """Hash of everything in the spec a RayJob is built from (the immediate fields aside)."""
    return _digest(_built_fields(trainjob), 16)


def field_hashes(trainjob: TrainJob) -> dict[str, str]:
    """One short hash per spec field a RayJob is built from (null fields included)."""
    return {k: _digest(v, 8) for k, v in sorted(_built_fields(trainjob).items())}


def changed_fields(trainjob: TrainJob, built: str | None) -> list[str] | None:
    """`spec.<field>` names that differ from the annotation `built`; None when it is unreadable."""
    try:
        old = json.loads(built) if built else None
    except ValueError:
        return None
    if not isinstance(old, dict):
        return None
    new = field_hashes(trainjob)
    return [f"spec.{k}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def identity_env(name: str, attempt: int) -> list[dict[str, Any]]:
    """Which attempt and cluster a pod belongs to (the cluster's name from KubeRay's label),
    and the node it runs on."""
    return [
        {"name": ENV_ATTEMPT, "value": str(attempt)},
        {"name": ENV_RAYJOB, "value": name},
        {
            "name": ENV_RAYCLUSTER,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{RAY_CLUSTER_LABEL}']"}},
        },
        {"name": ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]


def avoid_nodes_affinity(nodes: Sequence[str]) -> dict[str, Any]:
    """A preference (not a requirement) to keep off `nodes`: each held up the ranks in two
    hangs (status.hangs). Preferred, so a job whose pods fit only there still starts."""
    if not nodes:
        return {}
    term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}]}
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]
        }
    }


def _with_identity(template: dict[str, Any], name: str, attempt: int) -> dict[str, Any]:
    for container in template.get("spec", {}).get("containers", []):
        env = container.setdefault("env", [])
        taken = {e.get("name") for e in env}
        env.extend(e for e in identity_env(name, attempt) if e["name"] not in taken)
    return template


def worker_replicas(trainjob: TrainJob) -> tuple[int, int, int]:
    """(replicas, minReplicas, maxReplicas) of the worker group, in pods.

    A search that runs several trials at once (spec.tune.maxConcurrentTrials) has the workers
    of each: every trial is a TorchTrainer with its own worker group.
    """
    scaling = trainjob.spec.scaling
    per_pod = scaling.workers_per_pod
    tune = trainjob.spec.tune
    trials = (tune.max_concurrent_trials or 1) if tune is not None else 1
    if scaling.num_workers is not None:
        pods = max(1, scaling.num_workers // per_pod) * trials
        return pods, pods, pods
    low = max(1, (scaling.min_workers or 1) // per_pod) * trials
    high = max(low, max(1, (scaling.max_workers or 1) // per_pod) * trials)
    if _fixed_by_kueue(trainjob):
        return high, high, high
    return low, low, high


def host_network_start_params(overrides: PodOverrides | None) -> dict[str, str]:
    """rayStartParams of a group whose pods use the node's network.

    A node has several addresses (its own, a CNI bridge's, ...), and `ray start` picks one of
    them by itself: its GCS, agent and dashboard listen there, while the kubelet probes and the
    head's Service route to the pod's IP, which for a host-network pod is the node's own. Seen
    on a real node: Ray took the bridge's address, the agent's health port refused the
    kubelet's probes and the worker never became ready. The pod's IP is the right one; the
    container gets it from the downward API (builders/pods.py) and KubeRay's `ray start`
    command line, run by bash, expands it.
    """
    if overrides is None or not overrides.host_network:
        return {}
    return {"node-ip-address": f"${ENV_POD_IP}"}


def worker_start_params(trainjob: TrainJob) -> dict[str, str]:
    """rayStartParams of the worker group.

    With spec.datasets a worker Ray node advertises one CPU more than its pod's CPU (rounded up,
    as KubeRay rounds it): Ray Train's workers take the pod's CPUs, and Ray Data's read and map
    tasks, which ask for a CPU each, would otherwise never be scheduled (the head runs with no
    CPU). The extra tasks share the pod's cores with training.
    """
    params = host_network_start_params(trainjob.spec.worker_template)
    if not trainjob.spec.datasets:
        return params
    cpu = quantities.parse(worker_resources(trainjob.spec)["requests"]["cpu"], "cpu")
    return {**params, "num-cpus": str(math.ceil(cpu) + 1)}


def _fixed_by_kueue(trainjob: TrainJob) -> bool:
    """Kueue admits a queued job at a fixed shape and refuses the in-tree autoscaler, unless
    the workload may grow in slices (spec.scaling.kueueWorkloadSlices)."""
    return bool(trainjob.spec.queue_name) and not trainjob.spec.scaling.kueue_workload_slices


def autoscaling_enabled(trainjob: TrainJob) -> bool:
    return trainjob.spec.scaling.num_workers is None and not _fixed_by_kueue(trainjob)


def build_rayjob(
    trainjob: TrainJob,
    meta: Meta,
    attempt: int,
    *,
    suspend: bool,
    avoid_nodes: Sequence[str] = (),
) -> dict[str, Any]:
    """The RayJob manifest. `suspend` is decided by the caller (user suspend, Kueue); the
    workers prefer nodes other than `avoid_nodes` (`avoid_nodes_affinity`)."""
    spec = trainjob.spec
    replicas, min_replicas, max_replicas = worker_replicas(trainjob)
    metadata = child_metadata(meta, rayjob_name(meta.name, attempt), attempt, scheduling=True)
    annotations = metadata.setdefault("annotations", {})
    if spec.queue_name:
        metadata["labels"][KUEUE_QUEUE_LABEL] = spec.queue_name
        if spec.scaling.kueue_workload_slices:
            annotations[KUEUE_ELASTIC_ANNOTATION] = "true"
    annotations[ANNOTATION_GENERATION] = str(meta.generation)
    annotations[ANNOTATION_SPEC_HASH] = spec_hash(trainjob)
    annotations[ANNOTATION_FIELD_HASHES] = json.dumps(field_hashes(trainjob), sort_keys=True)
    if suspend and spec.suspend:
        annotations[ANNOTATION_SUSPENDED_BY_USER] = "true"

    worker_group: dict[str, Any] = {
        "groupName": WORKER_GROUP,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "rayStartParams": worker_start_params(trainjob),
        # KubeRay's controller writes the RayJob back (its finalizer) with this field filled in
        # as {}: written here, that update leaves the spec and its generation alone. Kueue
        # names a workload slice after the generation, and a second name for a waiting job
        # left it suspended for good.
        "scaleStrategy": {},
        "template": _with_identity(
            build_pod_template(spec, meta, attempt, "worker", spec.worker_template),
            metadata["name"],
            attempt,
        ),
    }
    avoided = avoid_nodes_affinity(avoid_nodes)
    if avoided:
        pod = worker_group["template"]["spec"]
        pod["affinity"] = merge_affinity(avoided, pod.get("affinity"))
    custom = custom_group_resources(spec)
    if custom:
        worker_group["resources"] = custom

    cluster: dict[str, Any] = {
        "rayVersion": spec.ray_version,
        "enableInTreeAutoscaling": autoscaling_enabled(trainjob),
        "headGroupSpec": {
            "rayStartParams": {**HEAD_START_PARAMS, **host_network_start_params(spec.head)},
            "template": _with_identity(
                build_pod_template(spec, meta, attempt, "head", spec.head),
                metadata["name"],
                attempt,
            ),
        },
        "workerGroupSpecs": [worker_group],
    }
    if ray_token_auth(spec.ray_version):
        cluster["authOptions"] = {"mode": "token"}
    if cluster["enableInTreeAutoscaling"]:
        # KubeRay adds the autoscaler container to the head pod with no securityContext of its
        # own; the pod would fail the restricted Pod Security Standard without this one.
        cluster["autoscalerOptions"] = {"securityContext": container_security_context()}

    return {
        "apiVersion": RAYJOB_API_VERSION,
        "kind": "RayJob",
        "metadata": metadata,
        "spec": as_kuberay_writes_it(
            {
                "entrypoint": ENTRYPOINT,
                "submissionMode": "K8sJobMode",
                "shutdownAfterJobFinishes": True,
                "ttlSecondsAfterFinished": RAYJOB_TTL_SECONDS,
                "backoffLimit": 0,
                "suspend": suspend,
                "submitterPodTemplate": build_submitter_template(spec, meta, attempt),
                "rayClusterSpec": cluster,
            }
        ),
    }


#: Booleans that KubeRay's and Kubernetes' Go types leave out when false (`omitempty`), and
#: for which false and absent mean the same.
OMITTED_WHEN_FALSE = frozenset(
    {"suspend", "shutdownAfterJobFinishes", "hostNetwork", "hostPID", "hostIPC", "stdin",
     "stdinOnce", "tty", "readOnly"}
)  # fmt: skip


def as_kuberay_writes_it(value: Any, parent: str = "") -> Any:
    """`value` (a RayJob's spec) without what KubeRay would drop when it writes the RayJob back.

    KubeRay's controller updates the whole RayJob when it adds its finalizer, through Go types:
    a false `omitempty` boolean or an empty environment value the operator wrote would vanish,
    and the spec's generation would move while the job waits in a queue. Kueue names a
    workload slice after that generation. Dropping them here changes nothing they mean.
    `parent` is the key `value` sits under.
    """
    if isinstance(value, dict):
        return {
            key: as_kuberay_writes_it(item, key)
            for key, item in value.items()
            if not (item is False and key in OMITTED_WHEN_FALSE)
            and not (parent == "env" and key == "value" and item == "")
        }
    if isinstance(value, list):
        return [as_kuberay_writes_it(item, parent) for item in value]
    return value
