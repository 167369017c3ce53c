"""Generate raytrain_contract/api/v1alpha1/core_v1.py: the core/v1 shapes of the pod fields a
TrainJob's head and workerTemplate take, read from the models of the kubernetes Python client.

A shape is what Kubernetes says of a type: its fields by their JSON names, each field's type
(string, integer, boolean, array, map or another object) and which fields Kubernetes requires.
The client's models carry the first two (`attribute_map`, `openapi_types`); a required field is
one whose setter refuses None. The client carries no enums, formats or limits: those, the
descriptions and the CEL rules are ours and stay hand-written in pod_schema.py, laid over these
shapes.

The contract package must not import kubernetes, so the shapes are written out as a Python
module and committed; tests/unit/test_pod_schema.py fails when that module differs from what
this script produces with the client installed now. Run it after a client upgrade:

    python scripts/gen_pod_schema.py          # rewrite the module
    python scripts/gen_pod_schema.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import inspect
import pathlib
import re
import sys
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes import client

OUT = pathlib.Path(__file__).resolve().parents[1] / "raytrain_contract/api/v1alpha1/core_v1.py"

#: The core/v1 types written field by field (client class name: constant). Any other type they
#: refer to is written as a free-form object: the TrainJob keeps those as written and the API
#: server checks them when KubeRay creates the pods.
EXPANDED = {
    "V1ResourceRequirements": "RESOURCE_REQUIREMENTS",
    "CoreV1ResourceClaim": "RESOURCE_CLAIM",
    "V1NodeSelectorRequirement": "NODE_SELECTOR_REQUIREMENT",
    "V1NodeSelectorTerm": "NODE_SELECTOR_TERM",
    "V1NodeSelector": "NODE_SELECTOR",
    "V1NodeAffinity": "NODE_AFFINITY",
    "V1PodAffinity": "POD_AFFINITY",
    "V1PodAntiAffinity": "POD_ANTI_AFFINITY",
    "V1Affinity": "AFFINITY",
    "V1ConfigMapEnvSource": "CONFIG_MAP_ENV_SOURCE",
    "V1SecretEnvSource": "SECRET_ENV_SOURCE",
    "V1EnvFromSource": "ENV_FROM_SOURCE",
    "V1EnvVar": "ENV_VAR",
    "V1Toleration": "TOLERATION",
    "V1Volume": "VOLUME",
    "V1VolumeMount": "VOLUME_MOUNT",
    "V1LocalObjectReference": "LOCAL_OBJECT_REFERENCE",
    "V1PodResourceClaim": "POD_RESOURCE_CLAIM",
}
#: The fields of PodSpec and of Container that PodOverrides takes (by their JSON names): the
#: generated POD_SPEC and CONTAINER hold these only.
SELECTED = {
    "V1PodSpec": (
        "POD_SPEC",
        (
            "affinity",
            "hostNetwork",
            "imagePullSecrets",
            "nodeSelector",
            "priorityClassName",
            "resourceClaims",
            "runtimeClassName",
            "schedulerName",
            "serviceAccountName",
            "terminationGracePeriodSeconds",
            "tolerations",
            "volumes",
        ),
    ),
    "V1Container": ("CONTAINER", ("env", "envFrom", "resources", "volumeMounts")),
}

_SCALARS = {"str": "string", "int": "integer", "bool": "boolean", "float": "number"}
_LIST = re.compile(r"^list\[(.+)\]$")
_MAP = re.compile(r"^dict[\[(]str, (.+)[\])]$")


@dataclass(frozen=True)
class Ref:
    """A reference to another generated constant, written as its name."""

    name: str


@dataclass(frozen=True)
class Free:
    """A type not written field by field: a free-form object, with its name in a comment."""

    kind: str


def _core_name(cls_name: str) -> str:
    return re.sub(r"^(CoreV1|V1)", "", cls_name)


def _type(openapi: str) -> Any:
    """The shape of one of the client's type names."""
    if openapi in _SCALARS:
        return {"type": _SCALARS[openapi]}
    if match := _LIST.match(openapi):
        return {"type": "array", "items": _type(match.group(1))}
    if match := _MAP.match(openapi):
        return {"type": "object", "additionalProperties": _type(match.group(1))}
    if openapi in EXPANDED:
        return Ref(EXPANDED[openapi])
    if hasattr(client, openapi):
        return Free(_core_name(openapi))
    raise ValueError(f"no shape for the client type {openapi!r}")


def _required(cls: type[Any], attr: str) -> bool:
    """Kubernetes requires the field: the client's setter refuses None for it."""
    setter = getattr(cls, attr).fset
    return f"Invalid value for `{attr}`, must not be `None`" in inspect.getsource(setter)


def shape(cls_name: str, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The shape of one client model: its fields (all, or `only` those) and the required ones."""
    cls = getattr(client, cls_name)
    fields = {cls.attribute_map[attr]: attr for attr in cls.openapi_types}
    if only is not None:
        missing = sorted(set(only) - set(fields))
        if missing:
            raise ValueError(f"{cls_name} has no field {', '.join(missing)}")
        fields = {name: fields[name] for name in only}
    out: dict[str, Any] = {"type": "object"}
    required = [name for name, attr in fields.items() if _required(cls, attr)]
    if required:
        out["required"] = required
    out["properties"] = {name: _type(cls.openapi_types[attr]) for name, attr in fields.items()}
    return out


def _leaf(value: Any) -> bool:
    return isinstance(value, str | bool | int) or (
        isinstance(value, list) and all(isinstance(v, str) for v in value)
    )


def _emit(value: Any, indent: int, width: int) -> list[str]:
    """`value` as Python source lines, in the layout ruff format keeps: a dict of plain values
    on one line when it fits, any other dict one entry a line with a trailing comma. The first
    line carries no indentation of its own (it follows a key); `width` is what is left of it."""
    if isinstance(value, Ref):
        return [value.name]
    if isinstance(value, Free):
        value = {"type": "object"}
    if _leaf(value):
        return [repr(value).replace("'", '"')]
    inline = "{" + ", ".join(f'"{k}": {_emit(v, 0, 100)[0]}' for k, v in value.items()) + "}"
    if all(_leaf(v) for v in value.values()) and len(inline) <= width:
        return [inline]
    pad = " " * (indent + 4)
    lines = ["{"]
    for key, item in value.items():
        if isinstance(item, Free):
            lines.append(f"{pad}# core/v1 {item.kind}, not written field by field")
        head = f'{pad}"{key}": '
        body = _emit(item, indent + 4, 100 - len(head) - 1)
        lines.append(head + body[0])
        lines.extend(body[1:])
        lines[-1] += ","
    lines.append(" " * indent + "}")
    return lines


HEADER = '''"""The core/v1 shapes of the pod fields a TrainJob takes: generated, do not edit.

Generated by scripts/gen_pod_schema.py from the models of the kubernetes Python client
{version}. Regenerate with `python scripts/gen_pod_schema.py` after a client upgrade;
tests/unit/test_pod_schema.py fails while this file differs from what the script writes.

Each shape gives a type's fields by their JSON names, their types and the fields Kubernetes
requires, nothing else: pod_schema.py lays our limits, descriptions and CEL rules over them.
This module imports nothing from Kubernetes (raytrain_contract must not).
"""

from __future__ import annotations

from pydantic.config import JsonDict
'''


def _refs(value: Any) -> list[str]:
    """The constants `value` refers to, in the order they appear."""
    if isinstance(value, Ref):
        return [value.name]
    if isinstance(value, dict):
        return [name for item in value.values() for name in _refs(item)]
    return []


Model = tuple[str, str, tuple[str, ...] | None]


def _ordered() -> list[Model]:
    """Every generated constant as (client class, constant, selected fields), each after the
    constants it refers to (Python needs them defined first)."""
    models: list[Model] = [(cls_name, const, None) for cls_name, const in EXPANDED.items()]
    models += [(cls_name, const, only) for cls_name, (const, only) in SELECTED.items()]
    by_const = {const: (cls_name, const, only) for cls_name, const, only in models}
    out: list[Model] = []

    def visit(model: Model) -> None:
        if model in out:
            return
        for name in _refs(shape(model[0], model[2])):
            visit(by_const[name])
        out.append(model)

    for model in models:
        visit(model)
    return out


def render() -> str:
    """The generated module's text."""
    parts = [HEADER.format(version=kubernetes.__version__)]
    models = _ordered()
    for cls_name, const, only in models:
        which = "the fields PodOverrides takes of " if only else ""
        parts.append(
            f"\n#: core/v1 {_core_name(cls_name)}: {which}kubernetes.client.{cls_name}.\n"
            + f"{const}: JsonDict = "
            + "\n".join(_emit(shape(cls_name, only), 0, 100 - len(const) - 13))
            + "\n"
        )
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: run python scripts/gen_pod_schema.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
