"""The KubeRay RayJob (`ray.io/v1`) of one attempt of a TrainJob.

Each attempt is its own RayJob `<name>-<attempt>` with KubeRay's own retries off
(`backoffLimit: 0`): the operator retries at the cluster level, and every attempt runs under
the same Ray Train run name, so it resumes from the latest checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from raytrain_operator.api.v1alpha1 import TrainJob
from raytrain_operator.builders.meta import (
    ANNOTATION_GENERATION,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_SUSPENDED_BY_USER,
    KUEUE_QUEUE_LABEL,
    Meta,
    child_metadata,
)
from raytrain_operator.builders.names import WORKER_GROUP, rayjob_name
from raytrain_operator.builders.pods import (
    build_pod_template,
    build_submitter_template,
    container_security_context,
    custom_group_resources,
)

RAYJOB_API_VERSION = "ray.io/v1"
ENTRYPOINT = "python -m trainer_runtime"
#: KubeRay keeps the finished cluster this long (logs, dashboard) before deleting it.
RAYJOB_TTL_SECONDS = 60
HEAD_START_PARAMS = {"num-cpus": "0", "dashboard-host": "0.0.0.0"}


def spec_hash(trainjob: TrainJob) -> str:
    """Hash of everything in the spec a RayJob is built from (suspend aside)."""
    spec = trainjob.spec.model_dump(mode="json", by_alias=True, exclude={"suspend"})
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def worker_replicas(trainjob: TrainJob) -> tuple[int, int, int]:
    """(replicas, minReplicas, maxReplicas) of the worker group, in pods."""
    scaling = trainjob.spec.scaling
    per_pod = scaling.workers_per_pod
    if scaling.num_workers is not None:
        pods = max(1, scaling.num_workers // per_pod)
        return pods, pods, pods
    low = max(1, (scaling.min_workers or 1) // per_pod)
    high = max(low, (scaling.max_workers or 1) // per_pod)
    if trainjob.spec.queue_name:
        # Kueue admits a fixed shape and does not allow the in-tree autoscaler.
        return high, high, high
    return low, low, high


def autoscaling_enabled(trainjob: TrainJob) -> bool:
    scaling = trainjob.spec.scaling
    return scaling.num_workers is None and not trainjob.spec.queue_name


def build_rayjob(trainjob: TrainJob, meta: Meta, attempt: int, *, suspend: bool) -> dict[str, Any]:
    """The RayJob manifest. `suspend` is decided by the caller (user suspend, Kueue)."""
    spec = trainjob.spec
    replicas, min_replicas, max_replicas = worker_replicas(trainjob)
    metadata = child_metadata(meta, rayjob_name(meta.name, attempt), attempt)
    if spec.queue_name:
        metadata["labels"][KUEUE_QUEUE_LABEL] = spec.queue_name
    annotations = metadata.setdefault("annotations", {})
    annotations[ANNOTATION_GENERATION] = str(meta.generation)
    annotations[ANNOTATION_SPEC_HASH] = spec_hash(trainjob)
    if suspend and spec.suspend:
        annotations[ANNOTATION_SUSPENDED_BY_USER] = "true"

    worker_group: dict[str, Any] = {
        "groupName": WORKER_GROUP,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "rayStartParams": {},
        "template": build_pod_template(spec, meta, attempt, "worker", spec.worker_template),
    }
    custom = custom_group_resources(spec)
    if custom:
        worker_group["resources"] = custom

    cluster: dict[str, Any] = {
        "rayVersion": spec.ray_version,
        "enableInTreeAutoscaling": autoscaling_enabled(trainjob),
        "headGroupSpec": {
            "rayStartParams": dict(HEAD_START_PARAMS),
            "template": build_pod_template(spec, meta, attempt, "head", spec.head),
        },
        "workerGroupSpecs": [worker_group],
    }
    if cluster["enableInTreeAutoscaling"]:
        # KubeRay adds the autoscaler container to the head pod with no securityContext of its
        # own; the pod would fail the restricted Pod Security Standard without this one.
        cluster["autoscalerOptions"] = {"securityContext": container_security_context()}

    return {
        "apiVersion": RAYJOB_API_VERSION,
        "kind": "RayJob",
        "metadata": metadata,
        "spec": {
            "entrypoint": ENTRYPOINT,
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": RAYJOB_TTL_SECONDS,
            "backoffLimit": 0,
            "suspend": suspend,
            "submitterPodTemplate": build_submitter_template(spec, meta, attempt),
            "rayClusterSpec": cluster,
        },
    }
