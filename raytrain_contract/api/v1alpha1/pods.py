"""PodOverrides: the pod-level settings a TrainJob gives its Ray head or its worker pods.

The schemas of its core/v1 fields (resources, affinity, tolerations, env, volumes...) come from
pod_schema.py; the rules that tie two of those fields together are here.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from pydantic import ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict, JsonValue

from raytrain_contract.api.v1alpha1 import pod_schema, pod_volumes
from raytrain_contract.api.v1alpha1.common import (
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    Model,
    label_map,
    new_field,
    reserved_keys_rule,
    rule,
)

#: A core/v1 object, or a list of them, as the API server accepted it (the schema is pod_schema's).
_Object = dict[str, Any]
_Objects = list[dict[str, Any]]

#: A label value. Checked by the API server only: the models parse what it accepted.
_LabelValue = Annotated[
    str, WithJsonSchema({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE})
]


def reserved(schema: JsonDict, field: str) -> JsonDict:
    """A label or annotation map's schema with the rule that refuses reserved keys."""
    what = field.rstrip("s")
    rules = cast(list[JsonValue], schema["x-kubernetes-validations"])
    return {
        **schema,
        "x-kubernetes-validations": [*rules, reserved_keys_rule(f"spec.*.{field}", what)],
    }


class PodOverrides(Model):
    """Pod-level settings for the head or the worker pods."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
                    "self.volumes.exists(v, v.name == m.name))",
                    "spec.*.volumeMounts: every mount names an entry of volumes of the same "
                    "pod template; add the volume or fix the mount's name",
                ),
                rule(
                    "!has(self.resources) || !has(self.resources.claims) || "
                    "self.resources.claims.all(c, has(self.resourceClaims) && "
                    "self.resourceClaims.exists(r, r.name == c.name))",
                    "spec.*.resources.claims: every claim names an entry of resourceClaims of "
                    "the same pod template; add it there or fix the name",
                ),
            ]
        }
    )

    resources: Annotated[_Object, WithJsonSchema(pod_schema.RESOURCES)] | None = None
    """Container resources of the Ray container: requests, limits and DRA claims. Head: they
    replace the whole default (1 CPU and 4Gi requested, a 4Gi memory limit). Workers: they are
    added to what scaling.resourcesPerWorker (x workersPerPod) and spec.network give the
    container, for resources those do not set (ephemeral-storage, hugepages-2Mi, a device); cpu,
    memory, the GPU and every name of resourcesPerWorker or of the network profile belong there,
    and the same name in both is refused."""
    node_selector: dict[str, _LabelValue] | None = Field(
        default=None, json_schema_extra=label_map("spec.*.nodeSelector", "node label")
    )
    """Node labels the pods must match."""
    tolerations: Annotated[_Objects, WithJsonSchema(pod_schema.TOLERATIONS)] | None = None
    """Pod tolerations (core/v1 Toleration)."""
    affinity: Annotated[_Object, WithJsonSchema(pod_schema.AFFINITY)] | None = None
    """Pod affinity; merged with the affinity derived from scaling."""
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    """PriorityClass of the pods."""
    env: Annotated[_Objects, WithJsonSchema(pod_schema.ENV)] | None = None
    """Extra container environment variables (core/v1 EnvVar)."""
    env_from: Annotated[_Objects, WithJsonSchema(pod_schema.ENV_FROM)] | None = None
    """Extra container environment sources (core/v1 EnvFromSource)."""
    service_account_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    """Service account of the pods. Default: the per-job account the operator creates."""
    labels: dict[str, _LabelValue] | None = Field(
        default=None, json_schema_extra=reserved(label_map("spec.*.labels", "label"), "labels")
    )
    """Extra pod labels. Keys under app.kubernetes.io/, ray.io/ and raytrain.dev/ are refused:
    the operator, KubeRay and the NetworkPolicies go by them. Tooling and GitOps keys
    (kubectl.kubernetes.io/*, kopf.zalando.org/*, argocd.argoproj.io/*, Flux's) are dropped,
    and of kueue.x-k8s.io/* only the keys schedulers read pass (topology, priority class; the queue
    comes from spec.queueName); Volcano, KAI and YuniKorn queue and group keys pass too."""
    annotations: dict[str, Annotated[str, Field(max_length=8192)]] | None = Field(
        default=None,
        json_schema_extra=reserved(label_map("spec.*.annotations", "annotation"), "annotations"),
    )
    """Extra pod annotations, refused and filtered like labels (Kueue's podset-required-topology and
    podset-preferred-topology pass: topology-aware scheduling reads them here)."""
    termination_grace_period_seconds: int | None = Field(default=None, ge=1, le=86400)
    """Seconds a pod has to stop after a delete, a drain or a suspend before it is killed.
    Default 120: room for a preStop hook, for example to finish a checkpoint upload; pods that
    have nothing left to do stop sooner."""
    volumes: Annotated[_Objects, WithJsonSchema(pod_volumes.VOLUMES)] | None = new_field()
    """Extra pod volumes (core/v1 Volume): a dataset cache, a scratch emptyDir. The names
    raytrain-contract, raytrain-storage and raytrain-shm are the operator's."""
    volume_mounts: Annotated[_Objects, WithJsonSchema(pod_volumes.VOLUME_MOUNTS)] | None = (
        new_field()
    )
    """Mounts of volumes into the Ray container (core/v1 VolumeMount). A mountPath must not be
    or nest in /etc/raytrain (the contract), /dev/shm (sized by the operator for Ray's object
    store) or the checkpoint claim's storage.pvc.mountPath, nor hold it."""
    image_pull_secrets: Annotated[_Objects, WithJsonSchema(pod_schema.PULL_SECRETS)] | None = (
        new_field()
    )
    """Secrets to pull the image with (core/v1 LocalObjectReference). The head's also serve
    KubeRay's submitter pod, which runs the same image."""
    scheduler_name: str | None = new_field(max_length=253, pattern=DNS_SUBDOMAIN)
    """Scheduler of the pods (for example volcano, yunikorn, kai-scheduler). Default: the
    cluster's default scheduler."""
    runtime_class_name: str | None = new_field(max_length=253, pattern=DNS_SUBDOMAIN)
    """RuntimeClass of the pods, for example nvidia when the GPU runtime is not the node's
    default."""
    host_network: bool | None = new_field()
    """Run the pods in the node's network namespace (for RDMA devices that are only reachable
    there). The operator then sets dnsPolicy ClusterFirstWithHostNet so the pods still resolve
    cluster Services. Such pods fail the baseline and restricted Pod Security Standards, and
    Ray's ports must be free on the node: one Ray pod per node."""
    resource_claims: Annotated[_Objects, WithJsonSchema(pod_schema.RESOURCE_CLAIMS)] | None = (
        new_field()
    )
    """Dynamic resource allocation (core/v1 PodResourceClaim): devices claimed through a
    ResourceClaim or, one per pod, a ResourceClaimTemplate. The Ray container gets them all,
    or those of resources.claims when it is set."""
