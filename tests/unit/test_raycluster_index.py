"""Worker counts: the RayCluster's own status wins over the RayJob's copy of it."""

from __future__ import annotations

from typing import Any

from raytrain_operator.handlers.reconcile import with_cluster_workers


def _rayjob(cluster_name: str | None, ready: int) -> dict[str, Any]:
    status: dict[str, Any] = {
        "jobDeploymentStatus": "Running",
        "rayClusterStatus": {"desiredWorkerReplicas": 2, "readyWorkerReplicas": ready},
    }
    if cluster_name:
        status["rayClusterName"] = cluster_name
    return {"metadata": {"namespace": "ns", "name": "digits-0"}, "status": status}


def _index(name: str, desired: int | None, ready: int | None) -> dict[Any, list[Any]]:
    entry = {"name": name, "desiredWorkerReplicas": desired, "readyWorkerReplicas": ready}
    return {("ns", "digits-0"): [entry]}


def test_the_clusters_counts_replace_a_stale_copy() -> None:
    out = with_cluster_workers(_rayjob("digits-0-abc", 0), _index("digits-0-abc", 2, 2))
    assert out["status"]["rayClusterStatus"] == {
        "desiredWorkerReplicas": 2,
        "readyWorkerReplicas": 2,
    }
    assert out["status"]["jobDeploymentStatus"] == "Running"


def test_another_cluster_of_the_same_rayjob_name_is_ignored() -> None:
    rayjob = _rayjob("digits-0-new", 1)
    assert with_cluster_workers(rayjob, _index("digits-0-old", 2, 2)) == rayjob


def test_missing_counts_and_no_index_leave_the_rayjob_as_it_is() -> None:
    rayjob = _rayjob(None, 1)
    assert with_cluster_workers(rayjob, None) is rayjob
    assert with_cluster_workers(rayjob, {}) is rayjob
    out = with_cluster_workers(rayjob, _index("digits-0-x", None, None))
    assert out["status"]["rayClusterStatus"]["readyWorkerReplicas"] == 1
