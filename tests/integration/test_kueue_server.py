"""Queued TrainJobs under a real Kueue (v0.19, built from Go modules) on the local control plane.

An elastic TrainJob with `spec.scaling.kueueWorkloadSlices` is admitted at minWorkers and grows
a workload slice at a time: Ray's autoscaler raises the RayCluster's worker replicas, Kueue
admits a larger slice, and only then lets the new pods be scheduled. Under KWOK no Ray runs,
so the test raises the replicas itself, as the autoscaler would (a patch of the RayCluster).
The operator runs as in production; KubeRay creates the cluster and its pods.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from kueue import NO_SLICES, SLICES, Kueue, running
from test_operator import (
    T_CREATE,
    T_KUBERAY,
    Operator,
    crds,
    create,
    get,
    operator,
    secret,
    trainjob,
    wait_condition,
)

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures used by name

GATE = "kueue.x-k8s.io/elastic-job"
WORKER = {"cpu": "1", "memory": "1Gi"}


@pytest.fixture
def kueue(kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> Iterator[Kueue]:
    with running(kube_cluster, namespace, tmp_path, SLICES) as started:
        yield started


@pytest.fixture
def kueue_without_slices(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> Iterator[Kueue]:
    with running(kube_cluster, namespace, tmp_path, NO_SLICES) as started:
        yield started


def submit(cluster: KubeCluster, kueue: Kueue, name: str) -> None:
    """The queues, the job's S3 Secret and an elastic TrainJob with kueueWorkloadSlices."""
    kueue.queues(cpu="20")
    create(cluster, kueue.namespace, secret(f"{name}-s3"))
    create(cluster, kueue.namespace, elastic(name))


def elastic(name: str) -> dict[str, Any]:
    return trainjob(
        name,
        scaling={
            "minWorkers": 1,
            "maxWorkers": 3,
            "kueueWorkloadSlices": True,
            "resourcesPerWorker": WORKER,
        },
        queueName="team",
    )


def workloads(cluster: KubeCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("workloads.kueue.x-k8s.io", "-n", ns)["items"]
    return items


def has_condition(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c["type"] == type_ and c["status"] == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def worker_count(workload: dict[str, Any]) -> int:
    (count,) = [p["count"] for p in workload["spec"]["podSets"] if p["name"] == "workers"]
    return int(count)


def worker_pods(cluster: KubeCluster, ns: str, name: str) -> list[dict[str, Any]]:
    selector = f"raytrain.dev/trainjob={name},raytrain.dev/role=worker"
    items: list[dict[str, Any]] = cluster.get_json("pods", "-n", ns, "-l", selector)["items"]
    return items


def gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates") or [])


def test_an_elastic_job_grows_by_workload_slices_that_kueue_admits(
    kube_cluster: KubeCluster, namespace: str, operator: Operator, kueue: Kueue
) -> None:
    ns, name = namespace, "slices"
    submit(kube_cluster, kueue, name)

    rj = wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    assert rj["metadata"]["annotations"][GATE] == "true"
    assert rj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is True

    # Kueue admits the first slice: the head, the submitter and minWorkers.
    first = wait_for(
        lambda: next(
            (w for w in workloads(kube_cluster, ns) if has_condition(w, "Admitted")), None
        ),
        T_CREATE,
        "Kueue to admit the RayJob's first workload slice",
    )
    assert worker_count(first) == 1

    # KubeRay's cluster carries the gate on every template (Kueue's webhook put it there),
    # and the admitted slice's pods are ungated and run.
    cluster_name = wait_for(
        lambda: (
            (get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {})
            .get("status", {})
            .get("rayClusterName")
        ),
        T_KUBERAY,
        "KubeRay to create the RayCluster",
    )
    rc = kube_cluster.get_json("raycluster", cluster_name, "-n", ns)
    templates = [rc["spec"]["headGroupSpec"]["template"]]
    templates += [g["template"] for g in rc["spec"]["workerGroupSpecs"]]
    for template in templates:
        assert {"name": GATE} in template["spec"]["schedulingGates"]

    def running(count: int) -> list[dict[str, Any]] | None:
        pods = worker_pods(kube_cluster, ns, name)
        up = [p for p in pods if not gated(p) and p["status"].get("phase") == "Running"]
        return pods if len(pods) == count and len(up) == count else None

    wait_for(lambda: running(1), T_KUBERAY, "the first slice's worker to run")

    # Ray's autoscaler asks for maxWorkers: it raises the worker group's replicas.
    patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 3}]
    kube_cluster.kubectl(
        "patch", "raycluster", cluster_name, "-n", ns, "--type=json", "-p", json.dumps(patch)
    )

    def grown() -> dict[str, Any] | None:
        for w in workloads(kube_cluster, ns):
            if worker_count(w) == 3 and has_condition(w, "Admitted"):
                return w
        return None

    second = wait_for(grown, T_KUBERAY, "Kueue to admit a slice of 3 workers")
    assert second["metadata"]["name"] != first["metadata"]["name"]
    pods = wait_for(lambda: running(3), T_KUBERAY, "all 3 workers to run, ungated")
    assert len(pods) == 3

    # The job grew in place: the same attempt, the same RayJob, never suspended.
    rj = get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0")
    assert rj is not None and not rj["spec"].get("suspend")
    tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name)
    assert tj is not None
    assert tj["status"].get("attempt", 0) == 0 and tj["status"].get("restarts", 0) == 0
    assert get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-1") is None


def test_slices_without_kueues_feature_gate_stall_with_the_fix(
    kube_cluster: KubeCluster, namespace: str, operator: Operator, kueue_without_slices: Kueue
) -> None:
    ns, name = namespace, "nogate"
    submit(kube_cluster, kueue_without_slices, name)

    stalled = wait_condition(kube_cluster, ns, name, "Stalled", timeout=T_CREATE)
    message = stalled["message"]
    assert "spec.scaling.kueueWorkloadSlices" in message, message
    assert "ElasticJobsViaWorkloadSlices" in message and "remove kueueWorkloadSlices" in message
    assert get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None
