"""A job with spec.datasets leaves Ray Data a CPU on every worker Ray node."""

from __future__ import annotations

from typing import Any

import pytest
from _factories import meta, trainjob

from raytrain_operator.builders.rayjob import build_rayjob

DATASETS = {"train": {"uri": "s3://bucket/train/", "format": "parquet"}}


def _workers(**spec: Any) -> dict[str, Any]:
    rj = build_rayjob(trainjob(**spec), meta(), 0, suspend=False)
    group: dict[str, Any] = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    return group


def test_without_datasets_kuberay_counts_the_pods_cpus() -> None:
    assert _workers()["rayStartParams"] == {}


@pytest.mark.parametrize(
    ("cpu", "per_pod", "advertised"),
    [("1", 1, "2"), ("250m", 1, "2"), ("1500m", 2, "4"), ("2", 4, "9")],
)
def test_with_datasets_a_worker_node_advertises_one_cpu_beyond_its_pod(
    cpu: str, per_pod: int, advertised: str
) -> None:
    scaling = {
        "numWorkers": 2 * per_pod,
        "workersPerPod": per_pod,
        "resourcesPerWorker": {"cpu": cpu, "memory": "1Gi"},
    }
    group = _workers(datasets=DATASETS, scaling=scaling)
    assert group["rayStartParams"] == {"num-cpus": advertised}
