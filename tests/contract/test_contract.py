"""The operator renders the runtime contract; the runtime parses it: every field round-trips.

Rendered with the operator's public `render_contract`, parsed with `raytrain_contract.load_contract`
(the model both sides share), for every example TrainJob and for generated ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import raytrain_contract as contract
from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders.contract import build_contract_configmap, render_contract

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
UID = "5f0c2a7e-91b3-4c1d-8e2f-0123456789ab"


def _examples() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        found = [d for d in yaml.safe_load_all(path.read_text()) if d]
        # A TrainJob with spec.template runs with the template merged in
        # (raytrain_contract/api/templates.py).
        docs += [templates.expand(d, found) for d in found if d.get("kind") == "TrainJob"]
    return docs


def _roundtrip(doc: dict[str, Any], attempt: int = 0) -> tuple[dict[str, Any], Any]:
    tj = TrainJob.model_validate(doc)
    meta = Meta(name=doc["metadata"]["name"], namespace="team-a", uid=UID)
    cm = build_contract_configmap(tj, meta, attempt)
    rendered = json.loads(cm["data"]["contract.json"])
    return rendered, contract.load_contract(rendered)


@pytest.mark.parametrize("doc", _examples(), ids=lambda d: d["metadata"]["name"])
def test_every_example_roundtrips(doc: dict[str, Any]) -> None:
    rendered, parsed = _roundtrip(doc, attempt=2)
    assert parsed.contract_version == 1
    assert parsed.train_job.name == doc["metadata"]["name"]
    assert parsed.train_job.namespace == "team-a" and parsed.train_job.uid == UID
    assert parsed.run_name == f"{doc['metadata']['name']}-5f0c2a7e91b3"
    assert parsed.attempt == 2
    assert parsed.entrypoint == doc["spec"]["entrypoint"]
    assert parsed.config == (doc["spec"].get("config") or {})
    assert parsed.scaling.resources_per_worker == rendered["scaling"]["resourcesPerWorker"]
    assert parsed.scaling.use_gpu == rendered["scaling"]["useGpu"]
    assert parsed.torch.backend == rendered["torch"]["backend"]
    assert parsed.storage.type == rendered["storage"]["type"]
    assert parsed.storage.path == rendered["storage"]["path"]


def test_s3_digits_fields() -> None:
    (doc,) = [d for d in _examples() if d["metadata"]["name"] == "digits"]
    _, parsed = _roundtrip(doc)
    assert parsed.storage.type == "s3"
    assert parsed.storage.path == "s3://raytrain/checkpoints"
    assert parsed.storage.endpoint == "http://minio.raytrain-system:9000"
    assert parsed.storage.region == "us-east-1"
    assert parsed.scaling.num_workers == 2
    assert parsed.scaling.resources_per_worker == {"CPU": 1.0, "memory": 2 * 1024**3}
    assert parsed.checkpoint.num_to_keep == 2
    assert parsed.checkpoint.score_attribute == "accuracy"
    assert parsed.checkpoint.score_order == "max"
    assert parsed.failure.max_failures == 2
    assert parsed.report.enabled is True


def test_tune_and_datasets_roundtrip() -> None:
    (doc,) = [d for d in _examples() if d["metadata"]["name"] == "digits"]
    doc["spec"]["datasets"] = {
        "train": {"uri": "s3://raytrain/data/", "format": "csv", "split": False}
    }
    doc["spec"]["tune"] = {
        "paramSpace": {"lr": {"loguniform": [0.001, 0.1]}, "hidden": {"choice": [64, 128]}},
        "numSamples": 4,
        "metric": "accuracy",
        "mode": "max",
        "maxConcurrentTrials": 2,
        "scheduler": {"type": "ASHA", "maxT": 8, "gracePeriod": 2, "reductionFactor": 3},
    }
    _, parsed = _roundtrip(doc)
    assert parsed.datasets["train"].uri == "s3://raytrain/data/"
    assert parsed.datasets["train"].format == "csv" and parsed.datasets["train"].split is False
    assert parsed.tune is not None
    assert parsed.tune.num_samples == 4 and parsed.tune.max_concurrent_trials == 2
    assert parsed.tune.param_space["hidden"] == {"choice": [64, 128]}
    assert parsed.tune.scheduler is not None and parsed.tune.scheduler.max_t == 8
    assert parsed.tune.scheduler.reduction_factor == 3.0


def test_pvc_roundtrip() -> None:
    (doc,) = [d for d in _examples() if d["metadata"]["name"] == "digits-pvc"]
    doc["spec"]["storage"]["pvc"]["subPath"] = "team-a"
    _, parsed = _roundtrip(doc)
    assert parsed.storage.type == "pvc" and parsed.storage.path == "/mnt/raytrain/team-a"


def test_an_unknown_version_is_refused_naming_both() -> None:
    (doc,) = [d for d in _examples() if d["metadata"]["name"] == "digits"]
    tj = TrainJob.model_validate(doc)
    rendered = render_contract(tj, Meta(name="digits", namespace="ns", uid=UID), 0)
    rendered["contractVersion"] = 2
    with pytest.raises(contract.ContractError, match="version"):
        contract.load_contract(rendered)


@settings(max_examples=60, deadline=None)
@given(
    workers=st.integers(1, 64),
    gpu=st.booleans(),
    cpu=st.sampled_from(["500m", "1", "2", 4]),
    memory=st.sampled_from([None, "1Gi", "512Mi", "2G"]),
    attempt=st.integers(0, 100),
)
def test_generated_scaling_roundtrips(
    workers: int, gpu: bool, cpu: str | int, memory: str | None, attempt: int
) -> None:
    res: dict[str, Any] = {"cpu": cpu}
    if memory:
        res["memory"] = memory
    doc = {
        "metadata": {"name": "gen"},
        "spec": {
            "image": "img",
            "entrypoint": "pkg.mod:fn",
            "scaling": {"numWorkers": workers, "useGpu": gpu, "resourcesPerWorker": res},
            "storage": {"s3": {"uri": "s3://bucket/p"}},
        },
    }
    rendered, parsed = _roundtrip(doc, attempt)
    assert parsed.attempt == attempt
    assert parsed.scaling.num_workers == workers
    assert parsed.scaling.resources_per_worker == rendered["scaling"]["resourcesPerWorker"]
    assert parsed.torch.backend == ("nccl" if gpu else "gloo")
