"""Object metadata of the children: the label vocabulary, the allow-list, owner references.

Children carry a small vocabulary under `raytrain.dev/` so the operator (and users) can find
them. Labels and annotations of the TrainJob reach the children only through an allow-list
(keys without a prefix, and the keys batch schedulers read):
copying everything would copy `kubectl.kubernetes.io/last-applied-configuration`, kopf's
bookkeeping, or a GitOps tool's tracking label, and Argo CD or Flux would then treat the
children as their own and prune them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytrain_contract.api.v1alpha1 import API_VERSION, KIND, RESERVED_KEY_PREFIXES

PREFIX = "raytrain.dev"
LABEL_TRAINJOB = f"{PREFIX}/trainjob"
LABEL_ATTEMPT = f"{PREFIX}/attempt"
LABEL_ROLE = f"{PREFIX}/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "raytrain-operator"
#: Generation of the TrainJob a RayJob was built from (an annotation on the RayJob).
ANNOTATION_GENERATION = f"{PREFIX}/generation"
#: Set on the TrainJob before a suspend; the runtime checkpoints when it sees it.
ANNOTATION_CHECKPOINT_REQUESTED = f"{PREFIX}/checkpoint-requested"
#: Hash of the spec a RayJob was built from (suspend aside): a resume with a changed spec
#: starts a new attempt instead of unsuspending a RayJob that would ignore the change.
ANNOTATION_SPEC_HASH = f"{PREFIX}/spec-hash"
#: "true" on a RayJob suspended because of spec.suspend (not by Kueue).
ANNOTATION_SUSPENDED_BY_USER = f"{PREFIX}/suspended-by-user"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Marks a RayJob whose Kueue workload may grow and shrink in slices (Kueue's
#: ElasticJobsViaWorkloadSlices); KubeRay copies it to the RayCluster, where Kueue's webhook
#: then gates every pod until a slice that holds it is admitted.
KUEUE_ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"

#: Never set on a child from the TrainJob's labels or annotations or from its pod overrides:
#: the keys the operator, KubeRay and the NetworkPolicies go by (`app.kubernetes.io/*`,
#: `ray.io/*`, `raytrain.dev/*`). A TrainJob may carry them itself (a user's tooling may name
#: the app), but a pod labelled `app.kubernetes.io/name: kuberay-operator` would pass every
#: job's NetworkPolicy in every namespace. The CRD refuses them in spec.head / workerTemplate
#: labels and annotations; the builders drop them whatever the source.
RESERVED_PREFIXES = RESERVED_KEY_PREFIXES

#: Never set on a child, whatever the source: tooling bookkeeping and GitOps tracking.
DENIED_PREFIXES = (
    "kubectl.kubernetes.io/",
    "kopf.zalando.org/",
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
    "meta.helm.sh/",
    "kueue.x-k8s.io/",
)
#: Keys batch schedulers read, passed on (from the TrainJob's own labels and annotations, and
#: from explicit pod labels/annotations) to the RayJob and the pods, although their prefix may
#: be denied. KubeRay copies the RayJob's labels and annotations to its RayCluster, where its
#: batch-scheduler plugins look for theirs. `kueue.x-k8s.io/queue-name` is not here: it comes
#: from spec.queueName only, on the RayJob alone (on a pod it would make Kueue's pod
#: integration queue each pod of its own).
SCHEDULER_KEYS = frozenset(
    {
        # Kueue topology-aware scheduling: read from each PodSet's pod template.
        "kueue.x-k8s.io/podset-required-topology",
        "kueue.x-k8s.io/podset-preferred-topology",
        "kueue.x-k8s.io/podset-unconstrained-topology",
        # Kueue WorkloadPriorityClass of the workload: a label of the job (the RayJob).
        "kueue.x-k8s.io/priority-class",
        # Volcano: the queue of the PodGroup (KubeRay's volcano plugin reads it off the
        # RayCluster), the PodGroup a pod belongs to, and a pod's queue.
        "volcano.sh/queue-name",
        "scheduling.volcano.sh/group-name",
        "scheduling.volcano.sh/queue-name",
        "scheduling.k8s.io/group-name",
        # Volcano network-topology-aware scheduling, read by KubeRay's volcano plugin.
        "volcano.sh/network-topology-mode",
        "volcano.sh/network-topology-highest-tier-allowed",
        # KAI scheduler: the queue (KubeRay's kai-scheduler plugin requires it on the cluster).
        "kai.scheduler/queue",
        # YuniKorn: application and queue (KubeRay's yunikorn plugin copies them to the pods),
        # and the gang-scheduling task groups.
        "yunikorn.apache.org/app-id",
        "yunikorn.apache.org/queue",
        "yunikorn.apache.org/task-group-name",
        "yunikorn.apache.org/task-groups",
        "yunikorn.apache.org/schedulingPolicyParameters",
    }
)


def is_denied(key: str) -> bool:
    if key in SCHEDULER_KEYS:
        return False
    return key.startswith(DENIED_PREFIXES + RESERVED_PREFIXES)


def allowed_from_parent(
    source: Mapping[str, str] | None, *, scheduling: bool = False
) -> dict[str, str]:
    """Keys of the TrainJob's labels or annotations that may be copied to a child; with
    `scheduling` (the RayJob and the pods), the scheduler keys too."""
    out: dict[str, str] = {}
    for key, value in (source or {}).items():
        if key in SCHEDULER_KEYS:
            if scheduling:
                out[key] = value
            continue
        if is_denied(key):
            continue
        if "/" not in key:
            out[key] = value
    return out


def without_denied(source: Mapping[str, str] | None) -> dict[str, str]:
    """The user's explicit pod labels/annotations minus tooling, GitOps and reserved keys."""
    return {k: v for k, v in (source or {}).items() if not is_denied(k)}


@dataclass(frozen=True)
class Meta:
    """What the builders need from the TrainJob's metadata."""

    name: str
    namespace: str
    uid: str
    generation: int = 1
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Meta:
        return cls(
            name=str(metadata["name"]),
            namespace=str(metadata.get("namespace") or "default"),
            uid=str(metadata.get("uid") or ""),
            generation=int(metadata.get("generation") or 1),
            labels=dict(metadata.get("labels") or {}),
            annotations=dict(metadata.get("annotations") or {}),
        )


def owner_reference(meta: Meta) -> dict[str, Any]:
    """The TrainJob as controller of a child: deleting it garbage-collects the child."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def base_labels(
    meta: Meta, attempt: int | None = None, *, scheduling: bool = False
) -> dict[str, str]:
    """Labels of every child: the allowed parent labels, then our vocabulary (which wins)."""
    labels = allowed_from_parent(meta.labels, scheduling=scheduling)
    labels[LABEL_TRAINJOB] = meta.name
    labels[LABEL_MANAGED_BY] = MANAGED_BY
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    return labels


def child_metadata(
    meta: Meta, name: str, attempt: int | None = None, *, scheduling: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": meta.namespace,
        "labels": base_labels(meta, attempt, scheduling=scheduling),
        "ownerReferences": [owner_reference(meta)],
    }
    annotations = allowed_from_parent(meta.annotations, scheduling=scheduling)
    if annotations:
        metadata["annotations"] = annotations
    return metadata
