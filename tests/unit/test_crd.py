"""The committed CRD is what the API models generate, and it carries every rule users rely on."""

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


def test_names_kind_and_subresources() -> None:
    doc = crdgen.crd()
    names = doc["spec"]["names"]
    assert doc["metadata"]["name"] == "trainjobs.raytrain.dev"
    assert names["kind"] == "TrainJob"
    # Kubeflow Trainer's TrainJob has no short name; ours must not be a generic one either.
    assert names["shortNames"] == ["rtj"]
    assert "raytrain" in names["categories"]
    version = doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Status"] == ".status.phase"
    assert columns["Progress"] == ".status.trainerStatus.progressPercentage"
    assert columns["Workers"] == ".status.workers.ready"
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_conditions_are_a_map_keyed_by_type(schema: dict[str, Any]) -> None:
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["required"]) == {"type", "status", "lastTransitionTime", "reason"}


@pytest.mark.parametrize(
    ("where", "needle"),
    [
        (".spec.storage", "exactly one of storage.pvc"),
        (".spec", "set numWorkers for a fixed-size job"),
        (".spec.scaling", "numWorkers cannot be combined"),
        (".spec.scaling", "minWorkers must be less than or equal"),
        (".spec.scaling", "multiple of spec.scaling.workersPerPod"),
        (".spec.scaling", "acceleratorType needs"),
        (".spec.entrypoint", "spec.entrypoint must be module:function"),
        (".spec.storage.s3.uri", "s3://bucket/prefix"),
        (".spec.storage.s3.endpoint", "spec.storage.s3.endpoint must be a URL"),
        (".spec.storage.s3", "credentialsSecret or serviceAccountName"),
        (".spec.checkpoint", "scoreOrder needs"),
        ("", f"at most {api.MAX_NAME_LENGTH} characters"),
        ("", "must start with a lower-case letter"),
        (".spec", "spec.workerTemplate.resources sets cpu"),
        (".spec.scaling", "acceleratorType needs GPUs"),
        (".spec.scaling.acceleratorType", "must not end in 'gpu'"),
        (".spec.scaling.resourcesPerWorker.cpu", "Kubernetes quantity between 1m and 1024"),
        (".spec.scaling.resourcesPerWorker.memory", "between 1Mi and 64Ti"),
        (".spec.scaling.resourcesPerWorker.custom", "are not custom resources"),
        (".spec.scaling.resourcesPerWorker.custom", "at most 4 decimal places"),
        (".spec.storage.pvc.subPath", "must stay inside the claim"),
        (".spec.storage.pvc.mountPath", "without '.' or '..' segments"),
        (".spec.storage.pvc.mountPath", "must not hide or nest"),
        (".spec.storage.s3.uri", "must not contain '.' or '..' segments"),
        (".spec.head.nodeSelector", "every key must be a node label key"),
        (".spec.head.tolerations[]", "without a key must have operator Exists"),
        (".spec.head.env[]", "value or valueFrom"),
        (".spec.head.resources.limits{}", "Kubernetes quantity between 0 and 1Ei"),
        (".spec.datasets", "a dataset name"),
        ("", "immutable once the job has started"),
    ],
)
def test_cel_rule_present(schema: dict[str, Any], where: str, needle: str) -> None:
    messages = [message for path, _, message in _rules(schema) if path == where]
    assert any(needle in m for m in messages), f"no rule at {where or '<root>'} saying {needle!r}"


def test_every_rule_message_names_a_field(schema: dict[str, Any]) -> None:
    for path, rule, message in _rules(schema):
        assert "spec." in message or "metadata." in message, (path, rule, message)


def test_enums(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]["properties"]
    placement = spec["scaling"]["properties"]["placementStrategy"]
    assert placement["enum"] == ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
    assert spec["torch"]["properties"]["backend"]["enum"] == ["nccl", "gloo"]
    assert spec["checkpoint"]["properties"]["scoreOrder"]["enum"] == ["max", "min"]


def test_minimums(schema: dict[str, Any]) -> None:
    scaling = schema["properties"]["spec"]["properties"]["scaling"]["properties"]
    for field in ("numWorkers", "minWorkers", "maxWorkers", "workersPerPod"):
        assert scaling[field]["minimum"] == 1, field


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


def test_names_of_referenced_objects_are_dns_subdomains(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]["properties"]
    storage = spec["storage"]["properties"]
    for node in (
        storage["pvc"]["properties"]["claimName"],
        storage["s3"]["properties"]["credentialsSecret"]["properties"]["name"],
        storage["s3"]["properties"]["serviceAccountName"],
        spec["head"]["properties"]["serviceAccountName"],
        spec["workerTemplate"]["properties"]["priorityClassName"],
    ):
        assert node["pattern"] == api.DNS_SUBDOMAIN
