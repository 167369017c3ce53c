"""The committed CRD is what the API models generate, and its schema is written as we mean to.

What the API server does with it (each rule's refusal, the columns, the status subresource) is
tests/integration/test_crd_validation.py's.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from raytrain_contract.api import templates
from raytrain_contract.api import v1alpha1 as api
from raytrain_operator.api import crd as crdgen

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "trainjobs.raytrain.dev.yaml"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, prop in node.get("properties", {}).items():
        yield from _walk(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _rules(schema: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (path, rule["rule"], rule["message"])
        for path, node in _walk(schema, "")
        for rule in node.get("x-kubernetes-validations", [])
    ]


def test_committed_crd_matches_the_models() -> None:
    assert CRD_FILE.read_text() == crdgen.render(), (
        "crds/ drifted from the API models: run `make crds` and commit the result"
    )


def test_committed_template_crds_match_the_models() -> None:
    path = ROOT / "crds" / "trainjobtemplates.raytrain.dev.yaml"
    assert path.read_text() == crdgen.render_templates(), (
        "crds/ drifted from the API models: run `make crds` and commit the result"
    )


def test_chart_crd_matches_the_models() -> None:
    chart = ROOT / "charts" / "raytrain-operator" / "templates" / "crds.yaml"
    if not chart.parent.exists():
        pytest.skip("the chart has no templates yet")
    assert chart.read_text() == crdgen.render_chart_template(), "run `make crds` and commit"


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema, ""):
        if path == ".metadata":  # the API server owns metadata's schema
            continue
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "title", "$defs"):
            assert banned not in node, f"{path or '<root>'} carries {banned}"
        has_type = "type" in node or node.get("x-kubernetes-int-or-string")
        assert has_type, f"{path or '<root>'} has no type"
        if node.get("type") == "object" and not node.get("x-kubernetes-preserve-unknown-fields"):
            assert "properties" in node or "additionalProperties" in node, path


def test_every_field_is_described(schema: dict[str, Any]) -> None:
    missing = [
        path
        for path, node in _walk(schema, "")
        if path not in ("", ".metadata")
        and not path.endswith("[]")
        and not node.get("description")
        and not path.endswith("{}")
    ]
    assert missing == [], f"fields without a description (kubectl explain shows it): {missing}"


def test_every_rule_message_names_a_field(schema: dict[str, Any]) -> None:
    for path, rule, message in _rules(schema):
        assert "spec." in message or "metadata." in message, (path, rule, message)


def test_examples_parse_with_the_models() -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert examples, "examples/ holds no TrainJob"
    for path in examples:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            if doc.get("kind") == "TrainJob":
                api.TrainJob.model_validate(templates.expand(doc, docs))


def test_crd_file_is_valid_yaml() -> None:
    loaded = yaml.safe_load(CRD_FILE.read_text())
    assert loaded["kind"] == "CustomResourceDefinition"


def test_quantity_fields_are_checked_with_the_servers_parser(schema: dict[str, Any]) -> None:
    """isQuantity alone accepts 1e1000000: every quantity rule also bounds the value."""
    rules = [rule for _, rule, _ in _rules(schema) if "isQuantity" in rule]
    assert len(rules) >= 4
    for rule in rules:
        assert "compareTo(quantity(" in rule, rule
