"""A job with a template runs a spec the API server never checked whole: the operator puts the
merged spec through every rule of the CRD (operator/raytrain_operator/api/rules.py).

The parity test takes every malformed TrainJob the real API server refuses
(tests/integration/test_crd_validation.py's CASES), moves the whole spec into a template, and
asks the operator: each must be refused there too, by the model or by the CRD's rules.
"""

from __future__ import annotations

import copy
import importlib.util
import pathlib
from typing import Any

import pytest

from raytrain_operator.api import crd, rules
from raytrain_operator.handlers import reconcile

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF = ("ClusterTrainJobTemplate", "team-gpu")


def _server_cases() -> Any:
    path = ROOT / "tests" / "integration" / "test_crd_validation.py"
    spec = importlib.util.spec_from_file_location("crd_validation_cases", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _server_cases()

TEMPLATE: dict[str, Any] = {
    "image": "registry.example/team/trainer:1.0",
    "entrypoint": "examples.digits.train:train_loop_per_worker",
    "storage": {"pvc": {"claimName": "team-ckpt", "mountPath": "/mnt/ckpt"}},
    "scaling": {"numWorkers": 5, "resourcesPerWorker": {"cpu": "1", "memory": "2Gi"}},
}


def parsed(own: dict[str, Any], template: dict[str, Any]) -> tuple[Any, str | None]:
    body = {
        "metadata": {"name": "bad-input", "namespace": "team", "uid": "u1", "generation": 1},
        "spec": own,
    }
    return reconcile.parse(body, template)


def job(**spec: Any) -> dict[str, Any]:
    return {"template": {"name": REF[1]}, **spec}


def test_a_templates_pvc_next_to_the_jobs_s3_is_refused_naming_both() -> None:
    _, problem = parsed(job(storage={"s3": {"uri": "s3://team/runs"}}), TEMPLATE)
    assert problem is not None
    assert problem.startswith("spec.storage: set exactly one of storage.pvc")
    assert "spec.storage.pvc from ClusterTrainJobTemplate team-gpu" in problem
    assert "spec.storage.s3 from the TrainJob" in problem


def test_workers_per_pod_that_does_not_divide_the_templates_workers_is_refused() -> None:
    _, problem = parsed(job(scaling={"workersPerPod": 2}), TEMPLATE)
    assert problem is not None
    assert "spec.scaling.numWorkers must be a multiple of spec.scaling.workersPerPod" in problem
    assert "spec.scaling.numWorkers from ClusterTrainJobTemplate team-gpu" in problem
    assert "spec.scaling.workersPerPod from the TrainJob" in problem
    # The job's own numWorkers wins over the template's, and 4 divides by 2.
    _, problem = parsed(job(scaling={"numWorkers": 4, "workersPerPod": 2}), TEMPLATE)
    assert problem is None


def test_a_rule_broken_by_the_template_alone_names_the_template_and_the_fix() -> None:
    bad = copy.deepcopy(TEMPLATE)
    bad["head"] = {"labels": {"app.kubernetes.io/name": "kuberay-operator"}}
    _, problem = parsed(job(), bad)
    assert problem is not None
    assert problem.startswith("spec.head.labels: the key app.kubernetes.io/name is reserved")
    assert "(spec.head.labels from ClusterTrainJobTemplate team-gpu); fix the template" in problem


def test_a_complete_template_and_a_job_that_fits_it_pass() -> None:
    trainjob, problem = parsed(job(scaling={"numWorkers": 2}), TEMPLATE)
    assert problem is None and trainjob is not None
    assert trainjob.spec.scaling.num_workers == 2


def test_a_template_that_leaves_out_a_required_field_is_refused() -> None:
    partial = {k: v for k, v in TEMPLATE.items() if k != "entrypoint"}
    _, problem = parsed(job(), partial)
    assert problem is not None and "spec.entrypoint" in problem


def test_every_rule_of_the_crd_compiles_with_the_functions_it_calls() -> None:
    """A rule calling a Kubernetes CEL function cel-python lacks would refuse every job."""
    seen = 0

    def walk(node: Any) -> None:
        nonlocal seen
        if isinstance(node, dict):
            for found in node.get("x-kubernetes-validations") or ():
                if "oldSelf" in found["rule"]:
                    continue
                for expression in (found["rule"], found.get("messageExpression")):
                    if expression:
                        rules._program(expression)
                        seen += 1
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(crd.openapi_schema()["properties"]["spec"])
    assert seen >= 60


def _broken_spec(mutations: list[Any]) -> dict[str, Any] | None:
    """The case's spec, or None for a case that breaks the name (the TrainJob's own: a
    template carries no metadata)."""
    doc = CASES._valid()
    for mutate in mutations:
        mutate(doc)
    return None if doc["metadata"]["name"] != "bad-input" else dict(doc["spec"])


SPEC_CASES = [(i, m) for i, m, _ in CASES.CASES if _broken_spec(m) is not None]


def test_the_spec_cases_are_most_of_the_servers() -> None:
    assert len(SPEC_CASES) >= len(CASES.CASES) - 3 and len(SPEC_CASES) >= 40


@pytest.mark.parametrize("mutations", [pytest.param(m, id=i) for i, m in SPEC_CASES])
def test_what_the_api_server_refuses_in_a_job_is_refused_from_a_template(
    mutations: list[Any],
) -> None:
    template = _broken_spec(mutations)
    assert template is not None
    _, problem = parsed(job(), template)
    assert problem is not None, f"the operator ran a template the API server refuses: {template}"


def test_numbers_are_read_as_the_api_server_reads_them() -> None:
    """A `number` written as 1 is a double to the rules (as on the API server), and a string
    where the schema has an integer is refused, though the model would take "2" for 2."""
    whole = copy.deepcopy(TEMPLATE)
    whole["scaling"]["resourcesPerWorker"]["custom"] = {"ssd": 1}
    assert parsed(job(), whole)[1] is None
    fine = copy.deepcopy(whole)
    fine["scaling"]["resourcesPerWorker"]["custom"] = {"ssd": 0.00001}
    problem = parsed(job(), fine)[1]
    assert problem is not None and "at most 4 decimal places" in problem
    _, problem = parsed(job(scaling={"numWorkers": "2"}), TEMPLATE)
    assert problem is not None
    assert problem.startswith("spec.scaling.numWorkers: '2' must be of type integer"), problem
