"""The JSON schemas of the pods' volumes and volume mounts: our limits and rules over Kubernetes'.

Kept apart from pod_schema.py, which holds the other pod fields and the helpers used here, for
size: these two carry most of the rules (the operator's own volumes and mounts must not be
shadowed).
"""

from __future__ import annotations

from pydantic.config import JsonDict

from raytrain_contract.api.v1alpha1.common import (
    BUILDER_MOUNT_PATHS,
    DNS_LABEL,
    RESERVED_VOLUME_NAMES,
    naming,
    rule,
)
from raytrain_contract.api.v1alpha1.pod_schema import (
    container_field,
    items_of,
    narrow,
    over,
    pod_field,
)


def _not_under(path: str) -> str:
    """CEL: `self.mountPath` is neither `path` nor inside it."""
    return f"self.mountPath != '{path}' && !self.mountPath.startsWith('{path}/')"


#: core/v1 Volume: a name of its own and one volume source, kept as written (the API server
#: checks the source when KubeRay creates the pods).
VOLUMES: JsonDict = over(
    pod_field("volumes"),
    maxItems=64,
    **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    items=narrow(
        items_of(pod_field("volumes")),
        {
            "name": {
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "Volume name, referred to by volumeMounts.",
            }
        },
        free=True,
        validations=[
            rule(
                f"!(self.name in {list(RESERVED_VOLUME_NAMES)!r})",
                "spec.*.volumes: the names "
                + ", ".join(RESERVED_VOLUME_NAMES)
                + " belong to the volumes the operator adds (contract, checkpoint storage, "
                "/dev/shm); rename the volume",
                messageExpression=naming(
                    "spec.*.volumes: the name {} belongs to a volume the operator adds "
                    "(contract, checkpoint storage, /dev/shm); rename the volume",
                    "self.name",
                ),
            ),
        ],
    ),
)

#: core/v1 VolumeMount, field by field (the builders read name and mountPath).
VOLUME_MOUNTS: JsonDict = over(
    container_field("volumeMounts"),
    maxItems=64,
    **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["mountPath"]},
    items=narrow(
        items_of(container_field("volumeMounts")),
        {
            "name": {
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "Name of an entry of volumes.",
            },
            "mountPath": {
                "maxLength": 1024,
                "pattern": r"^(/[^/:]+)+$",
                "description": "Absolute path in the Ray container.",
            },
            "readOnly": {"description": "Mount read-only."},
            "subPath": {
                "maxLength": 512,
                "description": "Path inside the volume to mount instead of its root.",
            },
            "subPathExpr": {
                "maxLength": 512,
                "description": "subPath with $(VAR) references to the container's environment.",
            },
            "mountPropagation": {
                "enum": ["None", "HostToContainer", "Bidirectional"],
                "description": "None (default), HostToContainer or Bidirectional.",
            },
            "recursiveReadOnly": {
                "enum": ["Disabled", "IfPossible", "Enabled"],
                "description": "Disabled, IfPossible or Enabled (with readOnly).",
            },
        },
        required=["name", "mountPath"],
        validations=[
            rule(
                "!self.mountPath.matches('/[.][.]?(/|$)')",
                "spec.*.volumeMounts: mountPath must be a plain absolute path without '.' "
                "or '..' segments, e.g. /data/cache",
            ),
            rule(
                " && ".join(_not_under(path) for path in BUILDER_MOUNT_PATHS),
                "spec.*.volumeMounts: mountPath must not be or nest in "
                + " or ".join(BUILDER_MOUNT_PATHS)
                + ", which the operator mounts (the contract, /dev/shm sized for Ray's "
                "object store); choose a directory of its own such as /data/cache",
                messageExpression=naming(
                    "spec.*.volumeMounts: mountPath {} must not be or nest in "
                    + " or ".join(BUILDER_MOUNT_PATHS)
                    + ", which the operator mounts (the contract, /dev/shm sized for the "
                    "Ray object store); choose a directory of its own such as /data/cache",
                    "self.mountPath",
                ),
            ),
            rule(
                f"!(self.name in {list(RESERVED_VOLUME_NAMES)!r})",
                "spec.*.volumeMounts: the volumes "
                + ", ".join(RESERVED_VOLUME_NAMES)
                + " are mounted by the operator; mount a volume of your own from volumes",
                messageExpression=naming(
                    "spec.*.volumeMounts: the volume {} is mounted by the operator; mount a "
                    "volume of your own from volumes",
                    "self.name",
                ),
            ),
            rule(
                "!has(self.subPath) || !has(self.subPathExpr)",
                "spec.*.volumeMounts: set subPath or subPathExpr, not both",
            ),
        ],
    ),
)
