"""The JSON schemas of PodOverrides' core/v1 fields: our limits and rules over Kubernetes' shapes.

The shapes (field names, types, what Kubernetes requires) are generated into core_v1.py from the
kubernetes client's models. What is ours is written here: which fields a TrainJob takes, the
limits (maxItems, maxLength, patterns, enums), the descriptions `kubectl explain` prints and the
CEL rules, whose messages name the field and the fix. A field named here that the shape lacks,
or a field Kubernetes requires that is left optional here, fails at import, so a client upgrade
that renames or tightens a field cannot slip past `make crds`. Volumes and volume mounts are in
pod_volumes.py, which uses the helpers here.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic.config import JsonDict, JsonValue

from raytrain_contract.api.v1alpha1 import core_v1
from raytrain_contract.api.v1alpha1.common import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ENV_NAME,
    LABEL_VALUE,
    PRESERVE,
    RESERVED_ENV_NAMES,
    naming,
    rule,
)


def field_of(shape: JsonDict, name: str) -> JsonDict:
    """The generated schema of field `name` of the object `shape` (or of its items)."""
    properties = cast(JsonDict, shape["properties"])
    if name not in properties:
        raise ValueError(f"core/v1 has no field {name!r} here: regenerate core_v1.py or fix it")
    return cast(JsonDict, properties[name])


def items_of(shape: JsonDict) -> JsonDict:
    """The generated schema of the items of the array `shape`."""
    assert shape["type"] == "array", shape
    return cast(JsonDict, shape["items"])


def over(shape: JsonDict, **ours: Any) -> JsonDict:
    """A generated schema with ours laid over it: its type stays, our keys win."""
    return {**shape, **ours}


def narrow(
    shape: JsonDict,
    fields: dict[str, JsonDict],
    *,
    required: list[str] | None = None,
    description: str | None = None,
    free: bool = False,
    validations: list[JsonValue] | None = None,
) -> JsonDict:
    """The generated object `shape` cut down to `fields` (in their order), each field's generated
    schema with ours over it. `required` may add to what Kubernetes requires, never leave a
    required field out (the pods' creation would fail on what the TrainJob accepted). Any other
    field is refused, unless `free`: then it is kept as written. `validations` are CEL rules."""
    needed = cast(list[str], shape.get("required", []))
    required = list(needed) if required is None else required
    if not set(needed) <= set(required):
        raise ValueError(f"Kubernetes requires {needed}, not only {required}")
    out: JsonDict = {"type": "object"}
    if description is not None:
        out["description"] = description
    if free:
        out.update(PRESERVE)
    if validations is not None:
        out["x-kubernetes-validations"] = validations
    if required:
        out["required"] = cast(list[JsonValue], required)
    out["properties"] = {name: over(field_of(shape, name), **ours) for name, ours in fields.items()}
    if not free:
        out["additionalProperties"] = False
    return out


def pod_field(name: str) -> JsonDict:
    return field_of(core_v1.POD_SPEC, name)


def container_field(name: str) -> JsonDict:
    return field_of(core_v1.CONTAINER, name)


def _quantities(kind: str) -> JsonDict:
    """requests or limits: quantities by resource name. Kubernetes' Quantity is an integer or a
    string; the client's models call it str, so the value's schema is ours entirely."""
    return {
        "description": f"Resource {kind}, by resource name (cpu, memory, nvidia.com/gpu...).",
        "maxProperties": 16,
        "x-kubernetes-validations": [
            rule(
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
                rule(
                    "type(self) == int ? self >= 0 : (isQuantity(self) && "
                    "quantity(self).compareTo(quantity('0')) >= 0 && "
                    "quantity(self).compareTo(quantity('1Ei')) <= 0)",
                    f"spec.*.resources.{kind}: every amount must be a Kubernetes quantity "
                    "between 0 and 1Ei (e.g. 2, 500m, 8Gi)",
                )
            ],
        },
    }


_REQUIREMENTS = container_field("resources")

#: Container resources as core/v1 ResourceRequirements: requests and limits of quantities.
RESOURCES: JsonDict = narrow(
    _REQUIREMENTS,
    {
        "requests": _quantities("requests"),
        "limits": _quantities("limits"),
        "claims": {
            "maxItems": 32,
            "description": "Dynamic resource claims (DRA) the Ray container uses, by the name "
            "of an entry of resourceClaims. Unset: every entry of resourceClaims.",
            "items": narrow(
                items_of(field_of(_REQUIREMENTS, "claims")),
                {
                    "name": {
                        "maxLength": 63,
                        "pattern": DNS_LABEL,
                        "description": "Name of an entry of resourceClaims.",
                    },
                    "request": {
                        "maxLength": 63,
                        "pattern": DNS_LABEL,
                        "description": "One request of the claim; unset: all of them.",
                    },
                },
            ),
        },
    },
    validations=[
        rule(
            "!has(self.requests) || !has(self.limits) || self.requests.all(k, "
            "!(k in self.limits) || quantity(string(self.requests[k])).compareTo("
            "quantity(string(self.limits[k]))) <= 0)",
            "spec.*.resources: a request must not exceed the limit of the same resource; "
            "raise the limit or lower the request",
        )
    ],
)


def _free_list(shape: JsonDict, description: str) -> JsonDict:
    """A list whose items stay free-form objects (the builders merge theirs into it)."""
    return over(
        shape,
        maxItems=64,
        description=description,
        items={"type": "object", **PRESERVE},
    )


def _requirements(shape: JsonDict, what: str) -> JsonDict:
    """core/v1 NodeSelectorRequirement list: the builders append theirs to it."""
    requirement = items_of(shape)
    return over(
        shape,
        maxItems=64,
        description=f"Requirements on {what}, all of which must hold.",
        items=narrow(
            requirement,
            {
                "key": {"maxLength": 316, "description": "Key."},
                "operator": {
                    "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
                    "description": "In, NotIn, Exists, DoesNotExist, Gt or Lt.",
                },
                "values": over(
                    field_of(requirement, "values"),
                    maxItems=64,
                    description="Values (In, NotIn: one or more; Gt, Lt: one integer).",
                    items=over(items_of(field_of(requirement, "values")), maxLength=63),
                ),
            },
        ),
    )


def _pod_affinity(shape: JsonDict, kind: str) -> JsonDict:
    return narrow(
        shape,
        {
            "requiredDuringSchedulingIgnoredDuringExecution": _free_list(
                field_of(shape, "requiredDuringSchedulingIgnoredDuringExecution"),
                "Terms every pod must satisfy (core/v1 PodAffinityTerm).",
            ),
            "preferredDuringSchedulingIgnoredDuringExecution": _free_list(
                field_of(shape, "preferredDuringSchedulingIgnoredDuringExecution"),
                "Weighted terms the scheduler prefers (core/v1 WeightedPodAffinityTerm).",
            ),
        },
        description=f"core/v1 {kind}.",
    )


_NODE_AFFINITY = core_v1.NODE_AFFINITY
_NODE_SELECTOR = core_v1.NODE_SELECTOR
_NODE_SELECTOR_TERM = items_of(field_of(_NODE_SELECTOR, "nodeSelectorTerms"))

#: core/v1 Affinity down to its lists, whose items stay free-form: the builders merge their own
#: terms into these lists, so their shape must be what the builders expect.
AFFINITY: JsonDict = narrow(
    pod_field("affinity"),
    {
        "nodeAffinity": narrow(
            _NODE_AFFINITY,
            {
                "requiredDuringSchedulingIgnoredDuringExecution": narrow(
                    _NODE_SELECTOR,
                    {
                        "nodeSelectorTerms": over(
                            field_of(_NODE_SELECTOR, "nodeSelectorTerms"),
                            maxItems=64,
                            description="core/v1 NodeSelectorTerm list.",
                            items=narrow(
                                _NODE_SELECTOR_TERM,
                                {
                                    "matchExpressions": _requirements(
                                        field_of(_NODE_SELECTOR_TERM, "matchExpressions"),
                                        "node labels",
                                    ),
                                    "matchFields": _requirements(
                                        field_of(_NODE_SELECTOR_TERM, "matchFields"), "node fields"
                                    ),
                                },
                            ),
                        )
                    },
                    description="core/v1 NodeSelector: any of its terms must match.",
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": _free_list(
                    field_of(_NODE_AFFINITY, "preferredDuringSchedulingIgnoredDuringExecution"),
                    "Weighted terms the scheduler prefers (core/v1 PreferredSchedulingTerm).",
                ),
            },
            description="core/v1 NodeAffinity.",
        ),
        "podAffinity": _pod_affinity(core_v1.POD_AFFINITY, "PodAffinity"),
        "podAntiAffinity": _pod_affinity(core_v1.POD_ANTI_AFFINITY, "PodAntiAffinity"),
    },
)


def _env_source(shape: JsonDict, kind: str) -> JsonDict:
    """A ConfigMap or Secret by name. Kubernetes lets the name be empty; we require it."""
    return narrow(
        shape,
        {
            "name": {
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN,
                "description": f"Name of the {kind}.",
            },
            "optional": {"description": f"Start the pod even if the {kind} is missing."},
        },
        required=["name"],
        description=f"The {kind} whose keys become variables.",
    )


_ENV_FROM_SOURCE = items_of(container_field("envFrom"))

#: core/v1 EnvFromSource: a ConfigMap or a Secret by name, with an optional prefix.
ENV_FROM: JsonDict = over(
    container_field("envFrom"),
    maxItems=32,
    items=narrow(
        _ENV_FROM_SOURCE,
        {
            "prefix": {
                "maxLength": 253,
                "pattern": r"^[-._a-zA-Z0-9]*$",
                "description": "Prefix of every variable's name.",
            },
            "configMapRef": _env_source(field_of(_ENV_FROM_SOURCE, "configMapRef"), "ConfigMap"),
            "secretRef": _env_source(field_of(_ENV_FROM_SOURCE, "secretRef"), "Secret"),
        },
        validations=[
            rule(
                "has(self.configMapRef) != has(self.secretRef)",
                "spec.*.envFrom: every entry names one configMapRef or one secretRef",
            )
        ],
    ),
)

#: core/v1 Toleration, so a malformed one is refused here and not by the pods' creation.
TOLERATIONS: JsonDict = over(
    pod_field("tolerations"),
    maxItems=32,
    items=narrow(
        items_of(pod_field("tolerations")),
        {
            "key": {"maxLength": 316, "description": "Taint key."},
            "operator": {"enum": ["Exists", "Equal"], "description": "Exists or Equal (default)."},
            "value": {
                "maxLength": 63,
                "pattern": LABEL_VALUE,
                "description": "Taint value (with Equal).",
            },
            "effect": {
                "enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"],
                "description": "Taint effect; empty matches every effect.",
            },
            "tolerationSeconds": {"description": "Seconds a NoExecute taint is tolerated."},
        },
        validations=[
            rule(
                "!has(self.operator) || self.operator != 'Exists' || "
                "!has(self.value) || self.value == ''",
                "spec.*.tolerations: a toleration with operator Exists has no value; "
                "remove the value or use operator Equal",
            ),
            rule(
                "has(self.key) && self.key != '' || (has(self.operator) && "
                "self.operator == 'Exists')",
                "spec.*.tolerations: a toleration without a key must have operator Exists",
            ),
            rule(
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "spec.*.tolerations: tolerationSeconds is only allowed with effect NoExecute",
            ),
        ],
    ),
)

_RESERVED_ENV_WHY = (
    " is set by the operator for the runtime, which reads it to know its job, attempt and pod "
    "(another value would make the operator ignore the reports of the runtime); remove it from env"
)

#: core/v1 EnvVar: a name and either a value or a valueFrom source; the names the operator
#: sets for the runtime (RESERVED_ENV_NAMES) are refused.
ENV: JsonDict = over(
    container_field("env"),
    maxItems=256,
    items=narrow(
        items_of(container_field("env")),
        {
            "name": {
                "minLength": 1,
                "maxLength": 256,
                "pattern": ENV_NAME,
                "description": "Variable name.",
            },
            "value": {"description": "Variable value."},
            "valueFrom": {**PRESERVE, "description": "Source of the value (core/v1 EnvVarSource)."},
        },
        validations=[
            rule(
                "!(has(self.value) && has(self.valueFrom))",
                "spec.*.env: set value or valueFrom of an environment variable, not both",
            ),
            rule(
                f"!(self.name in {list(RESERVED_ENV_NAMES)!r})",
                "spec.*.env: "
                + ", ".join(RESERVED_ENV_NAMES)
                + " are set by the operator for the runtime, which reads them to know its job, "
                "attempt and pod; remove them from env",
                messageExpression=naming("spec.*.env: {}" + _RESERVED_ENV_WHY, "self.name"),
            ),
        ],
    ),
)


#: core/v1 LocalObjectReference list. Kubernetes lets the name be empty; we require it.
PULL_SECRETS: JsonDict = over(
    pod_field("imagePullSecrets"),
    maxItems=16,
    items=narrow(
        items_of(pod_field("imagePullSecrets")),
        {
            "name": {
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN,
                "description": "Name of a Secret of type kubernetes.io/dockerconfigjson.",
            }
        },
        required=["name"],
    ),
)

#: core/v1 PodResourceClaim: a name and exactly one of a ResourceClaim or a template.
RESOURCE_CLAIMS: JsonDict = over(
    pod_field("resourceClaims"),
    maxItems=32,
    **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    items=narrow(
        items_of(pod_field("resourceClaims")),
        {
            "name": {
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "Name of the claim inside the pod (resources.claims refers to it).",
            },
            "resourceClaimName": {
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN,
                "description": "An existing ResourceClaim shared by every pod of the group.",
            },
            "resourceClaimTemplateName": {
                "maxLength": 253,
                "pattern": DNS_SUBDOMAIN,
                "description": "A ResourceClaimTemplate: each pod gets a claim of its own.",
            },
        },
        validations=[
            rule(
                "has(self.resourceClaimName) != has(self.resourceClaimTemplateName)",
                "spec.*.resourceClaims: every entry sets exactly one of resourceClaimName "
                "or resourceClaimTemplateName",
            )
        ],
    ),
)
