"""The names, patterns, limits and rule helpers every part of the TrainJob API shares.

The API group, kinds and plural names; the patterns of Kubernetes names and label values; the
limits of a worker's resources and of durations; `rule`, which writes one CEL rule whose
message names the field and the fix; and `Model`, the base of every model (camelCase aliases,
attribute docstrings as descriptions, unknown fields refused).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict, JsonValue

GROUP = "raytrain.dev"
VERSION = "v1alpha1"
KIND = "TrainJob"
PLURAL = "trainjobs"
SINGULAR = "trainjob"
SHORT_NAMES = ["rtj"]
CATEGORIES = ["raytrain", "ml"]
API_VERSION = f"{GROUP}/{VERSION}"
#: Shared defaults a TrainJob names in spec.template: cluster-wide ones (an administrator's) and
#: namespaced ones (a team's).
CLUSTER_TEMPLATE_KIND = "ClusterTrainJobTemplate"
CLUSTER_TEMPLATE_PLURAL = "clustertrainjobtemplates"
TEMPLATE_KIND = "TrainJobTemplate"
TEMPLATE_PLURAL = "trainjobtemplates"

#: Longest TrainJob name: every child name (RayJob `<name>-<attempt>`, KubeRay's RayCluster
#: `<rayjob>-<5 chars>` and its `<raycluster>-head-svc`) must stay within 63 characters.
MAX_NAME_LENGTH = 40

PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}

#: A TrainJob's name starts the names of Services KubeRay creates, which must be DNS-1035
#: labels: lower-case letters, digits and '-', starting with a letter.
NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: Names of namespaced objects the pods refer to (claims, Secrets, service accounts, classes).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: A DNS-1123 label: names of volumes, claims and claim requests.
DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A label value (also a node label's value, such as nvidia.com/gpu.product's).
LABEL_VALUE = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: A label or annotation key: an optional DNS-subdomain prefix and '/', then a name.
LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
#: A key of a Secret or ConfigMap.
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
#: An environment variable's name (what the kubelet accepts).
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
#: Ray reserves these resource names (or KubeRay reads them as CPUs, memory or GPUs): a custom
#: resource of that name would silently change what the workers get.
RESERVED_RAY_RESOURCES = (
    "cpu",
    "gpu",
    "memory",
    "object_store_memory",
    "tpu",
    "npu",
    "hpu",
    "rbln",
    "neuron_cores",
    "furiosa",
    "mblt",
    "ttnpu",
)
#: Directories of the runtime image and of the pods that the claim must not be mounted over
#: (or the pods lose their system, their contract, /dev/shm or the user's code in /app).
RESERVED_MOUNT_PATHS = (
    "/app",
    "/bin",
    "/dev",
    "/etc",
    "/etc/raytrain",
    "/home",
    "/home/ray",
    "/lib",
    "/lib64",
    "/opt",
    "/proc",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
)
#: Volume names the builders give the pods' own volumes: a user's volume (or mount) of the same
#: name would replace the contract, the checkpoint storage or /dev/shm.
RESERVED_VOLUME_NAMES = ("raytrain-contract", "raytrain-storage", "raytrain-shm")
#: Environment variables the operator sets in the Ray containers and the runtime reads to know
#: its TrainJob, attempt, RayCluster and pod (builders/pods.py, rayjob.py, hardening.py): a
#: user's variable of the same name would replace the operator's, and the runtime's reports
#: would then name another attempt, which the operator ignores.
RESERVED_ENV_NAMES = (
    "RAYTRAIN_CONTRACT",
    "RAYTRAIN_TRAINJOB_NAMESPACE",
    "RAYTRAIN_TRAINJOB_NAME",
    "RAYTRAIN_ATTEMPT",
    "RAYTRAIN_RAYJOB",
    "RAYTRAIN_RAYCLUSTER",
    "RAYTRAIN_POD_NAME",
    "RAYTRAIN_NODE_NAME",
    "RAYTRAIN_POD_IP",
    "RAYTRAIN_DRAIN_SECONDS",
)
#: Label and annotation key prefixes a TrainJob cannot put on its children: the operator's own
#: (`raytrain.dev/`), KubeRay's (`ray.io/`), and the well-known application labels, by which
#: KubeRay's pods are recognised and by which NetworkPolicies (the job's own, whose default peer
#: is `app.kubernetes.io/name: kuberay-operator` in every namespace) admit peers.
RESERVED_KEY_PREFIXES = ("app.kubernetes.io/", "ray.io/", "raytrain.dev/")
#: Directories the builders mount in every Ray container (the contract and /dev/shm); the
#: checkpoint claim's mountPath is checked beside them.
BUILDER_MOUNT_PATHS = ("/etc/raytrain", "/dev/shm")
#: The Kubernetes name of `resourcesPerWorker.gpu`.
NVIDIA_GPU = "nvidia.com/gpu"
#: A Kubernetes resource name that resourcesPerWorker takes besides cpu, memory and gpu: a name
#: with a domain (`nvidia.com/gpu`, `rdma/ib`, `vpc.amazonaws.com/efa`), ephemeral-storage or a
#: hugepages size.
RESOURCE_NAME = re.compile(
    r"^(ephemeral-storage|hugepages-[0-9]+[KMGT]i?|"
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$"
)
#: KubeRay gives a Ray node as many GPUs as the first such resource of its container's limits
#: holds (utils.IsGPUResourceKey): a name ending in `gpu`, or an NVIDIA MIG slice.
GPU_RESOURCE_NAME = re.compile(r"^(.+/.*gpu|nvidia\.com/mig-[0-9]+g\.[0-9]+gb)$")
#: Kubernetes resources that KubeRay turns into a Ray resource of another name on the node
#: (common/pod.go, customAcceleratorToRayResourceMap): Ray Train's workers ask for them by it.
RAY_ACCELERATOR_RESOURCES = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}
#: Limits of one worker's resources: far above any node, far below an overflow.
MAX_CPU = "1024"
MIN_MEMORY = "1Mi"
MAX_MEMORY = "64Ti"
MAX_GPU = 64
MAX_CUSTOM = 10000
#: Longest wall-clock limit or TTL (ten years): longer ones are mistakes, not plans.
MAX_SECONDS = 10 * 365 * 24 * 3600


def rule(rule: str, message: str, **extra: str) -> JsonValue:
    """One CEL rule; its message names the field and the fix."""
    return {"rule": rule, "message": message, **extra}


def naming(message: str, value: str) -> str:
    """A CEL messageExpression: `message` with the offending value (a CEL expression) put in
    place of `{}`, so the refusal names the value as well as the field and the fix."""
    before, after = message.split("{}")
    assert "'" not in message, message
    return f"'{before}' + {value} + '{after}'"


def reserved_keys_rule(field: str, what: str) -> JsonValue:
    """CEL: no key of the map has a prefix of RESERVED_KEY_PREFIXES; the refusal names one."""
    has_prefix = " || ".join(f"k.startsWith('{p}')" for p in RESERVED_KEY_PREFIXES)
    prefixes = ", ".join(f"{p}*" for p in RESERVED_KEY_PREFIXES)
    why = (
        f"{prefixes} {what} keys on the Ray pods belong to the operator and KubeRay "
        "(NetworkPolicies admit pods by such labels); use a key of your own "
        "(e.g. example.com/app)"
    )
    return rule(
        f"!self.exists(k, {has_prefix})",
        f"{field}: {why}",
        messageExpression=naming(
            f"{field}: the key {{}} is reserved: {why}",
            f"self.filter(k, {has_prefix})[0]",
        ),
    )


def quantity_rule(
    field: str, low: str, high: str, low_int: int, high_int: int, examples: str
) -> JsonValue:
    """A Kubernetes quantity (integer or string) between two bounds, as the API server parses it.

    `isQuantity` alone accepts `1e1000000`; the bounds keep every value a number the builders
    and Ray can hold.
    """
    return rule(
        f"type(self) == int ? (self >= {low_int} && self <= {high_int}) : "
        f"(isQuantity(self) && quantity(self).compareTo(quantity('{low}')) >= 0 && "
        f"quantity(self).compareTo(quantity('{high}')) <= 0)",
        f"{field} must be a Kubernetes quantity between {low} and {high} (e.g. {examples})",
    )


def label_map(field: str, what: str, max_properties: int = 64) -> JsonDict:
    """Schema extras of a map whose keys are label (or annotation) keys."""
    return {
        "maxProperties": max_properties,
        "x-kubernetes-validations": [
            rule(
                f"self.all(k, size(k) <= 316 && k.matches('{LABEL_KEY}'))",
                f"{field}: every key must be a {what} key: an optional DNS-subdomain prefix "
                "and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending "
                "with a letter or digit (e.g. example.com/team)",
            )
        ],
    }


def _unset(value: object) -> bool:
    return value is None


def new_field(**constraints: Any) -> Any:
    """A field added after 0.1.0: left out of a dump while unset, so the hash of a spec that does
    not use it (the RayJob's raytrain.dev/spec-hash) stays what earlier operators computed, and
    an operator upgrade alone never looks like a spec change."""
    return Field(default=None, exclude_if=_unset, **constraints)


class Model(BaseModel):
    """The base of every API model: camelCase names on the wire, attribute docstrings as the
    CRD's descriptions, unknown fields refused."""

    model_config = ConfigDict(
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="forbid",
        alias_generator=to_camel,
    )
