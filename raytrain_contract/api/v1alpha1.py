"""The TrainJob API, `raytrain.dev/v1alpha1`: the one source of truth for spec and status.

These models are what the operator parses, and `raytrain_operator.api.crd` turns them into the
CRD's structural schema (descriptions come from the attribute docstrings below, so they are what
`kubectl explain trainjob.spec` prints). Field names mirror the Ray Train API that users know:
ScalingConfig, TorchConfig, RunConfig, CheckpointConfig, FailureConfig, Tune.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict, JsonValue
from pydantic.fields import FieldInfo

from raytrain_contract import DEFAULT_TORCH_TIMEOUT_SECONDS

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
_LABEL_KEY = (
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


def _rule(rule: str, message: str, **extra: str) -> JsonValue:
    """One CEL rule; its message names the field and the fix."""
    return {"rule": rule, "message": message, **extra}


def _quantity_rule(
    field: str, low: str, high: str, low_int: int, high_int: int, examples: str
) -> JsonValue:
    """A Kubernetes quantity (integer or string) between two bounds, as the API server parses it.

    `isQuantity` alone accepts `1e1000000`; the bounds keep every value a number the builders
    and Ray can hold.
    """
    return _rule(
        f"type(self) == int ? (self >= {low_int} && self <= {high_int}) : "
        f"(isQuantity(self) && quantity(self).compareTo(quantity('{low}')) >= 0 && "
        f"quantity(self).compareTo(quantity('{high}')) <= 0)",
        f"{field} must be a Kubernetes quantity between {low} and {high} (e.g. {examples})",
    )


def _label_map(field: str, what: str, max_properties: int = 64) -> JsonDict:
    """Schema extras of a map whose keys are label (or annotation) keys."""
    return {
        "maxProperties": max_properties,
        "x-kubernetes-validations": [
            _rule(
                f"self.all(k, size(k) <= 316 && k.matches('{_LABEL_KEY}'))",
                f"{field}: every key must be a {what} key: an optional DNS-subdomain prefix "
                "and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending "
                "with a letter or digit (e.g. example.com/team)",
            )
        ],
    }


#: A label value. Checked by the API server only: the models parse what it accepted.
_LabelValue = Annotated[
    str, WithJsonSchema({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE})
]

#: Container resources as core/v1 ResourceRequirements: requests and limits of quantities.
_RESOURCES_SCHEMA: JsonDict = {
    "type": "object",
    "properties": cast(
        JsonDict,
        {
            kind: {
                "type": "object",
                "description": f"Resource {kind}, by resource name "
                "(cpu, memory, nvidia.com/gpu...).",
                "maxProperties": 16,
                "x-kubernetes-validations": [
                    _rule(
                        "self.all(k, size(k) <= 253 && "
                        "(k in ['cpu', 'memory', 'ephemeral-storage'] "
                        "|| k.startsWith('hugepages-') || k.contains('/')))",
                        f"spec.*.resources.{kind}: a resource is cpu, memory, ephemeral-storage, "
                        "hugepages-<size> or a name with a domain such as nvidia.com/gpu",
                    )
                ],
                "additionalProperties": {
                    "x-kubernetes-int-or-string": True,
                    "maxLength": 64,
                    "x-kubernetes-validations": [
                        _rule(
                            "type(self) == int ? self >= 0 : (isQuantity(self) && "
                            "quantity(self).compareTo(quantity('0')) >= 0 && "
                            "quantity(self).compareTo(quantity('1Ei')) <= 0)",
                            f"spec.*.resources.{kind}: every amount must be a Kubernetes quantity "
                            "between 0 and 1Ei (e.g. 2, 500m, 8Gi)",
                        )
                    ],
                },
            }
            for kind in ("requests", "limits")
        }
        | {
            "claims": {
                "type": "array",
                "maxItems": 32,
                "description": "Dynamic resource claims (DRA) the Ray container uses, by the name "
                "of an entry of resourceClaims. Unset: every entry of resourceClaims.",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {
                            "type": "string",
                            "maxLength": 63,
                            "pattern": DNS_LABEL,
                            "description": "Name of an entry of resourceClaims.",
                        },
                        "request": {
                            "type": "string",
                            "maxLength": 63,
                            "pattern": DNS_LABEL,
                            "description": "One request of the claim; unset: all of them.",
                        },
                    },
                    "additionalProperties": False,
                },
            }
        },
    ),
    "additionalProperties": False,
    "x-kubernetes-validations": [
        _rule(
            "!has(self.requests) || !has(self.limits) || self.requests.all(k, "
            "!(k in self.limits) || quantity(string(self.requests[k])).compareTo("
            "quantity(string(self.limits[k]))) <= 0)",
            "spec.*.resources: a request must not exceed the limit of the same resource; "
            "raise the limit or lower the request",
        )
    ],
}


def _free_list(description: str) -> JsonDict:
    return {
        "type": "array",
        "maxItems": 64,
        "description": description,
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }


def _requirements(what: str) -> JsonDict:
    """core/v1 NodeSelectorRequirement list: the builders append theirs to it."""
    return {
        "type": "array",
        "maxItems": 64,
        "description": f"Requirements on {what}, all of which must hold.",
        "items": {
            "type": "object",
            "required": ["key", "operator"],
            "properties": {
                "key": {"type": "string", "maxLength": 316, "description": "Key."},
                "operator": {
                    "type": "string",
                    "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
                    "description": "In, NotIn, Exists, DoesNotExist, Gt or Lt.",
                },
                "values": {
                    "type": "array",
                    "maxItems": 64,
                    "description": "Values (In, NotIn: one or more; Gt, Lt: one integer).",
                    "items": {"type": "string", "maxLength": 63},
                },
            },
            "additionalProperties": False,
        },
    }


def _pod_affinity(kind: str) -> JsonDict:
    return {
        "type": "object",
        "description": f"core/v1 {kind}.",
        "properties": {
            "requiredDuringSchedulingIgnoredDuringExecution": _free_list(
                "Terms every pod must satisfy (core/v1 PodAffinityTerm)."
            ),
            "preferredDuringSchedulingIgnoredDuringExecution": _free_list(
                "Weighted terms the scheduler prefers (core/v1 WeightedPodAffinityTerm)."
            ),
        },
        "additionalProperties": False,
    }


#: core/v1 Affinity down to its lists, whose items stay free-form: the builders merge their own
#: terms into these lists, so their shape must be what the builders expect.
_AFFINITY_SCHEMA: JsonDict = {
    "type": "object",
    "properties": {
        "nodeAffinity": {
            "type": "object",
            "description": "core/v1 NodeAffinity.",
            "properties": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "type": "object",
                    "description": "core/v1 NodeSelector: any of its terms must match.",
                    "required": ["nodeSelectorTerms"],
                    "properties": {
                        "nodeSelectorTerms": {
                            "type": "array",
                            "maxItems": 64,
                            "description": "core/v1 NodeSelectorTerm list.",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "matchExpressions": _requirements("node labels"),
                                    "matchFields": _requirements("node fields"),
                                },
                                "additionalProperties": False,
                            },
                        }
                    },
                    "additionalProperties": False,
                },
                "preferredDuringSchedulingIgnoredDuringExecution": _free_list(
                    "Weighted terms the scheduler prefers (core/v1 PreferredSchedulingTerm)."
                ),
            },
            "additionalProperties": False,
        },
        "podAffinity": _pod_affinity("PodAffinity"),
        "podAntiAffinity": _pod_affinity("PodAntiAffinity"),
    },
    "additionalProperties": False,
}

#: core/v1 EnvFromSource: a ConfigMap or a Secret by name, with an optional prefix.
_ENV_FROM_SCHEMA: JsonDict = {
    "type": "array",
    "maxItems": 32,
    "items": {
        "type": "object",
        "properties": {
            "prefix": {
                "type": "string",
                "maxLength": 253,
                "pattern": r"^[-._a-zA-Z0-9]*$",
                "description": "Prefix of every variable's name.",
            },
            **{
                ref: {
                    "type": "object",
                    "description": f"The {kind} whose keys become variables.",
                    "required": ["name"],
                    "properties": {
                        "name": {
                            "type": "string",
                            "maxLength": 253,
                            "pattern": DNS_SUBDOMAIN,
                            "description": f"Name of the {kind}.",
                        },
                        "optional": {
                            "type": "boolean",
                            "description": f"Start the pod even if the {kind} is missing.",
                        },
                    },
                    "additionalProperties": False,
                }
                for ref, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret"))
            },
        },
        "additionalProperties": False,
        "x-kubernetes-validations": [
            _rule(
                "has(self.configMapRef) != has(self.secretRef)",
                "spec.*.envFrom: every entry names one configMapRef or one secretRef",
            )
        ],
    },
}

#: core/v1 Toleration, so a malformed one is refused here and not by the pods' creation.
_TOLERATIONS_SCHEMA: JsonDict = {
    "type": "array",
    "maxItems": 32,
    "items": {
        "type": "object",
        "properties": {
            "key": {"type": "string", "maxLength": 316, "description": "Taint key."},
            "operator": {
                "type": "string",
                "enum": ["Exists", "Equal"],
                "description": "Exists or Equal (default).",
            },
            "value": {
                "type": "string",
                "maxLength": 63,
                "pattern": LABEL_VALUE,
                "description": "Taint value (with Equal).",
            },
            "effect": {
                "type": "string",
                "enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"],
                "description": "Taint effect; empty matches every effect.",
            },
            "tolerationSeconds": {
                "type": "integer",
                "description": "Seconds a NoExecute taint is tolerated.",
            },
        },
        "additionalProperties": False,
        "x-kubernetes-validations": [
            _rule(
                "!has(self.operator) || self.operator != 'Exists' || "
                "!has(self.value) || self.value == ''",
                "spec.*.tolerations: a toleration with operator Exists has no value; "
                "remove the value or use operator Equal",
            ),
            _rule(
                "has(self.key) && self.key != '' || (has(self.operator) && "
                "self.operator == 'Exists')",
                "spec.*.tolerations: a toleration without a key must have operator Exists",
            ),
            _rule(
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "spec.*.tolerations: tolerationSeconds is only allowed with effect NoExecute",
            ),
        ],
    },
}

#: core/v1 EnvVar: a name and either a value or a valueFrom source.
_ENV_SCHEMA: JsonDict = {
    "type": "array",
    "maxItems": 256,
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": 256,
                "pattern": ENV_NAME,
                "description": "Variable name.",
            },
            "value": {"type": "string", "description": "Variable value."},
            "valueFrom": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "description": "Source of the value (core/v1 EnvVarSource).",
            },
        },
        "additionalProperties": False,
        "x-kubernetes-validations": [
            _rule(
                "!(has(self.value) && has(self.valueFrom))",
                "spec.*.env: set value or valueFrom of an environment variable, not both",
            )
        ],
    },
}


def _naming(message: str, value: str) -> str:
    """A CEL messageExpression: `message` with the offending value (a CEL expression) put in
    place of `{}`, so the refusal names the value as well as the field and the fix."""
    before, after = message.split("{}")
    assert "'" not in message, message
    return f"'{before}' + {value} + '{after}'"


def _not_under(path: str) -> str:
    """CEL: `self.mountPath` is neither `path` nor inside it."""
    return f"self.mountPath != '{path}' && !self.mountPath.startsWith('{path}/')"


#: core/v1 Volume: a name of its own and one volume source, kept as written (the API server
#: checks the source when KubeRay creates the pods).
_VOLUMES_SCHEMA: JsonDict = {
    "type": "array",
    "maxItems": 64,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {
                "type": "string",
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "Volume name, referred to by volumeMounts.",
            }
        },
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-validations": [
            _rule(
                f"!(self.name in {list(RESERVED_VOLUME_NAMES)!r})",
                "spec.*.volumes: the names "
                + ", ".join(RESERVED_VOLUME_NAMES)
                + " belong to the volumes the operator adds (contract, checkpoint storage, "
                "/dev/shm); rename the volume",
                messageExpression=_naming(
                    "spec.*.volumes: the name {} belongs to a volume the operator adds "
                    "(contract, checkpoint storage, /dev/shm); rename the volume",
                    "self.name",
                ),
            ),
        ],
    },
}

#: core/v1 VolumeMount, field by field (the builders read name and mountPath).
_VOLUME_MOUNTS_SCHEMA: JsonDict = {
    "type": "array",
    "maxItems": 64,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["mountPath"],
    "items": {
        "type": "object",
        "required": ["name", "mountPath"],
        "properties": {
            "name": {
                "type": "string",
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "Name of an entry of volumes.",
            },
            "mountPath": {
                "type": "string",
                "maxLength": 1024,
                "pattern": r"^(/[^/:]+)+$",
                "description": "Absolute path in the Ray container.",
            },
            "readOnly": {"type": "boolean", "description": "Mount read-only."},
            "subPath": {
                "type": "string",
                "maxLength": 512,
                "description": "Path inside the volume to mount instead of its root.",
            },
            "subPathExpr": {
                "type": "string",
                "maxLength": 512,
                "description": "subPath with $(VAR) references to the container's environment.",
            },
            "mountPropagation": {
                "type": "string",
                "enum": ["None", "HostToContainer", "Bidirectional"],
                "description": "None (default), HostToContainer or Bidirectional.",
            },
            "recursiveReadOnly": {
                "type": "string",
                "enum": ["Disabled", "IfPossible", "Enabled"],
                "description": "Disabled, IfPossible or Enabled (with readOnly).",
            },
        },
        "additionalProperties": False,
        "x-kubernetes-validations": [
            _rule(
                "!self.mountPath.matches('/[.][.]?(/|$)')",
                "spec.*.volumeMounts: mountPath must be a plain absolute path without '.' or "
                "'..' segments, e.g. /data/cache",
            ),
            _rule(
                " && ".join(_not_under(path) for path in BUILDER_MOUNT_PATHS),
                "spec.*.volumeMounts: mountPath must not be or nest in "
                + " or ".join(BUILDER_MOUNT_PATHS)
                + ", which the operator mounts (the contract, /dev/shm sized for Ray's object "
                "store); choose a directory of its own such as /data/cache",
                messageExpression=_naming(
                    "spec.*.volumeMounts: mountPath {} must not be or nest in "
                    + " or ".join(BUILDER_MOUNT_PATHS)
                    + ", which the operator mounts (the contract, /dev/shm sized for the Ray "
                    "object store); choose a directory of its own such as /data/cache",
                    "self.mountPath",
                ),
            ),
            _rule(
                f"!(self.name in {list(RESERVED_VOLUME_NAMES)!r})",
                "spec.*.volumeMounts: the volumes "
                + ", ".join(RESERVED_VOLUME_NAMES)
                + " are mounted by the operator; mount a volume of your own from volumes",
                messageExpression=_naming(
                    "spec.*.volumeMounts: the volume {} is mounted by the operator; mount a "
                    "volume of your own from volumes",
                    "self.name",
                ),
            ),
            _rule(
                "!has(self.subPath) || !has(self.subPathExpr)",
                "spec.*.volumeMounts: set subPath or subPathExpr, not both",
            ),
        ],
    },
}

#: core/v1 LocalObjectReference list.
_PULL_SECRETS_SCHEMA: JsonDict = {
    "type": "array",
    "maxItems": 16,
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {
                "type": "string",
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN,
                "description": "Name of a Secret of type kubernetes.io/dockerconfigjson.",
            }
        },
        "additionalProperties": False,
    },
}

#: core/v1 PodResourceClaim: a name and exactly one of a ResourceClaim or a template.
_RESOURCE_CLAIMS_SCHEMA: JsonDict = {
    "type": "array",
    "maxItems": 32,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {
                "type": "string",
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "Name of the claim inside the pod (resources.claims refers to it).",
            },
            "resourceClaimName": {
                "type": "string",
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN,
                "description": "An existing ResourceClaim shared by every pod of the group.",
            },
            "resourceClaimTemplateName": {
                "type": "string",
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN,
                "description": "A ResourceClaimTemplate: each pod gets a claim of its own.",
            },
        },
        "additionalProperties": False,
        "x-kubernetes-validations": [
            _rule(
                "has(self.resourceClaimName) != has(self.resourceClaimTemplateName)",
                "spec.*.resourceClaims: every entry sets exactly one of resourceClaimName or "
                "resourceClaimTemplateName",
            )
        ],
    },
}


def _unset(value: object) -> bool:
    return value is None


def _new(**constraints: Any) -> Any:
    """A field added after 0.1.0: left out of a dump while unset, so the hash of a spec that does
    not use it (the RayJob's raytrain.dev/spec-hash) stays what earlier operators computed, and
    an operator upgrade alone never looks like a spec change."""
    return Field(default=None, exclude_if=_unset, **constraints)


class _Model(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="forbid",
        alias_generator=to_camel,
    )


class PlacementStrategy(str, Enum):
    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_PACK = "STRICT_PACK"
    STRICT_SPREAD = "STRICT_SPREAD"


class TorchBackend(str, Enum):
    NCCL = "nccl"
    GLOO = "gloo"


class ScoreOrder(str, Enum):
    MAX = "max"
    MIN = "min"


class DatasetFormat(str, Enum):
    PARQUET = "parquet"
    CSV = "csv"
    JSON = "json"
    NUMPY = "numpy"
    TEXT = "text"


class WorkerResources(_Model):
    """Resources of one training worker (Ray Train's resources_per_worker), multiplied by
    workersPerPod in the worker pods' requests and limits. Besides cpu, memory, gpu and custom,
    any Kubernetes resource by its name: `nvidia.com/gpu: 1` (the same as gpu: 1; set one of
    the two), another GPU (`amd.com/gpu`, a MIG slice `nvidia.com/mig-1g.10gb`), `rdma/ib`,
    `vpc.amazonaws.com/efa`, `ephemeral-storage`, `hugepages-2Mi`. Names with a domain take
    whole numbers. Ray sees the GPU as the workers' GPUs (num-gpus), and
    aws.amazon.com/neuroncore and google.com/tpu as its neuron_cores and TPU resources; every
    other name reaches the pods only (Ray does not schedule by it). These names are checked by
    the operator, which refuses a bad one in the TrainJob's status: the API server cannot check
    keys it does not know."""

    model_config = ConfigDict(extra="allow")

    cpu: int | str | None = Field(
        default=None,
        json_schema_extra={
            "maxLength": 64,
            "x-kubernetes-validations": [
                _quantity_rule(
                    "spec.scaling.resourcesPerWorker.cpu", "1m", MAX_CPU, 1, 1024, "2 or 500m"
                )
            ],
        },
    )
    """CPU per worker as a Kubernetes quantity (`2`, `500m`), 1m to 1024. Default 1."""
    memory: int | str | None = Field(
        default=None,
        json_schema_extra={
            "maxLength": 64,
            "x-kubernetes-validations": [
                _quantity_rule(
                    "spec.scaling.resourcesPerWorker.memory",
                    MIN_MEMORY,
                    MAX_MEMORY,
                    2**20,
                    2**46,
                    "8Gi or 512Mi",
                )
            ],
        },
    )
    """Memory per worker as a Kubernetes quantity (`8Gi`), 1Mi to 64Ti. Unset: no memory
    request."""
    gpu: int | None = Field(default=None, ge=0, le=MAX_GPU)
    """GPUs per worker (`nvidia.com/gpu`). Default 1 when scaling.useGpu is true, else 0."""
    custom: dict[str, Annotated[float, Field(ge=0, le=MAX_CUSTOM)]] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": 16,
            "x-kubernetes-validations": [
                _rule(
                    "self.all(k, size(k) <= 63 && k.matches('^[A-Za-z_][A-Za-z0-9_.-]*$'))",
                    "spec.scaling.resourcesPerWorker.custom: a resource name has at most 63 "
                    "letters, digits, '_', '.' or '-' and starts with a letter or '_' "
                    "(e.g. my_fast_disk)",
                ),
                _rule(
                    "self.all(k, !(k.lowerAscii() in "
                    + repr(list(RESERVED_RAY_RESOURCES))
                    + ") && !k.lowerAscii().endsWith('gpu'))",
                    "spec.scaling.resourcesPerWorker.custom: CPU, GPU, memory, "
                    "object_store_memory, accelerator names (TPU, NPU, HPU, neuron_cores...) and "
                    "names ending in 'gpu' are not custom resources: set "
                    "resourcesPerWorker.cpu, .memory or .gpu instead",
                ),
                _rule(
                    "self.all(k, double(int(self[k] * 10000.0 + 0.5)) / 10000.0 == self[k])",
                    "spec.scaling.resourcesPerWorker.custom: Ray counts resources in steps of "
                    "0.0001; round every amount to at most 4 decimal places",
                ),
            ],
        },
    )
    """Extra Ray custom resources per worker, by name: 0 to 10000, in steps of 0.0001."""

    @model_validator(mode="after")
    def _kubernetes_names(self) -> WorkerResources:
        field = "spec.scaling.resourcesPerWorker"
        gpus: list[str] = ["gpu"] if self.gpu is not None else []
        for name, amount in self.kubernetes.items():
            if not RESOURCE_NAME.match(name) or len(name) > 253:
                raise ValueError(
                    f"{field}: {name!r} is not a resource name; write cpu, memory, gpu, custom "
                    "(Ray resources) or a Kubernetes resource name such as nvidia.com/gpu, "
                    "rdma/ib, vpc.amazonaws.com/efa, ephemeral-storage"
                )
            whole = "/" in name
            if isinstance(amount, bool) or not isinstance(amount, int | str):
                raise ValueError(f"{field}.{name}: {amount!r} is not a quantity; write e.g. 1")
            text = str(amount)
            if whole and not (text.isdigit() and int(text) <= MAX_CUSTOM):
                raise ValueError(
                    f"{field}.{name}: {amount!r} must be a whole number from 0 to {MAX_CUSTOM} "
                    "(Kubernetes counts devices in whole units); write e.g. 1"
                )
            if GPU_RESOURCE_NAME.match(name):
                gpus.append(name)
        if "gpu" in gpus and NVIDIA_GPU in gpus:
            raise ValueError(
                f"{field}: gpu and {NVIDIA_GPU} are the same resource; set one of them"
            )
        if len(gpus) > 1:
            raise ValueError(
                f"{field}: one GPU resource per worker, got {', '.join(sorted(gpus))} (KubeRay "
                "gives Ray the first one only); keep one"
            )
        return self

    @property
    def kubernetes(self) -> dict[str, int | str]:
        """The Kubernetes resources written by name (`nvidia.com/gpu`, `rdma/ib`...)."""
        return dict(self.model_extra or {})


class NetworkProfile(str, Enum):
    INFINIBAND = "infiniband"
    EFA = "efa"


class NetworkSpec(_Model):
    """The workers' fast network for NCCL, opt-in. For each worker pod it adds the profile's
    devices to the Ray container's requests and limits (infiniband: `rdma/ib`, the RDMA
    shared device plugin's resource; efa: `vpc.amazonaws.com/efa`, the AWS EFA device plugin's),
    the IPC_LOCK capability (RDMA pins the memory it registers with the NIC, beyond the default
    locked-memory limit; the workers keep `drop: [ALL]` otherwise), and this environment, each
    variable overridden by the same name in workerTemplate.env:
    infiniband: NCCL_IB_DISABLE=0 (use the InfiniBand/RoCE transport even if the image turns it
    off), NCCL_NET=IB (fail when the IB transport cannot start instead of falling back to TCP
    sockets, many times slower), NCCL_DEBUG=WARN (say why a transport failed);
    efa: FI_PROVIDER=efa (libfabric, which NCCL's aws-ofi-nccl plugin uses, takes the EFA
    provider and fails without it instead of using TCP), NCCL_DEBUG=WARN.
    IPC_LOCK is not allowed by the baseline or restricted Pod Security Standards: the worker
    pods then need a namespace that admits privileged pods. The head, which runs no training,
    gets none of this."""

    profile: NetworkProfile
    """infiniband (InfiniBand or RoCE through rdma/ib) or efa (AWS Elastic Fabric Adapter)."""
    devices_per_pod: int = Field(default=1, ge=1, le=32)
    """Devices each worker pod requests: 1 for a shared RDMA device (infiniband); for efa the
    node's EFA interfaces (4 on p4d.24xlarge, 32 on p5.48xlarge)."""


SLICES_NEED_ELASTIC = (
    "spec.scaling.kueueWorkloadSlices resizes an elastic job: set minWorkers and maxWorkers "
    "instead of numWorkers, or remove kueueWorkloadSlices"
)


class ScalingSpec(_Model):
    """How many training workers run and what each gets (Ray Train's ScalingConfig)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!has(self.numWorkers) || (!has(self.minWorkers) && !has(self.maxWorkers))",
                    "spec.scaling: numWorkers cannot be combined with minWorkers/maxWorkers; "
                    "remove numWorkers for an elastic job or min/max for a fixed one",
                ),
                _rule(
                    "!has(self.minWorkers) || !has(self.maxWorkers) || "
                    "self.minWorkers <= self.maxWorkers",
                    "spec.scaling.minWorkers must be less than or equal to spec.scaling.maxWorkers",
                ),
                _rule(
                    "!has(self.numWorkers) || !has(self.workersPerPod) || "
                    "self.numWorkers % self.workersPerPod == 0",
                    "spec.scaling.numWorkers must be a multiple of spec.scaling.workersPerPod "
                    "so that every pod runs the same number of workers",
                ),
                _rule(
                    "!has(self.maxWorkers) || !has(self.workersPerPod) || "
                    "(self.maxWorkers % self.workersPerPod == 0 && "
                    "self.minWorkers % self.workersPerPod == 0)",
                    "spec.scaling.minWorkers and maxWorkers must be multiples of "
                    "spec.scaling.workersPerPod",
                ),
                _rule(
                    "!has(self.kueueWorkloadSlices) || !self.kueueWorkloadSlices || "
                    "!has(self.numWorkers)",
                    SLICES_NEED_ELASTIC,
                ),
                _rule(
                    "!has(self.acceleratorType) || (has(self.useGpu) && self.useGpu)",
                    "spec.scaling.acceleratorType needs spec.scaling.useGpu: true",
                ),
                _rule(
                    "!has(self.acceleratorType) || !has(self.resourcesPerWorker) || "
                    "!has(self.resourcesPerWorker.gpu) || self.resourcesPerWorker.gpu > 0",
                    "spec.scaling.acceleratorType needs GPUs: set "
                    "spec.scaling.resourcesPerWorker.gpu to 1 or more, or remove acceleratorType",
                ),
            ]
        }
    )

    @model_validator(mode="after")
    def _size_set(self) -> ScalingSpec:
        # The CRD says this at spec level (a template may set the size); the operator checks the
        # spec it runs, a template's values merged in.
        if self.num_workers is None and (self.min_workers is None or self.max_workers is None):
            raise ValueError(
                "set numWorkers for a fixed-size job, or both minWorkers and maxWorkers for an "
                "elastic one"
            )
        if self.kueue_workload_slices and self.num_workers is not None:
            raise ValueError(SLICES_NEED_ELASTIC)
        return self

    num_workers: int | None = Field(default=None, ge=1, le=10000)
    """Number of training workers for a fixed-size job (ScalingConfig.num_workers)."""
    min_workers: int | None = Field(default=None, ge=1, le=10000)
    """Fewest workers an elastic job runs with; set together with maxWorkers."""
    max_workers: int | None = Field(default=None, ge=1, le=10000)
    """Most workers an elastic job runs with; set together with minWorkers."""
    kueue_workload_slices: bool | None = _new()
    """For an elastic job in a Kueue queue (spec.queueName): let Kueue admit it at minWorkers
    and grow it a workload slice at a time, up to maxWorkers, as Ray's autoscaler asks for
    more workers (the RayJob gets `kueue.x-k8s.io/elastic-job: "true"`). Needs Kueue 0.15.2 or
    later with its ElasticJobsViaWorkloadSlices feature gate on. Without it a queued elastic
    job asks Kueue for maxWorkers and runs at that size."""
    use_gpu: bool = False
    """Give each worker GPUs (ScalingConfig.use_gpu)."""
    resources_per_worker: WorkerResources | None = None
    """Resources of each worker; they become pod requests and limits."""
    workers_per_pod: int = Field(default=1, ge=1, le=64)
    """Training workers packed into one worker pod (for example 8 on an 8-GPU node)."""
    accelerator_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!self.lowerAscii().endsWith('gpu')",
                    "spec.scaling.acceleratorType must not end in 'gpu' (KubeRay would count "
                    "the Ray resource accelerator_type:<value> as GPUs); write the product as "
                    "the node label nvidia.com/gpu.product shows it, e.g. NVIDIA-A100-SXM4-80GB",
                )
            ]
        },
    )
    """GPU product the workers need, as the node label `nvidia.com/gpu.product` shows it (for
    example `NVIDIA-A100-SXM4-80GB`). The worker pods require nodes with that label value, and
    the worker group offers the Ray resource `accelerator_type:<value>` that Ray Train's
    ScalingConfig(accelerator_type=<value>) asks for, so one name serves both."""
    placement_strategy: PlacementStrategy = PlacementStrategy.PACK
    """How workers are placed: PACK, SPREAD (preferred) or STRICT_PACK, STRICT_SPREAD (required)."""


class TorchSpec(_Model):
    """The torch.distributed process group (Ray Train's TorchConfig)."""

    backend: TorchBackend | None = None
    """Collective backend: nccl or gloo. Default nccl with GPUs, gloo without."""
    timeout_seconds: int = Field(default=DEFAULT_TORCH_TIMEOUT_SECONDS, ge=1, le=86400)
    """Seconds to wait for the process group to form."""


class PVCStorage(_Model):
    """A ReadWriteMany PersistentVolumeClaim mounted at the same path on head and every worker."""

    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """PersistentVolumeClaim in the TrainJob's namespace; it must allow ReadWriteMany."""
    mount_path: str = Field(
        default="/mnt/raytrain",
        max_length=1024,
        pattern=r"^(/[^/:]+)+$",
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!self.matches('/[.][.]?(/|$)')",
                    "spec.storage.pvc.mountPath must be a plain absolute path without '.' or "
                    "'..' segments, e.g. /mnt/raytrain",
                ),
                _rule(
                    "!(self in " + repr(list(RESERVED_MOUNT_PATHS)) + ") && "
                    "!self.startsWith('/etc/raytrain/') && !self.startsWith('/dev/') && "
                    "!self.startsWith('/proc/') && !self.startsWith('/sys/')",
                    "spec.storage.pvc.mountPath must not hide or nest in a directory the pods "
                    "need (/dev/shm, /etc/raytrain, /tmp, /usr, /app...); use a directory of its "
                    "own such as /mnt/raytrain",
                ),
            ]
        },
    )
    """Where the claim is mounted in every pod (an absolute path of its own)."""
    sub_path: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^[^:]*$",
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!self.matches('(^|/)[.][.](/|$)')",
                    "spec.storage.pvc.subPath must stay inside the claim: remove the '..' "
                    "segments (e.g. runs/digits)",
                ),
            ]
        },
    )
    """Directory inside the claim that holds this job's runs, relative to mountPath (no '..')."""


class SecretKeys(_Model):
    """A Secret holding S3 credentials."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Name of the Secret in the TrainJob's namespace."""
    access_key_id_key: str = Field(
        default="AWS_ACCESS_KEY_ID", min_length=1, max_length=253, pattern=SECRET_KEY
    )
    """Key of the access key id in the Secret."""
    secret_access_key_key: str = Field(
        default="AWS_SECRET_ACCESS_KEY", min_length=1, max_length=253, pattern=SECRET_KEY
    )
    """Key of the secret access key in the Secret."""
    session_token_key: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=SECRET_KEY
    )
    """Key of an optional session token in the Secret."""


class S3Storage(_Model):
    """An S3 (or S3-compatible) location for checkpoints and results."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!(has(self.credentialsSecret) && has(self.serviceAccountName))",
                    "spec.storage.s3: set credentialsSecret or serviceAccountName (IRSA), not both",
                )
            ]
        }
    )

    uri: str = Field(
        max_length=1024,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$')",
                    "spec.storage.s3.uri must look like s3://bucket/prefix "
                    "(lower-case bucket name, 3-63 characters)",
                ),
                _rule(
                    "!self.matches('/[.][.]?(/|$)') && !self.matches('[[:cntrl:]]')",
                    "spec.storage.s3.uri: the prefix must not contain '.' or '..' segments or "
                    "control characters (they would leave the prefix); write it like "
                    "s3://bucket/team/runs",
                ),
            ]
        },
    )
    """Bucket and prefix, `s3://bucket/prefix`."""
    endpoint: str | None = Field(
        default=None,
        max_length=512,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "self.matches('^https?://[^/]+/?$')",
                    "spec.storage.s3.endpoint must be a URL such as http://minio.storage:9000 "
                    "(scheme and host, no path)",
                )
            ]
        },
    )
    """Endpoint of an S3-compatible store (MinIO, Ceph); unset for AWS S3."""
    region: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"
    )
    """Region of the bucket."""
    credentials_secret: SecretKeys | None = None
    """Secret with an access key; its values reach the pods as env, never the status."""
    service_account_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    """Service account whose cloud identity (IRSA, workload identity) reaches the bucket."""


class StorageSpec(_Model):
    """Where checkpoints live (RunConfig.storage_path). Required: no TrainJob trains on
    ephemeral storage. Set exactly one of pvc or s3."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "(has(self.pvc) ? 1 : 0) + (has(self.s3) ? 1 : 0) == 1",
                    "spec.storage: set exactly one of storage.pvc (a ReadWriteMany claim) or "
                    "storage.s3 (a bucket URI)",
                )
            ]
        }
    )

    pvc: PVCStorage | None = None
    """A ReadWriteMany claim mounted in every pod."""
    s3: S3Storage | None = None
    """An S3 or S3-compatible bucket."""


class CheckpointSpec(_Model):
    """Which checkpoints are kept (Ray Train's CheckpointConfig)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!has(self.scoreOrder) || has(self.scoreAttribute)",
                    "spec.checkpoint.scoreOrder needs spec.checkpoint.scoreAttribute "
                    "(the reported metric to rank checkpoints by)",
                )
            ]
        }
    )

    num_to_keep: int | None = Field(default=None, ge=1, le=100000)
    """Checkpoints kept; older (or worse-scoring) ones are removed by Ray Train. Unset: keep all."""
    score_attribute: str | None = Field(default=None, min_length=1, max_length=256)
    """Reported metric that ranks checkpoints."""
    score_order: ScoreOrder | None = None
    """max or min: whether a higher or a lower score is better. Default max."""


class FailureSpec(_Model):
    """Worker-group restarts inside one Ray cluster (Ray Train's FailureConfig)."""

    max_failures: int = Field(default=0, ge=-1, le=10000)
    """Worker-group failures tolerated before the attempt fails; -1 retries forever."""


#: The classes a failed attempt is sorted into (raytrain_operator.status.triage.FailureClass),
#: the keys of spec.retryPolicy.classes.
FAILURE_CLASSES = (
    "OOMKilled",
    "ImagePullFailed",
    "Unschedulable",
    "NodeLost",
    "UserException",
    "CollectiveTimeout",
    "Unknown",
)
_CLASS_LIST = ", ".join(FAILURE_CLASSES)


class ExitCodeRetry(_Model):
    """Whether a failed attempt whose container exited with `code` is retried."""

    code: int = Field(ge=0, le=255)
    """Exit code of the failed container (the one the failure was classified from), 0-255."""
    retry: bool
    """true: retried while spec.backoffLimit allows; false: the job fails at once."""


class RetryPolicySpec(_Model):
    """Which failed attempts are retried. An attempt that failed is classified (see
    docs/failures.md); its exit code, if spec.retryPolicy.exitCodes names it, decides, else its
    class. A retry is always a new attempt bounded by spec.backoffLimit; an input that fails the
    same way every time (an invalid image name) is never retried."""

    classes: dict[str, bool] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": len(FAILURE_CLASSES),
            "x-kubernetes-validations": [
                _rule(
                    "self.all(k, k in [" + ", ".join(f"'{c}'" for c in FAILURE_CLASSES) + "])",
                    f"spec.retryPolicy.classes: a key must be one of {_CLASS_LIST} "
                    "(case as written); remove or rename the other keys",
                )
            ],
        },
    )
    """Failure class -> retry. Keys: OOMKilled, ImagePullFailed, Unschedulable, NodeLost,
    UserException, CollectiveTimeout, Unknown. A class left out keeps its default: OOMKilled and
    UserException are not retried, every other class is."""
    exit_codes: list[ExitCodeRetry] | None = Field(
        default=None,
        max_length=256,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["code"]},
    )
    """Exit code -> retry; an entry here wins over the class of the failure. Each code at most
    once."""

    @model_validator(mode="after")
    def _known_classes(self) -> RetryPolicySpec:
        unknown = sorted(set(self.classes or {}) - set(FAILURE_CLASSES))
        if unknown:
            raise ValueError(
                f"spec.retryPolicy.classes: unknown class {', '.join(unknown)}; a key must be "
                f"one of {_CLASS_LIST}"
            )
        codes = [rule.code for rule in self.exit_codes or []]
        twice = sorted({code for code in codes if codes.count(code) > 1})
        if twice:
            raise ValueError(
                f"spec.retryPolicy.exitCodes: code {', '.join(map(str, twice))} is listed more "
                "than once; keep one entry per code"
            )
        return self


class DatasetSpec(_Model):
    """A named input read with Ray Data and sharded across the workers."""

    uri: str = Field(min_length=1, max_length=2048)
    """Location: `s3://bucket/path`, or a path on the job's PVC or in the image."""
    format: DatasetFormat = DatasetFormat.PARQUET
    """File format: parquet, csv, json, numpy or text."""
    split: bool = True
    """Shard it across workers (true) or give every worker all of it (false)."""


class DisruptionSpec(_Model):
    """How the job meets a node drain, an eviction, a Kueue preemption or a spot reclaim."""

    pod_disruption_budget: bool = True
    """Create a PodDisruptionBudget (policy/v1) over the job's Ray pods that lets one go at a
    time (minAvailable: the head and workers less one): a node drain or any other Eviction API
    caller then takes them one by one, each after the previous one's replacement is Ready, so
    the job checkpoints and restarts from one lost pod instead of losing every worker at once.
    It does not stop a spot reclaim or a Kueue preemption, which do not ask the Eviction API.
    false: no budget (a drain evicts every pod at once)."""
    max_preemptions: int = Field(default=10, ge=0, le=1000)
    """Attempts that may fail because Kubernetes took a pod away (an eviction, a drain, a
    preemption, a lost node: the pod's DisruptionTarget condition or a NodeLost failure) and
    are retried from the latest checkpoint without spending spec.backoffLimit. Counted in
    status.preemptions; past it, such a failure spends spec.backoffLimit like any other.
    Inside one cluster, Ray Train retries a drained worker against its own budget."""
    termination_grace_period_seconds: int | None = Field(default=None, ge=1, le=86400)
    """Seconds a Ray pod has between the start of its deletion (an eviction, a drain) and its
    kill, unless spec.head or spec.workerTemplate sets its own; default 120. A worker's preStop
    hook tells Ray the node is going with a deadline 10 s short of it, so a loop that calls
    ray.train.get_preemption_info() can report a checkpoint in that time."""


class TuneScheduler(_Model):
    """Trial scheduler for the search."""

    type: str = Field(default="ASHA", pattern="^(ASHA|FIFO)$")
    """ASHA (early-stops weak trials) or FIFO."""
    max_t: int | None = Field(default=None, ge=1, le=10**9)
    """Most training iterations a trial runs (ASHA)."""
    grace_period: int = Field(default=1, ge=1, le=10**9)
    """Iterations a trial runs before it can be stopped (ASHA)."""
    reduction_factor: float = Field(default=2.0, gt=1, le=1000)
    """Fraction of trials kept at each rung is 1/reductionFactor (ASHA)."""


class TuneSpec(_Model):
    """Optional hyperparameter search with Ray Tune; each trial is a TorchTrainer run."""

    param_space: dict[str, Any] = Field(json_schema_extra=PRESERVE)
    """Search space merged into config: per key `{uniform: [lo, hi]}`, `{loguniform: [lo, hi]}`,
    `{randint: [lo, hi]}`, `{choice: [...]}`, `{grid: [...]}` or a plain value."""
    num_samples: int = Field(default=1, ge=1, le=10000)
    """Trials to run (each grid combination counts once per sample)."""
    metric: str = Field(min_length=1, max_length=256)
    """Reported metric the search optimises."""
    mode: ScoreOrder = ScoreOrder.MAX
    """max or min."""
    max_concurrent_trials: int | None = Field(default=None, ge=1, le=10000)
    """Trials running at once (default 1). The worker group has the workers of each; each
    running trial's driver runs on the head (about 0.6 GB of its memory)."""
    scheduler: TuneScheduler | None = None
    """Trial scheduler; default FIFO."""


class PodOverrides(_Model):
    """Pod-level settings for the head or the worker pods."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
                    "self.volumes.exists(v, v.name == m.name))",
                    "spec.*.volumeMounts: every mount names an entry of volumes of the same "
                    "pod template; add the volume or fix the mount's name",
                ),
                _rule(
                    "!has(self.resources) || !has(self.resources.claims) || "
                    "self.resources.claims.all(c, has(self.resourceClaims) && "
                    "self.resourceClaims.exists(r, r.name == c.name))",
                    "spec.*.resources.claims: every claim names an entry of resourceClaims of "
                    "the same pod template; add it there or fix the name",
                ),
            ]
        }
    )

    resources: Annotated[dict[str, Any], WithJsonSchema(_RESOURCES_SCHEMA)] | None = None
    """Container resources of the Ray container: requests, limits and DRA claims. Head: they
    replace the whole default (1 CPU and 4Gi requested, a 4Gi memory limit). Workers: they are
    added to what scaling.resourcesPerWorker (x workersPerPod) and spec.network give the
    container, for resources those do not set (ephemeral-storage, hugepages-2Mi, a device); cpu,
    memory, the GPU and every name of resourcesPerWorker or of the network profile belong there,
    and the same name in both is refused."""
    node_selector: dict[str, _LabelValue] | None = Field(
        default=None, json_schema_extra=_label_map("spec.*.nodeSelector", "node label")
    )
    """Node labels the pods must match."""
    tolerations: Annotated[list[dict[str, Any]], WithJsonSchema(_TOLERATIONS_SCHEMA)] | None = None
    """Pod tolerations (core/v1 Toleration)."""
    affinity: Annotated[dict[str, Any], WithJsonSchema(_AFFINITY_SCHEMA)] | None = None
    """Pod affinity; merged with the affinity derived from scaling."""
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    """PriorityClass of the pods."""
    env: Annotated[list[dict[str, Any]], WithJsonSchema(_ENV_SCHEMA)] | None = None
    """Extra container environment variables (core/v1 EnvVar)."""
    env_from: Annotated[list[dict[str, Any]], WithJsonSchema(_ENV_FROM_SCHEMA)] | None = None
    """Extra container environment sources (core/v1 EnvFromSource)."""
    service_account_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    """Service account of the pods. Default: the per-job account the operator creates."""
    labels: dict[str, _LabelValue] | None = Field(
        default=None, json_schema_extra=_label_map("spec.*.labels", "label")
    )
    """Extra pod labels. Tooling and GitOps keys (kubectl.kubernetes.io/*, kopf.zalando.org/*,
    argocd.argoproj.io/*, Flux's, app.kubernetes.io/instance) are dropped, and of
    kueue.x-k8s.io/* only the keys schedulers read pass (topology, priority class; the queue
    comes from spec.queueName); Volcano, KAI and YuniKorn queue and group keys pass too."""
    annotations: dict[str, Annotated[str, Field(max_length=8192)]] | None = Field(
        default=None, json_schema_extra=_label_map("spec.*.annotations", "annotation")
    )
    """Extra pod annotations, filtered like labels (Kueue's podset-required-topology and
    podset-preferred-topology pass: topology-aware scheduling reads them here)."""
    termination_grace_period_seconds: int | None = Field(default=None, ge=1, le=86400)
    """Seconds a pod has to stop after a delete, a drain or a suspend before it is killed.
    Default 120: room for a preStop hook, for example to finish a checkpoint upload; pods that
    have nothing left to do stop sooner."""
    volumes: Annotated[list[dict[str, Any]], WithJsonSchema(_VOLUMES_SCHEMA)] | None = _new()
    """Extra pod volumes (core/v1 Volume): a dataset cache, a scratch emptyDir. The names
    raytrain-contract, raytrain-storage and raytrain-shm are the operator's."""
    volume_mounts: Annotated[list[dict[str, Any]], WithJsonSchema(_VOLUME_MOUNTS_SCHEMA)] | None = (
        _new()
    )
    """Mounts of volumes into the Ray container (core/v1 VolumeMount). A mountPath must not be
    or nest in /etc/raytrain (the contract), /dev/shm (sized by the operator for Ray's object
    store) or the checkpoint claim's storage.pvc.mountPath, nor hold it."""
    image_pull_secrets: (
        Annotated[list[dict[str, Any]], WithJsonSchema(_PULL_SECRETS_SCHEMA)] | None
    ) = _new()
    """Secrets to pull the image with (core/v1 LocalObjectReference). The head's also serve
    KubeRay's submitter pod, which runs the same image."""
    scheduler_name: str | None = _new(max_length=253, pattern=DNS_SUBDOMAIN)
    """Scheduler of the pods (for example volcano, yunikorn, kai-scheduler). Default: the
    cluster's default scheduler."""
    runtime_class_name: str | None = _new(max_length=253, pattern=DNS_SUBDOMAIN)
    """RuntimeClass of the pods, for example nvidia when the GPU runtime is not the node's
    default."""
    host_network: bool | None = _new()
    """Run the pods in the node's network namespace (for RDMA devices that are only reachable
    there). The operator then sets dnsPolicy ClusterFirstWithHostNet so the pods still resolve
    cluster Services. Such pods fail the baseline and restricted Pod Security Standards, and
    Ray's ports must be free on the node: one Ray pod per node."""
    resource_claims: (
        Annotated[list[dict[str, Any]], WithJsonSchema(_RESOURCE_CLAIMS_SCHEMA)] | None
    ) = _new()
    """Dynamic resource allocation (core/v1 PodResourceClaim): devices claimed through a
    ResourceClaim or, one per pod, a ResourceClaimTemplate. The Ray container gets them all,
    or those of resources.claims when it is set."""


#: CEL: the mount `m` is, holds or nests in the checkpoint claim's mount.
_CLAIM_COLLISION = (
    "m.mountPath == self.storage.pvc.mountPath || "
    "m.mountPath.startsWith(self.storage.pvc.mountPath + '/') || "
    "self.storage.pvc.mountPath.startsWith(m.mountPath + '/')"
)


def _worker_resource_rules() -> list[JsonValue]:
    """CEL: spec.workerTemplate.resources must not name what resourcesPerWorker sets (the
    operator also checks the names the API server cannot see)."""
    res = "self.workerTemplate.resources"
    rules: list[JsonValue] = []
    for name, when, where in (
        ("cpu", "true", "spec.scaling.resourcesPerWorker.cpu (default 1 per worker)"),
        (
            "memory",
            "has(self.scaling) && has(self.scaling.resourcesPerWorker) && "
            "has(self.scaling.resourcesPerWorker.memory)",
            "spec.scaling.resourcesPerWorker.memory",
        ),
        (
            NVIDIA_GPU,
            "has(self.scaling) && ((has(self.scaling.useGpu) && self.scaling.useGpu) || "
            "(has(self.scaling.resourcesPerWorker) && has(self.scaling.resourcesPerWorker.gpu)))",
            "spec.scaling.resourcesPerWorker.gpu (or useGpu)",
        ),
    ):
        rules.append(
            _rule(
                f"!has(self.workerTemplate) || !has({res}) || !({when}) || "
                f"((!has({res}.requests) || !('{name}' in {res}.requests)) && "
                f"(!has({res}.limits) || !('{name}' in {res}.limits)))",
                f"spec.workerTemplate.resources sets {name}, which {where} also sets; keep it "
                "in resourcesPerWorker only (the workers' requests and limits are "
                "resourcesPerWorker x workersPerPod)",
            )
        )
    return rules


class ResumeFromSpec(_Model):
    """Where a new run starts: the latest checkpoint of another TrainJob, or a checkpoint named
    by its location. Used while this job's own run has no checkpoint; once it has one, every
    later attempt resumes from its own. Set exactly one field."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "(has(self.trainJob) ? 1 : 0) + (has(self.checkpoint) ? 1 : 0) == 1",
                    "spec.resumeFrom: set exactly one of resumeFrom.trainJob (a TrainJob of this "
                    "namespace whose latest checkpoint to start from) or resumeFrom.checkpoint "
                    "(the checkpoint's location)",
                )
            ]
        }
    )

    train_job: str | None = Field(default=None, max_length=63, pattern=NAME_PATTERN)
    """A TrainJob in this namespace: the run starts from its status.checkpoint.latestURI, read
    when this job's first RayJob is created (and kept in status.resumedFrom)."""
    checkpoint: str | None = Field(
        default=None,
        max_length=1024,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "(self.startsWith('s3://') || self.startsWith('/')) && "
                    "!self.matches('/[.][.]?(/|$)') && !self.matches('[[:cntrl:]]')",
                    "spec.resumeFrom.checkpoint must be a checkpoint directory: an s3:// URI "
                    "or an absolute path under spec.storage.pvc.mountPath, without '.' or '..' "
                    "segments (a TrainJob's status.checkpoint.latestURI is one)",
                )
            ]
        },
    )
    """A checkpoint directory: an s3:// URI (read with this job's S3 settings and credentials)
    or an absolute path under spec.storage.pvc.mountPath."""


class CodeSpec(_Model):
    """A snapshot of the training code, made by `raytrain submit --code DIR` (or the SDK's
    `train(code=...)`): a zip archive in the job's own storage, named by the SHA-256 of its
    bytes. The runtime downloads it, checks the hash, and puts it on the import path (and as the
    working directory) of the driver and of every training worker, so the entrypoint can name a
    module or script of it. Every attempt of the job (retries, resumes, a resume after suspend)
    runs this same snapshot; the hash cannot change while the job runs."""

    uri: str = Field(
        max_length=1024,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "(self.startsWith('s3://') || self.startsWith('/')) && "
                    "self.endsWith('.zip') && !self.matches('/[.][.]?(/|$)') && "
                    "!self.matches('[[:cntrl:]]')",
                    "spec.code.uri must be a zip archive: an s3:// URI or an absolute path under "
                    "spec.storage.pvc.mountPath ending in .zip, without '.' or '..' segments "
                    "(raytrain submit --code DIR writes one)",
                )
            ]
        },
    )
    """Where the archive is: an s3:// URI (read with this job's S3 settings and credentials) or
    an absolute path under spec.storage.pvc.mountPath."""
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    """The SHA-256 of the archive's bytes, in lower-case hex; a download that does not match it
    fails the attempt instead of running other code."""


class TemplateKind(str, Enum):
    CLUSTER = CLUSTER_TEMPLATE_KIND
    NAMESPACED = TEMPLATE_KIND


class TemplateRef(_Model):
    """A ClusterTrainJobTemplate or a TrainJobTemplate (of the job's namespace) whose spec gives
    this job's defaults: a value the TrainJob sets wins, objects merge field by field (see
    docs/templates.md for lists)."""

    kind: TemplateKind = TemplateKind.CLUSTER
    """ClusterTrainJobTemplate (cluster-wide, the default) or TrainJobTemplate (this
    namespace's)."""
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """The template's name."""


#: Fields a TrainJob must have once its template is merged in; the CRD requires them of a
#: TrainJob without spec.template.
TEMPLATE_REQUIRED = ("image", "entrypoint", "scaling", "storage")
#: The fields a template may set: everything but what is one job's own (suspend, resumeFrom,
#: datasets, tune, the template reference).
TEMPLATE_FIELDS = (
    "image",
    "image_pull_policy",
    "entrypoint",
    "config",
    "ray_version",
    "scaling",
    "torch",
    "storage",
    "checkpoint",
    "failure",
    "disruption",
    "backoff_limit",
    "retry_policy",
    "head",
    "worker_template",
    "network",
    "queue_name",
    "active_deadline_seconds",
    "pre_running_deadline_seconds",
    "ttl_seconds_after_finished",
)


SLICES_NEED_QUEUE = (
    "spec.scaling.kueueWorkloadSlices needs spec.queueName: Kueue admits and grows the "
    "workload slices of a job in one of its queues; set queueName or remove kueueWorkloadSlices"
)


class TrainJobSpec(_Model):
    """Desired state of a TrainJob."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *_worker_resource_rules(),
                *(
                    _rule(
                        f"!has(self.storage) || !has(self.storage.pvc) || !has(self.{pod}) || "
                        f"!has(self.{pod}.volumeMounts) || self.{pod}.volumeMounts.all(m, "
                        f"!({_CLAIM_COLLISION}))",
                        f"spec.{pod}.volumeMounts: a mountPath must not be, hold or nest in "
                        "spec.storage.pvc.mountPath (the checkpoint claim); choose another "
                        "directory",
                    )
                    for pod in ("head", "workerTemplate")
                ),
                _rule(
                    "has(self.template) || !has(self.scaling) || has(self.scaling.numWorkers) || "
                    "(has(self.scaling.minWorkers) && has(self.scaling.maxWorkers))",
                    "spec.scaling: set numWorkers for a fixed-size job, or both minWorkers and "
                    "maxWorkers for an elastic one",
                ),
                _rule(
                    "has(self.template) || !has(self.scaling) || "
                    "!has(self.scaling.kueueWorkloadSlices) || "
                    "!self.scaling.kueueWorkloadSlices || has(self.queueName)",
                    SLICES_NEED_QUEUE,
                ),
                *(
                    _rule(
                        f"has(self.template) || has(self.{field})",
                        f"spec.{field} is required (unless spec.template names a template that "
                        "sets it)",
                    )
                    for field in TEMPLATE_REQUIRED
                ),
                _rule(
                    "!has(self.resumeFrom) || !has(self.resumeFrom.checkpoint) || "
                    "!has(self.storage) || (has(self.storage.s3) ? "
                    "self.resumeFrom.checkpoint.startsWith('s3://') : "
                    "self.resumeFrom.checkpoint.startsWith(self.storage.pvc.mountPath + '/'))",
                    "spec.resumeFrom.checkpoint must be where this job's pods can read it: an "
                    "s3:// URI when spec.storage is s3, a path under spec.storage.pvc.mountPath "
                    "when it is a pvc",
                ),
                _rule(
                    "!has(self.code) || !has(self.storage) || (has(self.storage.s3) ? "
                    "self.code.uri.startsWith('s3://') : "
                    "self.code.uri.startsWith(self.storage.pvc.mountPath + '/'))",
                    "spec.code.uri must be where this job's pods can read it: an s3:// URI when "
                    "spec.storage is s3, a path under spec.storage.pvc.mountPath when it is a "
                    "pvc (raytrain submit --code stores it there)",
                ),
            ]
        }
    )

    image: str = Field(min_length=1, max_length=512, pattern=r"^[^\s]+$")
    """Trainer runtime image: ours, or one built FROM ours with the user's code and packages."""
    image_pull_policy: str | None = Field(default=None, pattern="^(Always|IfNotPresent|Never)$")
    """Image pull policy of every container."""
    entrypoint: str = Field(
        max_length=512,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    r"self.matches('^([A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*"
                    r"|[^:]+\\.py):[A-Za-z_][A-Za-z0-9_]*$')",
                    "spec.entrypoint must be module:function (my_pkg.train:train_loop) or "
                    "path/to/script.py:function",
                )
            ]
        },
    )
    """The train_loop_per_worker: `module:function` or `path/to/script.py:function`."""
    config: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE)
    """Free-form object passed to the loop as train_loop_config. `epochs` (or `num_epochs`)
    lets the runtime report progress and an ETA."""
    ray_version: str = Field(
        default="2.60.0", max_length=32, pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?([-.+a-z0-9]*)$"
    )
    """Ray version inside the image (KubeRay's rayVersion)."""
    scaling: ScalingSpec
    """Workers and their resources (ScalingConfig)."""
    torch: TorchSpec | None = None
    """Process group settings (TorchConfig)."""
    storage: StorageSpec
    """Checkpoint storage (RunConfig.storage_path): exactly one of pvc or s3."""
    checkpoint: CheckpointSpec | None = None
    """Checkpoint retention (CheckpointConfig)."""
    failure: FailureSpec | None = None
    """Worker-group restarts inside one cluster (FailureConfig)."""
    disruption: DisruptionSpec | None = _new()
    """Drains, evictions and preemptions: a PodDisruptionBudget, the pods' grace period and a
    retry budget of their own (see its fields)."""
    backoff_limit: int = Field(default=0, ge=0, le=100)
    """Cluster-level retries: each is a new Ray cluster that resumes from the latest checkpoint."""
    retry_policy: RetryPolicySpec | None = _new()
    """Which failed attempts are retried (by failure class and exit code); unset keeps the
    defaults: an OOMKilled container or an exception in the training code fails the job at once,
    every other failure is retried while spec.backoffLimit allows. The operator applies a change
    to the running attempt at once: it is its own decision, not built into the RayJob."""
    resume_from: ResumeFromSpec | None = _new()
    """Start the run from another TrainJob's latest checkpoint or from a checkpoint location,
    instead of from scratch (for example to continue a job that failed or ran out of time).
    Cannot change once the job has started."""
    code: CodeSpec | None = _new()
    """The training code as a snapshot in the job's storage (`raytrain submit --code DIR`),
    put on the import path of the driver and every worker: no image build for a code change.
    Without it the entrypoint is imported from the image."""
    datasets: dict[str, DatasetSpec] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": 32,
            "x-kubernetes-validations": [
                _rule(
                    "self.all(k, size(k) <= 63 && k.matches('^[A-Za-z_][A-Za-z0-9_.-]*$'))",
                    "spec.datasets: a dataset name has at most 63 letters, digits, '_', '.' or "
                    "'-' and starts with a letter or '_' (e.g. train)",
                )
            ],
        },
    )
    """Named inputs read with Ray Data and handed to the workers as shards."""
    tune: TuneSpec | None = None
    """Optional hyperparameter search (Ray Tune)."""
    head: PodOverrides | None = None
    """Overrides for the Ray head pod."""
    worker_template: PodOverrides | None = None
    """Overrides for the worker pods."""
    suspend: bool = False
    """Suspend the job: the runtime checkpoints, the Ray cluster is removed; false resumes it."""
    network: NetworkSpec | None = _new()
    """Opt-in fast network of the workers for NCCL (InfiniBand or EFA): devices, IPC_LOCK and
    NCCL environment; see its fields."""
    queue_name: str | None = Field(default=None, min_length=1, max_length=63, pattern=LABEL_VALUE)
    """Kueue LocalQueue; becomes the `kueue.x-k8s.io/queue-name` label of the RayJob."""
    active_deadline_seconds: int | None = Field(default=None, ge=1, le=MAX_SECONDS)
    """Wall-clock limit from the first start; past it the job fails with DeadlineExceeded."""
    pre_running_deadline_seconds: int | None = _new(ge=1, le=MAX_SECONDS)
    """Limit on the wait for an attempt's cluster to start training (pods pending for GPUs, a
    head that cannot start, images pulling), from the moment the attempt's RayJob was created
    or resumed; past it the RayJob is deleted and the job fails with
    PreRunningDeadlineExceeded. Time queued in Kueue (RayJob suspended) does not count."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=MAX_SECONDS)
    """Seconds after Succeeded/Failed before the children are deleted; the TrainJob stays."""
    template: TemplateRef | None = _new()
    """Defaults from a ClusterTrainJobTemplate or TrainJobTemplate: what this spec leaves out
    is taken from it. Read when the job starts and kept in status.template, so a later edit of
    the template never changes this job; cannot change once the job has started (unless it is
    suspended)."""

    @model_validator(mode="after")
    def _slices_queued(self) -> TrainJobSpec:
        # The CRD says this unless spec.template is set; the operator checks the merged spec.
        if self.scaling.kueue_workload_slices and not self.queue_name:
            raise ValueError(SLICES_NEED_QUEUE)
        return self


# ----------------------------------------------------------------------------------- status


class Condition(_Model):
    """A metav1.Condition."""

    type: str = Field(max_length=316)
    """Condition type: Created, Running, Suspended, Succeeded, Failed, Reconciling, Stalled."""
    status: str = Field(pattern="^(True|False|Unknown)$")
    """True, False or Unknown."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the condition was set from."""
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    """When the status last changed."""
    reason: str = Field(max_length=1024)
    """CamelCase reason."""
    message: str = Field(default="", max_length=32768)
    """Human-readable detail."""


class Metric(_Model):
    """One reported metric (name and value as strings, as in Kubeflow Trainer's KEP-2779)."""

    name: str
    """Metric name."""
    value: str
    """Metric value."""


class TrainerStatus(_Model):
    """Progress written by the trainer runtime (names shared with Kubeflow Trainer KEP-2779)."""

    progress_percentage: int | None = Field(default=None, ge=0, le=100)
    """Training progress, 0-100."""
    estimated_remaining_seconds: int | None = Field(default=None, ge=0)
    """Estimated seconds until training ends."""
    epoch: int | None = None
    """Latest reported epoch."""
    step: int | None = None
    """Reports made so far in this run."""
    metrics: list[Metric] | None = None
    """Latest reported metrics."""
    last_updated_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the runtime last wrote this."""
    phase: str | None = None
    """Running, Succeeded or Failed, as the runtime saw the training end."""
    message: str | None = None
    """The runtime's message: the error of a failed run, the result of a finished one."""
    attempt: int | None = None
    """Attempt (RayJob) the report came from."""
    checkpointing: bool | None = None
    """True while the runtime saves a checkpoint before a suspend."""


class CheckpointStatus(_Model):
    """Latest and best checkpoint."""

    latest_uri: str | None = Field(default=None, alias="latestURI")
    """Latest checkpoint."""
    best_uri: str | None = Field(default=None, alias="bestURI")
    """Best checkpoint by checkpoint.scoreAttribute."""
    best_metric: str | None = None
    """Score of the best checkpoint."""
    count: int | None = None
    """Checkpoints reported in this run."""
    last_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the runtime reported the latest checkpoint (the driver pod's clock, the moment Ray
    Train handed it over after persisting it); absent from runtimes that do not write it."""


class GoodputTotals(_Model):
    """Seconds and GPU-seconds of ledger entries folded out of status.goodput.clusters."""

    allocated_seconds: float | None = None
    """Allocated seconds of the folded clusters."""
    productive_seconds: float | None = None
    """Productive seconds of the folded clusters (absent if unknown for one of them)."""
    lost_to_restart_seconds: float | None = None
    """Seconds lost to restarts after the folded clusters."""
    lost_to_recompute_seconds: float | None = None
    """Seconds of recomputed training of the folded clusters (absent if unknown)."""
    allocated_gpu_seconds: float | None = Field(default=None, alias="allocatedGPUSeconds")
    """allocatedSeconds times each cluster's GPUs."""
    productive_gpu_seconds: float | None = Field(default=None, alias="productiveGPUSeconds")
    """productiveSeconds times each cluster's GPUs."""
    lost_gpu_seconds: float | None = Field(default=None, alias="lostGPUSeconds")
    """Lost seconds times the GPUs held meanwhile."""


class GoodputCluster(_Model):
    """One Ray cluster of the job (an attempt, or a resume after a suspend), as the operator
    saw it; times from KubeRay (start, end) and from the runtime's reports (the rest)."""

    attempt: int
    """The attempt (RayJob <name>-<attempt>) the cluster belonged to."""
    start: str = Field(json_schema_extra={"format": "date-time"})
    """KubeRay's status.startTime of the RayJob: when it began creating this cluster (pods
    waiting for a node or an image count)."""
    end: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """KubeRay's status.endTime, else the operator pass that saw the cluster end, else (while
    it runs) the latest pass that saw it up."""
    outcome: str = Field(pattern="^(Running|Succeeded|Retried|Failed|Suspended)$")
    """Running (up at the latest pass), Succeeded, Retried (its attempt failed and another
    followed), Failed (its attempt failed the job) or Suspended."""
    gpus: float | None = None
    """GPUs the RayJob's pods ask for (GPU resource names in limits, else requests, times the
    replicas of each group)."""
    first_report: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """lastUpdatedTime of the first runtime report the operator saw from this cluster."""
    last_report: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """lastUpdatedTime of the latest runtime report the operator saw from this cluster."""
    last_checkpoint: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """status.checkpoint.lastTime written while this cluster ran (its latest checkpoint)."""
    checkpoint_time_unknown: bool | None = None
    """true: the runtime reported checkpoints without their time (an older runtime), so what
    this cluster kept is not known."""


class GoodputStatus(_Model):
    """Where the job's cluster time went, as the operator measured it. Times come from two
    clocks: KubeRay's (a cluster's start and end) and the driver pod's (its reports); a report
    is seen when an operator pass reads it, not every report the runtime made, so each number
    is what was observed, a lower bound of what it names. A number the operator cannot know is
    absent, never 0. allocated minus productive minus lost is the time neither covers: a
    cluster's start-up before its first report, the time after its last report, a suspended
    or finally failed cluster's training after its last checkpoint."""

    allocated_seconds: float | None = None
    """Seconds Ray clusters of this job existed: the sum over clusters of end - start, with
    start KubeRay's status.startTime of the RayJob (it includes pods waiting to be scheduled
    and pulling images) and end its status.endTime, else the pass that saw the cluster end,
    else the latest pass. Not seen: a cluster that came and went between two passes."""
    productive_seconds: float | None = None
    """Seconds of training that were kept: for a running or succeeded cluster, its first seen
    report to its last; for a failed or suspended one, its first seen report to its latest
    checkpoint (0 without a checkpoint in it). Not seen: the training before a cluster's
    first report (its first epoch or step). Absent when the runtime did not write
    checkpoint.lastTime for a cluster that ended early."""
    lost_seconds: float | None = None
    """lostToRestartSeconds + lostToRecomputeSeconds (absent when the latter is)."""
    lost_to_restart_seconds: float | None = None
    """For each retried attempt, the seconds from its cluster's end (the failure) to the
    first report of the next attempt, or to the latest pass while none came: deleting the old
    cluster, starting the new one, restoring the checkpoint and the first step. A suspend is
    not a loss: the user asked for the pause."""
    lost_to_recompute_seconds: float | None = None
    """For each retried attempt, the training after its latest checkpoint (to its last seen
    report), which the next attempt did again; all of its training when it made no
    checkpoint. Absent when the checkpoint time is unknown."""
    allocated_gpu_seconds: float | None = Field(default=None, alias="allocatedGPUSeconds")
    """Each cluster's allocated seconds times its GPUs (see clusters[].gpus); 0 for a job
    without GPUs."""
    productive_gpu_seconds: float | None = Field(default=None, alias="productiveGPUSeconds")
    """Each cluster's productive seconds times its GPUs."""
    lost_gpu_seconds: float | None = Field(default=None, alias="lostGPUSeconds")
    """Recomputed seconds times the failed cluster's GPUs, plus the part of each restart gap
    after the next cluster started times its GPUs (between the two clusters no GPU is held)."""
    as_of: str | None = _new(json_schema_extra={"format": "date-time"})
    """When the operator computed these numbers. While a cluster runs and nothing else changes,
    they grow with the clock alone and are rewritten at most every 5 minutes, so a running job's
    status is not patched on every pass."""
    clusters: list[GoodputCluster] | None = Field(default=None, max_length=64)
    """The ledger every number is computed from, oldest first (at most 32 entries; older
    finished ones are folded into earlier)."""
    earlier: GoodputTotals | None = None
    """Totals of the ledger entries folded away."""


class DisruptionStatus(_Model):
    """A Ray head pod Kubernetes took away, as its preStop hook read the pod's DisruptionTarget
    condition (the pod itself may be gone when the attempt's failure is seen)."""

    attempt: int | None = None
    """Attempt of the pod."""
    pod: str | None = None
    """The pod's name."""
    reason: str | None = None
    """The condition's reason: EvictionByEvictionAPI, PreemptionByScheduler, ..."""
    message: str | None = None
    """The condition's message."""


class WorkersStatus(_Model):
    """Worker pods."""

    desired: int | None = None
    """Worker replicas wanted."""
    ready: int | None = None
    """Worker replicas ready."""


class TemplateSnapshot(_Model):
    """A copy of the template a TrainJob started with."""

    kind: str
    """ClusterTrainJobTemplate or TrainJobTemplate."""
    name: str
    """The template's name."""
    uid: str | None = None
    """The template object's uid (a template deleted and created again has another)."""
    resource_version: str | None = None
    """The template's resourceVersion when it was read."""
    spec: dict[str, Any] = Field(default_factory=dict, json_schema_extra=PRESERVE)
    """The template's spec as it was read: the defaults this job runs with."""


class TrainJobStatus(_Model):
    """Observed state of a TrainJob."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = None
    """metadata.generation the operator last acted on."""
    conditions: list[Condition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Created, Running, Suspended, Succeeded, Failed; Reconciling and Stalled only while true."""
    phase: str | None = None
    """One-word summary for kubectl get: Pending, Running, Suspended, Succeeded, Failed, Stalled."""
    start_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the first attempt started."""
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the job reached Succeeded or Failed."""
    restarts: int | None = None
    """Cluster-level retries so far."""
    preemptions: int | None = None
    """Attempts retried because Kubernetes took a pod away (spec.disruption.maxPreemptions);
    they spend no spec.backoffLimit retry."""
    disrupted: DisruptionStatus | None = None
    """The latest Ray head pod taken away by an eviction or a preemption (its preStop hook
    writes it): the attempt's failure then counts as a preemption."""
    attempt: int | None = None
    """Current attempt number (the RayJob name suffix)."""
    ray_job_name: str | None = None
    """Current RayJob."""
    ray_cluster_name: str | None = None
    """Current RayCluster."""
    dashboard_url: str | None = Field(default=None, alias="dashboardURL")
    """Ray dashboard of the current cluster."""
    run_name: str | None = None
    """Ray Train run name; stable across retries of this TrainJob."""
    workers: WorkersStatus | None = None
    """Worker pods desired and ready."""
    trainer_status: TrainerStatus | None = None
    """Progress written by the trainer runtime."""
    checkpoint: CheckpointStatus | None = None
    """Latest and best checkpoint."""
    goodput: GoodputStatus | None = None
    """Where the cluster time went: allocated, productive and lost seconds (see its fields)."""
    resumed_from: str | None = _new()
    """The checkpoint this run started from (spec.resumeFrom, resolved when the first RayJob
    was created); the loop gets it until the run has a checkpoint of its own."""
    template: TemplateSnapshot | None = _new()
    """The template of spec.template as this job uses it: read before the first attempt and
    kept, so the job runs with the same defaults to the end."""


#: What a running job cannot change (the checkpoints' place and what reads them).
IMMUTABLE_ONCE_STARTED = ("image", "entrypoint", "storage", "template", "code")


class TrainJob(_Model):
    """A distributed training job run with Ray Train on a KubeRay cluster."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    f"self.metadata.name.matches('{NAME_PATTERN}')",
                    "metadata.name must start with a lower-case letter and hold only lower-case "
                    "letters, digits and '-' (a DNS-1035 label: it starts the names of the "
                    "RayJob's Services); choose a name such as digits-2",
                ),
                _rule(
                    f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                    f"metadata.name must be at most {MAX_NAME_LENGTH} characters so that "
                    "every child name (RayJob, RayCluster, head service) fits in 63; "
                    "choose a shorter name",
                ),
                _rule(
                    "!has(oldSelf.status) || !has(oldSelf.status.startTime) || "
                    "(has(oldSelf.spec.suspend) && oldSelf.spec.suspend) || ("
                    + " && ".join(
                        f"has(self.spec.{f}) == has(oldSelf.spec.{f}) && "
                        f"(!has(self.spec.{f}) || self.spec.{f} == oldSelf.spec.{f})"
                        for f in IMMUTABLE_ONCE_STARTED
                    )
                    + ")",
                    "spec.image, spec.entrypoint, spec.storage, spec.code and spec.template are "
                    "immutable once the job has started; set spec.suspend: true first, or create "
                    "a new TrainJob",
                    reason="FieldValueForbidden",
                    fieldPath=".spec",
                ),
                _rule(
                    "!has(oldSelf.status) || (!has(oldSelf.status.startTime) && "
                    "!has(oldSelf.status.resumedFrom)) || "
                    "(has(self.spec.resumeFrom) == has(oldSelf.spec.resumeFrom) && "
                    "(!has(self.spec.resumeFrom) || "
                    "self.spec.resumeFrom == oldSelf.spec.resumeFrom))",
                    "spec.resumeFrom cannot change once the job has started or recorded "
                    "status.resumedFrom (its run already started from that checkpoint); create a "
                    "new TrainJob to start from another one",
                    reason="FieldValueForbidden",
                    fieldPath=".spec.resumeFrom",
                ),
            ]
        }
    )

    api_version: str | None = None
    """APIVersion of this object."""
    kind: str | None = None
    """Kind of this object."""
    metadata: dict[str, Any] | None = None
    """Standard object metadata."""
    spec: TrainJobSpec
    """Desired state."""
    status: TrainJobStatus | None = None
    """Observed state."""


# --------------------------------------------------------------------------------- templates


def _template_spec_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in TEMPLATE_FIELDS:
        info = TrainJobSpec.model_fields[name]
        optional = FieldInfo.merge_field_infos(info, default=None)
        optional.default_factory = None
        fields[name] = (info.annotation | None, optional)  # type: ignore[operator]
    return fields


#: The spec of a ClusterTrainJobTemplate or TrainJobTemplate: the TrainJob fields a template may
#: set, all optional, with the TrainJob's descriptions and limits. Nothing here is validated on
#: its own beyond the CRD's schema: the operator validates each TrainJob's spec once the
#: template is merged in.
TrainJobTemplateSpec: type[_Model] = create_model(  # type: ignore[call-overload]
    "TrainJobTemplateSpec",
    __base__=_Model,
    __doc__="Defaults for the TrainJobs that name this template in spec.template.",
    **_template_spec_fields(),
)


class TrainJobTemplate(_Model):
    """Defaults shared by TrainJobs: image, pod overrides, storage, network, retry and failure
    settings. A TrainJob names it in spec.template; its own values win."""

    api_version: str | None = None
    """APIVersion of this object."""
    kind: str | None = None
    """Kind of this object."""
    metadata: dict[str, Any] | None = None
    """Standard object metadata."""
    spec: TrainJobTemplateSpec  # type: ignore[valid-type]
    """The defaults."""
