"""The preflight's spec check: sizes the API server cannot bound stall with the field and fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.handlers import preflight


def _trainjob(config: dict[str, Any]) -> TrainJob:
    return TrainJob.model_validate(
        {
            "metadata": {"name": "big"},
            "spec": {
                "image": "i",
                "entrypoint": "m:f",
                "config": config,
                "scaling": {"numWorkers": 1},
                "storage": {"s3": {"uri": "s3://bucket/x"}},
            },
        }
    )


def test_a_small_spec_passes() -> None:
    assert preflight.spec_problem(_trainjob({"epochs": 3}), Meta("big", "ns", "u")) is None


def test_a_config_larger_than_a_configmap_stalls_naming_spec_config() -> None:
    problem = preflight.spec_problem(_trainjob({"blob": "x" * 1_100_000}), Meta("big", "ns", "u"))
    assert problem is not None
    reason, message = problem
    assert reason == "SpecTooLarge"
    assert message.startswith("spec.config: 1100011 bytes")
    assert "pass its path in spec.config" in message


def test_kubectl_applys_copy_counts_against_the_annotation_budget() -> None:
    """130 KB fit alone, but not next to kubectl's last-applied copy of the same spec."""
    trainjob = _trainjob({"blob": "x" * 130_000})
    assert preflight.spec_problem(trainjob, Meta("big", "ns", "u")) is None
    applied = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps({"x": "y" * 130_000})}
    problem = preflight.spec_problem(trainjob, Meta("big", "ns", "u", annotations=applied))
    assert problem is not None and problem[1].startswith("spec.config:")
    assert "130" in problem[1] and "last-applied-configuration" in problem[1]


def _with_claims(head: list[dict[str, str]], workers: list[dict[str, str]]) -> TrainJob:
    trainjob = _trainjob({})
    return TrainJob.model_validate(
        {
            "metadata": {"name": "big"},
            "spec": {
                **trainjob.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
                "head": {"resourceClaims": head},
                "workerTemplate": {"resourceClaims": workers},
            },
        }
    )


def test_a_claim_template_that_does_not_exist_stalls_naming_the_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    existing = {("resourceclaimtemplates", "gpus"), ("resourceclaims", "shared")}
    asked: list[tuple[str, str, str]] = []

    def exists(namespace: str, plural: str, name: str) -> bool:
        asked.append((namespace, plural, name))
        return (plural, name) in existing

    monkeypatch.setattr(preflight.k8s, "dra_object_exists", exists)
    trainjob = _with_claims(
        [{"name": "s", "resourceClaimName": "shared"}],
        [
            {"name": "g", "resourceClaimTemplateName": "gpus"},
            {"name": "n", "resourceClaimTemplateName": "nics"},
        ],
    )
    problem = preflight.claim_problem(trainjob, "ns")
    assert problem is not None
    reason, message = problem
    assert reason == "ResourceClaimNotFound"
    assert message.startswith(
        "spec.workerTemplate.resourceClaims[1].resourceClaimTemplateName: "
        "ResourceClaimTemplate 'nics' does not exist in namespace 'ns'"
    ), message
    assert "set resourceClaimTemplateName to an existing ResourceClaimTemplate" in message
    assert ("ns", "resourceclaims", "shared") in asked

    existing.add(("resourceclaimtemplates", "nics"))
    assert preflight.claim_problem(trainjob, "ns") is None
    existing.discard(("resourceclaims", "shared"))
    problem = preflight.claim_problem(trainjob, "ns")
    assert problem is not None and problem[1].startswith(
        "spec.head.resourceClaims[0].resourceClaimName: ResourceClaim 'shared' does not exist"
    ), problem


def test_a_claim_the_operator_may_not_read_is_not_a_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """403 (a Role without the resource.k8s.io rule): the check is skipped, the job goes on."""
    monkeypatch.setattr(preflight.k8s, "dra_object_exists", lambda *_: None)
    trainjob = _with_claims([], [{"name": "g", "resourceClaimTemplateName": "gpus"}])
    assert preflight.claim_problem(trainjob, "ns") is None


def test_no_claims_no_request(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: str) -> bool:
        raise AssertionError("no resourceClaims: nothing to read")

    monkeypatch.setattr(preflight.k8s, "dra_object_exists", refuse)
    assert preflight.claim_problem(_trainjob({}), "ns") is None
