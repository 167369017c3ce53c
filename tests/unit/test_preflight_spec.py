"""The preflight's spec check: sizes the API server cannot bound stall with the field and fix."""

from __future__ import annotations

import json
from typing import Any

from raytrain_operator.api.v1alpha1 import TrainJob
from raytrain_operator.builders.meta import Meta
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
