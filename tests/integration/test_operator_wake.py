"""Against the real control plane: the operator follows RayJobs and runtime reports without its
resync timer, and only jobs it still has work on carry its finalizer.

The operator runs with --resync-seconds 600, longer than any wait here: whatever the TrainJob
shows of its RayJob, of the runtime's report or of its TTL was brought by a wake-up (a RayJob
event, a TrainJob status event, a due time), and the metrics say no resync pass ran.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    T_KUBERAY,
    Operator,
    crds,
    create,
    get,
    report_running,
    runtime_report,
    secret,
    trainjob,
    utc_now,
    wait_condition,
)

pytestmark = pytest.mark.integration
__all__ = ["crds"]  # the module-scoped CRD fixture

FINALIZER = "kopf.raytrain.dev/finalizer"
RESYNC = 600


@pytest.fixture
def quiet_operator(
    kube_cluster: KubeCluster, namespace: str, crds: None, tmp_path: Path
) -> Iterator[Operator]:
    op = Operator(kube_cluster, namespace, tmp_path / "operator.log", resync_seconds=RESYNC)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(f"--- operator log ({op.log}) ---\n{op.tail(200)}")


def counter(metrics_text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def finalizers(cluster: KubeCluster, ns: str, name: str) -> list[str]:
    obj = get(cluster, ns, "trainjobs.raytrain.dev", name) or {}
    return list((obj.get("metadata") or {}).get("finalizers") or [])


def test_the_trainjob_follows_its_rayjob_and_reports_without_the_resync(
    kube_cluster: KubeCluster, namespace: str, quiet_operator: Operator
) -> None:
    ns, name = namespace, "follows"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    assert FINALIZER in finalizers(kube_cluster, ns, name)  # running: the operator has work

    # KubeRay names the cluster in the RayJob's status; only a pass woken by that RayJob event
    # can copy it into the TrainJob before the 600 s resync.
    def cluster_name_copied() -> str | None:
        rj = get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {}
        cluster = (rj.get("status") or {}).get("rayClusterName")
        tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
        copied = (tj.get("status") or {}).get("rayClusterName")
        return cluster if cluster and copied == cluster else None

    wait_for(cluster_name_copied, T_KUBERAY, "the RayJob's cluster name in the TrainJob")

    # The runtime's report, a status write on the TrainJob, wakes a pass too.
    report_running(kube_cluster, ns, name)
    wait_condition(kube_cluster, ns, name, "Running")
    runtime_report(
        kube_cluster,
        ns,
        name,
        {"phase": "Succeeded", "attempt": 0, "lastUpdatedTime": utc_now()},
    )
    wait_condition(kube_cluster, ns, name, "Succeeded")

    # Finished, no TTL: kopf drops its finalizer once the timer's filter stops matching.
    wait_for(
        lambda: FINALIZER not in finalizers(kube_cluster, ns, name),
        T_CREATE,
        f"{FINALIZER} removed from the finished TrainJob",
    )
    text = quiet_operator.metrics()
    assert counter(text, "raytrain_reconciles_total", handler="resync") == 0
    assert counter(text, "raytrain_wakeups_total", cause="rayjob") >= 1
    assert counter(text, "raytrain_wakeups_total", cause="report") >= 1

    # With the operator stopped, deleting the finished job does not wait for it.
    quiet_operator.stop()
    kube_cluster.kubectl("delete", "trainjobs.raytrain.dev", name, "-n", ns, "--timeout=60s")
    assert get(kube_cluster, ns, "trainjobs.raytrain.dev", name) is None


def test_the_ttl_clean_up_runs_when_due_and_then_the_finalizer_goes(
    kube_cluster: KubeCluster, namespace: str, quiet_operator: Operator
) -> None:
    ns, name = namespace, "ttl"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name, ttlSecondsAfterFinished=5))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    runtime_report(
        kube_cluster,
        ns,
        name,
        {"phase": "Failed", "message": "boom", "attempt": 0, "lastUpdatedTime": utc_now()},
    )
    wait_condition(kube_cluster, ns, name, "Failed")
    # The TTL is pending: the job still needs the operator and keeps the finalizer.
    tj: dict[str, Any] = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
    if "raytrain.dev/children-deleted" not in tj["metadata"].get("annotations", {}):
        assert FINALIZER in tj["metadata"].get("finalizers", [])
    wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None,
        T_KUBERAY,
        "the TTL clean-up to delete the RayJob (a due wake-up, not the 600 s resync)",
    )
    wait_for(
        lambda: FINALIZER not in finalizers(kube_cluster, ns, name),
        T_CREATE,
        f"{FINALIZER} removed once the TTL clean-up is done",
    )
    assert counter(quiet_operator.metrics(), "raytrain_wakeups_total", cause="due") >= 1
