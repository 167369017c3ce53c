"""Against the real control plane: the operator follows RayJobs and runtime reports without the
resync, the resync of the whole set runs no pass for an idle job, and no TrainJob carries a
finalizer (one an earlier version left is taken off).

The operator runs with --resync-seconds 600, longer than any wait here: whatever the TrainJob
shows of its RayJob, of the runtime's report or of its TTL was brought by a wake-up (a RayJob
event, a TrainJob status event, a due time), and the metrics say no resync pass ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    T_KUBERAY,
    Operator,
    counter,
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
    assert finalizers(kube_cluster, ns, name) == []  # running, and still no finalizer

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
    text = quiet_operator.metrics()
    assert counter(text, "raytrain_reconciles_total", handler="resync") == 0
    assert counter(text, "raytrain_wakeups_total", cause="rayjob") >= 1
    assert counter(text, "raytrain_wakeups_total", cause="report") >= 1

    # With the operator stopped, deleting the job does not wait for it.
    quiet_operator.stop()
    kube_cluster.kubectl("delete", "trainjobs.raytrain.dev", name, "-n", ns, "--timeout=60s")
    assert get(kube_cluster, ns, "trainjobs.raytrain.dev", name) is None


def test_the_ttl_clean_up_runs_when_due(
    kube_cluster: KubeCluster, namespace: str, quiet_operator: Operator
) -> None:
    ns, name = namespace, "ttl"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    # Long enough that the pass woken by the Failed status write comes before the TTL is due
    # even on a loaded machine: a pass that came later would delete at once, woken by that
    # event rather than by the due time this test is about.
    create(kube_cluster, ns, trainjob(name, ttlSecondsAfterFinished=20))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    runtime_report(
        kube_cluster,
        ns,
        name,
        {"phase": "Failed", "message": "boom", "attempt": 0, "lastUpdatedTime": utc_now()},
    )
    wait_condition(kube_cluster, ns, name, "Failed")
    assert finalizers(kube_cluster, ns, name) == []  # the TTL is pending: still none
    wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None,
        T_KUBERAY,
        "the TTL clean-up to delete the RayJob (a due wake-up, not the 600 s resync)",
    )
    assert counter(quiet_operator.metrics(), "raytrain_wakeups_total", cause="due") >= 1
    assert counter(quiet_operator.metrics(), "raytrain_reconciles_total", handler="resync") == 0


def versions(cluster: KubeCluster, ns: str, name: str) -> tuple[str, str]:
    """The resourceVersions of the TrainJob and of its first RayJob: what the resync compares."""
    job = get(cluster, ns, "trainjobs.raytrain.dev", name) or {}
    rayjob = get(cluster, ns, "rayjobs.ray.io", f"{name}-0") or {}
    return (
        str((job.get("metadata") or {}).get("resourceVersion")),
        str((rayjob.get("metadata") or {}).get("resourceVersion")),
    )


def test_the_resync_lists_the_whole_set_and_runs_no_pass_for_an_idle_job(
    kube_cluster: KubeCluster, namespace: str, crds: None, tmp_path: Path
) -> None:
    """With a 2 s interval the whole set is listed every 2 s; a job where nothing happens gets
    no pass from it (passes follow events, not the clock).

    Idle means nothing the resync compares changed over the window: right after the RayJob's
    creation KubeRay is still writing it, and a resync that lists a change before its watch
    event arrives runs a pass for it, as it should. So the window counted is one over which
    neither the TrainJob's nor the RayJob's resourceVersion moved; the first such window
    within T_CREATE decides."""
    op = Operator(kube_cluster, namespace, tmp_path / "operator.log", resync_seconds=2)
    op.start()
    try:
        ns, name = namespace, "resyncs"
        create(kube_cluster, ns, secret(f"{name}-s3"))
        create(kube_cluster, ns, trainjob(name))
        wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
        windows: list[tuple[float, float, bool]] = []

        def idle_window() -> bool:
            before = versions(kube_cluster, ns, name)
            resyncs = counter(op.metrics(), "raytrain_resyncs_total")
            passes = counter(op.metrics(), "raytrain_reconciles_total", handler="resync")
            wait_for(
                lambda: counter(op.metrics(), "raytrain_resyncs_total") >= resyncs + 3,
                T_CREATE,
                "three resyncs of the whole set",
            )
            after = counter(op.metrics(), "raytrain_reconciles_total", handler="resync")
            idle = versions(kube_cluster, ns, name) == before
            windows.append((passes, after, idle))
            return idle

        wait_for(idle_window, T_CREATE, "three resyncs over which the job stayed as it was")
        passes, after, _ = windows[-1]
        assert after == passes, (
            f"the resync ran {after - passes:.0f} pass(es) for a job where nothing changed "
            f"(windows: {windows})"
        )
    finally:
        op.stop()
        print(f"--- operator log ({op.log}) ---\n{op.tail(200)}")


def test_a_finalizer_an_earlier_version_left_is_taken_off(
    kube_cluster: KubeCluster, namespace: str, quiet_operator: Operator
) -> None:
    """Earlier versions had kopf put its finalizer on every running TrainJob (for a per-job
    timer); this one takes it off, so deleting the job never waits for an operator."""
    ns, name = namespace, "old-finalizer"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    doc = trainjob(name)
    doc["metadata"]["finalizers"] = [FINALIZER, "example.com/other"]
    create(kube_cluster, ns, doc)
    wait_for(
        lambda: finalizers(kube_cluster, ns, name) == ["example.com/other"],
        T_CREATE,
        f"{FINALIZER} taken off, the other finalizer kept",
    )
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    kube_cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", name, "-n", ns, "--type", "merge",
        "-p", '{"metadata": {"finalizers": null}}',
    )  # fmt: skip
