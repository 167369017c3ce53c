"""The chart's operator with two replicas through a rollout: one writer at a time, and a
standby that never writes, on the real node.

The chart runs every replica with kopf peering (`--peering-mode=required`): of the instances
alive, the newest start works, the others wait. Each names itself by its pod's name in the user
agent of its own requests (POD_ID), so the API server's audit log (RAYTRAIN_AUDIT=1, which the
session's cluster runs with) tells every write of each pod. kopf's own requests (the peering
heartbeat) carry kopf's user agent and are not counted: a standby renews its heartbeat, and
that is all it may send.

A TrainJob with an activeDeadlineSeconds is taken to its RayJob by the working pod, which then
holds a pass due at the deadline. `kubectl rollout restart` replaces both pods (the chart's
Deployment is Recreate: the old ones end before the new ones start); the new working pod fails
the job at its deadline. Over the whole run: each standby wrote nothing, and the old working
pod's last write came before the new one's first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from realpods import (
    NODE,
    OPERATOR_SELECTOR,
    SYSTEM_NS,
    Images,
    assert_node_whole,
    built_images,
    import_archive,
    install_chart,
)
from test_operator import T_CREATE, create, get, secret, trainjob
from test_standby_server import audit_log, summary, writes_by

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(1200)]

DEADLINE = 120
#: Longest for the pods of a rollout to be Ready (the image is on the node already).
ROLLOUT_TIMEOUT = 300


@pytest.fixture(scope="module")
def two_replicas(kube_cluster: KubeCluster) -> Iterator[Images]:
    if not os.environ.get("RAYTRAIN_NETNS"):
        pytest.fail(
            "the real-pod tests run inside the cluster's network namespace: "
            "bash e2e/netns/run.sh python -m pytest -m realnode (make test does this)",
            pytrace=False,
        )
    nodes = kube_cluster.get_json("nodes")["items"]
    assert NODE in {n["metadata"]["name"] for n in nodes}, "the cluster has no real node"
    assert_node_whole()
    images = built_images()
    import_archive(images.operator_archive)
    install_chart(kube_cluster, images, {"replicaCount": 2})
    try:
        yield images
    finally:
        # The chart's operator watches every namespace: the tests after this module see only
        # the operators they start themselves.
        kube_cluster.kubectl(
            "delete", "deployment", "-n", SYSTEM_NS,
            "-l", OPERATOR_SELECTOR, "--wait=true", "--timeout=120s",
            check=False, timeout=180,
        )  # fmt: skip


def ready_pods(cluster: KubeCluster) -> list[dict[str, Any]]:
    pods = cluster.get_json("pods", "-n", SYSTEM_NS, "-l", OPERATOR_SELECTOR)["items"]
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]


def roles(cluster: KubeCluster, names: list[str]) -> tuple[str, str]:
    """(working, standby) among two operator pods: the standby's log says it paused."""

    def found() -> tuple[str, str] | None:
        paused = [
            n
            for n in names
            if "Pausing: peer" in cluster.kubectl("logs", "-n", SYSTEM_NS, n, check=False).stdout
        ]
        if len(paused) != 1:
            return None
        (standby,) = paused
        (working,) = [n for n in names if n != standby]
        return working, standby

    result: tuple[str, str] = wait_for(found, T_CREATE, "one of the two replicas to pause")
    return result


def failed_at_deadline(cluster: KubeCluster, ns: str, name: str) -> bool:
    status = (get(cluster, ns, "trainjobs.raytrain.dev", name) or {}).get("status") or {}
    return any(
        c.get("type") == "Failed" and c.get("status") == "True" and c.get("reason") == (
            "DeadlineExceeded")
        for c in status.get("conditions") or []
    )  # fmt: skip


def first_and_last(entries: list[dict[str, Any]]) -> tuple[str, str]:
    times = sorted(str(e.get("requestReceivedTimestamp")) for e in entries)
    return times[0], times[-1]


def test_a_rollout_of_two_replicas_keeps_one_writer_and_the_standbys_write_nothing(
    two_replicas: Images, kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    cluster, ns, name = kube_cluster, namespace, "rollout"
    log = audit_log()
    start = log.stat().st_size
    pods = wait_for(
        lambda: names if len(names := [p["metadata"]["name"] for p in ready_pods(cluster)]) == 2
        else None,
        ROLLOUT_TIMEOUT, "two Ready replicas",
    )  # fmt: skip
    working, standby = roles(cluster, pods)
    create(cluster, ns, secret(f"{name}-s3"))
    create(cluster, ns, trainjob(name, activeDeadlineSeconds=DEADLINE))
    wait_for(lambda: get(cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "the RayJob")
    wait_for(
        lambda: ((get(cluster, ns, "trainjobs.raytrain.dev", name) or {}).get("status") or {})
        .get("startTime"),
        T_CREATE, "the start recorded (the deadline pass is queued from then)",
    )  # fmt: skip
    assert writes_by(log, working, start), "no write of the working replica: a vacuous filter"

    restarted = time.monotonic()
    deployment = cluster.kubectl(
        "get", "deployment", "-n", SYSTEM_NS, "-l", OPERATOR_SELECTOR, "-o", "name"
    ).stdout.strip()
    cluster.kubectl("rollout", "restart", "-n", SYSTEM_NS, deployment)
    cluster.kubectl(
        "rollout", "status", "-n", SYSTEM_NS, deployment, f"--timeout={ROLLOUT_TIMEOUT}s",
        timeout=ROLLOUT_TIMEOUT + 30,
    )  # fmt: skip
    new_pods = wait_for(
        lambda: names
        if len(names := [p["metadata"]["name"] for p in ready_pods(cluster)]) == 2
        and not set(names) & set(pods)
        else None,
        ROLLOUT_TIMEOUT, "two new Ready replicas",
    )  # fmt: skip
    new_working, new_standby = roles(cluster, new_pods)
    left = DEADLINE + T_CREATE - (time.monotonic() - restarted)
    wait_for(
        lambda: failed_at_deadline(cluster, ns, name),
        max(left, T_CREATE), "the new working replica to fail the job at its deadline",
    )  # fmt: skip

    for pod in (standby, new_standby):
        assert summary(writes_by(log, pod, start)) == [], f"standby {pod} wrote"
    old_writes, new_writes = writes_by(log, working, start), writes_by(log, new_working, start)
    assert new_writes, f"the new working replica {new_working} wrote nothing"
    _, old_last = first_and_last(old_writes)
    new_first, _ = first_and_last(new_writes)
    assert old_last < new_first, (
        f"{working} wrote at {old_last}, after {new_working} began at {new_first}"
    )
    # The failure at the deadline is the new working replica's status write.
    assert any(
        e.get("verb") == "patch"
        and e.get("objectRef", {}).get("name") == name
        and e.get("objectRef", {}).get("subresource") == "status"
        for e in new_writes
    ), summary(new_writes)
