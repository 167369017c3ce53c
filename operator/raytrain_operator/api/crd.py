"""Generate the CustomResourceDefinitions (TrainJob and its templates) from the pydantic models.

pydantic's JSON schema is close to, but not, a Kubernetes structural schema: it uses `$ref`,
`anyOf` for optional fields, `title`s and `additionalProperties: true`. This module rewrites it
into the structural form the API server requires, keeps every description, and adds the CRD's
printer columns, categories and subresources. `make crds` writes the result to `crds/`; a test
fails when the committed file drifts from what this produces.
"""

from __future__ import annotations

from typing import Any

import yaml

from raytrain_contract.api import v1alpha1 as api

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


def _without_defaults(schema: Schema) -> Schema:
    """The schema with no `default` anywhere: the API server would store each default in the
    object, and a stored value wins over the template's (the operator applies the same
    defaults to the spec it runs, the template merged in)."""
    out: Schema = {}
    for key, value in schema.items():
        if key == "default":
            continue
        if key == "properties":
            out[key] = {name: _without_defaults(prop) for name, prop in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _without_defaults(value)
        else:
            out[key] = value
    return out


def _object_schema(model: type[Any]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema = _structural(raw, defs)
    props = schema["properties"]
    # The root may say nothing about metadata beyond its type; apiVersion and kind are strings.
    props["metadata"] = {"type": "object"}
    props["apiVersion"] = {"type": "string", "description": props["apiVersion"]["description"]}
    props["kind"] = {"type": "string", "description": props["kind"]["description"]}
    schema["required"] = ["spec"]
    return schema


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def openapi_schema() -> Schema:
    """The structural OpenAPI v3 schema of a TrainJob, as the CRD carries it."""
    schema = _object_schema(api.TrainJob)
    spec = schema["properties"]["spec"]
    # What a template may set has no default in the schema (see _without_defaults), and what
    # the job must have is required by a rule that a template satisfies (TrainJobSpec's rules).
    for name in api.TEMPLATE_FIELDS:
        key = _camel(name)
        spec["properties"][key] = _without_defaults(spec["properties"][key])
    spec["required"] = [
        r for r in spec.get("required", []) if r not in {_camel(f) for f in api.TEMPLATE_REQUIRED}
    ]
    if not spec["required"]:
        del spec["required"]
    return schema


def template_schema() -> Schema:
    """The structural OpenAPI v3 schema of a ClusterTrainJobTemplate and a TrainJobTemplate."""
    return _without_defaults(_object_schema(api.TrainJobTemplate))


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


TEMPLATE_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Image",
        "type": "string",
        "jsonPath": ".spec.image",
        "description": "The trainer runtime image it gives",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _crd(
    kind: str,
    plural: str,
    scope: str,
    schema: Schema,
    columns: list[dict[str, Any]],
    short_names: list[str],
    status: bool,
) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": api.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = columns
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = short_names
    names["categories"] = list(api.CATEGORIES)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{api.GROUP}",
            "labels": {"app.kubernetes.io/name": "raytrain-operator"},
        },
        "spec": {"group": api.GROUP, "names": names, "scope": scope, "versions": [version]},
    }


def crd() -> dict[str, Any]:
    """The TrainJob CustomResourceDefinition."""
    return _crd(
        api.KIND,
        api.PLURAL,
        "Namespaced",
        openapi_schema(),
        PRINTER_COLUMNS,
        list(api.SHORT_NAMES),
        status=True,
    )


def template_crds() -> list[dict[str, Any]]:
    """The ClusterTrainJobTemplate (cluster-scoped) and TrainJobTemplate CRDs: one schema."""
    return [
        _crd(
            api.CLUSTER_TEMPLATE_KIND,
            api.CLUSTER_TEMPLATE_PLURAL,
            "Cluster",
            template_schema(),
            TEMPLATE_PRINTER_COLUMNS,
            ["ctjt"],
            status=False,
        ),
        _crd(
            api.TEMPLATE_KIND,
            api.TEMPLATE_PLURAL,
            "Namespaced",
            template_schema(),
            TEMPLATE_PRINTER_COLUMNS,
            ["tjt"],
            status=False,
        ),
    ]


HEADER = "# Generated by `make crds` from raytrain_contract/api/v1alpha1/. Do not edit.\n"


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: anchors would only confuse readers of the CRD."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_NoAliasDumper, sort_keys=False, width=100)


def render() -> str:
    """The TrainJob CRD as the YAML file committed under crds/."""
    return HEADER + _dump(crd())


def render_templates() -> str:
    """The two template CRDs as the YAML file committed under crds/."""
    return HEADER + "---\n".join(_dump(c) for c in template_crds())


def render_chart_template() -> str:
    """The same CRDs as a Helm template, behind `crds.install` so `helm upgrade` updates them
    and `crds.keep` so `helm uninstall` does not delete every TrainJob with them."""
    bodies = []
    for obj in [crd(), *template_crds()]:
        bodies.append(
            _dump(obj).replace(
                "  labels:\n    app.kubernetes.io/name: raytrain-operator\n",
                "  labels:\n    app.kubernetes.io/name: raytrain-operator\n"
                "  {{- if .Values.crds.keep }}\n"
                "  annotations:\n    helm.sh/resource-policy: keep\n"
                "  {{- end }}\n",
                1,
            )
        )
    return (
        "{{- /* Generated by `make crds` from raytrain_contract/api/v1alpha1/. */ -}}\n"
        "{{- if .Values.crds.install }}\n" + "---\n".join(bodies) + "{{- end }}\n"
    )


def main() -> None:
    import argparse
    import pathlib

    parser = argparse.ArgumentParser(description="Write the CRDs' YAML.")
    parser.add_argument("--out", default="crds/trainjobs.raytrain.dev.yaml")
    parser.add_argument(
        "--templates-out",
        help="also write the template CRDs here (crds/trainjobtemplates.raytrain.dev.yaml)",
    )
    parser.add_argument(
        "--chart", action="store_true", help="write the Helm template form (all three CRDs)"
    )
    args = parser.parse_args()
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_chart_template() if args.chart else render())
    print(f"wrote {path}")
    if args.templates_out:
        templates = pathlib.Path(args.templates_out)
        templates.write_text(render_templates())
        print(f"wrote {templates}")


if __name__ == "__main__":
    main()
