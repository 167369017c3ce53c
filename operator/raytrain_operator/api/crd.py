"""Generate the TrainJob CustomResourceDefinition from the pydantic models.

pydantic's JSON schema is close to, but not, a Kubernetes structural schema: it uses `$ref`,
`anyOf` for optional fields, `title`s and `additionalProperties: true`. This module rewrites it
into the structural form the API server requires, keeps every description, and adds the CRD's
printer columns, categories and subresources. `make crds` writes the result to `crds/`; a test
fails when the committed file drifts from what this produces.
"""

from __future__ import annotations

from typing import Any

import yaml

from raytrain_operator.api import v1alpha1 as api

Schema = dict[str, Any]

# Keys of pydantic's JSON schema that a structural schema does not carry.
_DROP = {"title", "$defs", "discriminator"}


def _resolve(schema: Schema, defs: dict[str, Schema]) -> Schema:
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return schema


def _structural(schema: Schema, defs: dict[str, Schema]) -> Schema:
    schema = _resolve(schema, defs)
    out: Schema = {}

    variants = schema.get("anyOf")
    if variants is not None:
        non_null = [_resolve(v, defs) for v in variants if v.get("type") != "null"]
        types = sorted({v.get("type", "") for v in non_null})
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if types == ["integer", "string"]:
            out["x-kubernetes-int-or-string"] = True
        elif len(non_null) == 1:
            return _structural({**non_null[0], **rest}, defs)
        else:
            raise ValueError(f"cannot express anyOf {variants!r} in a structural schema")
        schema = rest

    if "allOf" in schema and len(schema["allOf"]) == 1:
        inner = _resolve(schema["allOf"][0], defs)
        schema = {**inner, **{k: v for k, v in schema.items() if k != "allOf"}}

    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key, value in schema.items():
        if key in _DROP or key in {"properties", "items", "additionalProperties", "required"}:
            continue
        if key == "default" and value is None:
            continue
        if key == "description":
            out[key] = " ".join(str(value).split())
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema's numeric form (pydantic's `gt=`/`lt=`); OpenAPI v3.0, which the API
            # server speaks, wants the bound plus a boolean flag.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        out[key] = value

    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in schema:
        out["type"] = "object"
        out["properties"] = {
            name: _structural(prop, defs) for name, prop in schema["properties"].items()
        }
        if schema.get("required"):
            out["required"] = list(schema["required"])
    if "items" in schema:
        out["items"] = _structural(schema["items"], defs)
        if out["items"].get("type") == "object" and not out["items"].get("properties"):
            out["items"]["x-kubernetes-preserve-unknown-fields"] = True
    additional = schema.get("additionalProperties")
    if additional is True or (
        out.get("type") == "object" and not schema.get("properties") and additional is None
    ):
        out.pop("additionalProperties", None)
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(additional, dict) and not preserve:
        out["additionalProperties"] = _structural(additional, defs)
    if preserve:
        out["type"] = "object"
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def openapi_schema() -> Schema:
    """The structural OpenAPI v3 schema of a TrainJob, as the CRD carries it."""
    raw = api.TrainJob.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema = _structural(raw, defs)
    props = schema["properties"]
    # The root may say nothing about metadata beyond its type; apiVersion and kind are strings.
    props["metadata"] = {"type": "object"}
    props["apiVersion"] = {"type": "string", "description": props["apiVersion"]["description"]}
    props["kind"] = {"type": "string", "description": props["kind"]["description"]}
    schema["required"] = ["spec"]
    return schema


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Status",
        "type": "string",
        "jsonPath": ".status.phase",
        "description": "Pending, Running, Suspended, Succeeded, Failed or Stalled",
    },
    {
        "name": "Progress",
        "type": "integer",
        "jsonPath": ".status.trainerStatus.progressPercentage",
        "description": "Training progress in percent, reported by the trainer runtime",
    },
    {
        "name": "Epoch",
        "type": "integer",
        "jsonPath": ".status.trainerStatus.epoch",
        "description": "Latest reported epoch",
    },
    {
        "name": "Workers",
        "type": "integer",
        "jsonPath": ".status.workers.ready",
        "description": "Ready worker pods",
    },
    {
        "name": "Desired",
        "type": "integer",
        "jsonPath": ".status.workers.desired",
        "description": "Desired worker pods",
        "priority": 1,
    },
    {
        "name": "ETA",
        "type": "integer",
        "jsonPath": ".status.trainerStatus.estimatedRemainingSeconds",
        "description": "Estimated seconds until training ends",
        "priority": 1,
    },
    {
        "name": "RayJob",
        "type": "string",
        "jsonPath": ".status.rayJobName",
        "description": "The RayJob of the current attempt",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {"app.kubernetes.io/name": "raytrain-operator"},
        },
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": list(api.CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = (
    "# Generated by `make crds` from operator/raytrain_operator/api/v1alpha1.py. Do not edit.\n"
)


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: anchors would only confuse readers of the CRD."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render() -> str:
    """The CRD as the YAML file committed under crds/."""
    return HEADER + yaml.dump(crd(), Dumper=_NoAliasDumper, sort_keys=False, width=100)


def render_chart_template() -> str:
    """The same CRD as a Helm template, behind `crds.install` so `helm upgrade` updates it and
    `crds.keep` so `helm uninstall` does not delete every TrainJob with it."""
    body = yaml.dump(crd(), Dumper=_NoAliasDumper, sort_keys=False, width=100)
    body = body.replace(
        "  labels:\n    app.kubernetes.io/name: raytrain-operator\n",
        "  labels:\n    app.kubernetes.io/name: raytrain-operator\n"
        "  {{- if .Values.crds.keep }}\n"
        "  annotations:\n    helm.sh/resource-policy: keep\n"
        "  {{- end }}\n",
        1,
    )
    return (
        "{{- /* Generated by `make crds` from operator/raytrain_operator/api/v1alpha1.py. */ -}}\n"
        "{{- if .Values.crds.install }}\n" + body + "{{- end }}\n"
    )


def main() -> None:
    import argparse
    import pathlib

    parser = argparse.ArgumentParser(description="Write the TrainJob CRD YAML.")
    parser.add_argument("--out", default="crds/trainjobs.raytrain.dev.yaml")
    parser.add_argument("--chart", action="store_true", help="write the Helm template form")
    args = parser.parse_args()
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_chart_template() if args.chart else render())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
