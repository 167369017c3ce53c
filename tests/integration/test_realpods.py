"""A user's first `helm install` and `kubectl apply`, on real pods.

The operator runs as a pod installed by our chart; KubeRay starts a real Ray head and two real
workers from the trainer-runtime image built from our Dockerfile; KubeRay's submitter submits the
driver; checkpoints land in MinIO. Then faults a user meets: a worker pod deleted mid-training,
the head pod deleted mid-training, and a suspend and resume.

Needs the real node (marker `realnode`), so it runs only inside the network namespace that
`make test` creates (e2e/netns/run.sh). The fault tests (marker `realpods_faults`) do not pass
yet and run only with `make test-faults`: docs/real-node.md says what each one hits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from _wait import wait_for
from conftest import REPO, KubeCluster
from realpods import (
    NODE,
    SYSTEM_NS,
    Images,
    Minio,
    built_images,
    condition,
    expose_minio,
    import_images,
    install_chart,
    pods_of,
    start_minio,
    trainjob_on_real_node,
    wait_condition,
)

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(1800)]

DIGITS = REPO / "examples" / "digits.yaml"
# Generous: a Ray head and two workers start in ~20 s on an idle 2-core machine, the digits
# loop trains an epoch in a few seconds; CI machines are shared.
START_TIMEOUT = 600
TRAIN_TIMEOUT = 900
# Epochs of the fault tests: enough that a fault lands mid-training (an epoch takes seconds).
FAULT_EPOCHS = 80


@dataclass(frozen=True)
class RealWorld:
    cluster: KubeCluster
    images: Images
    minio: Minio


@pytest.fixture(scope="module")
def real_world(kube_cluster: KubeCluster) -> Iterator[RealWorld]:
    if not os.environ.get("RAYTRAIN_NETNS"):
        pytest.fail(
            "the real-pod tests run inside the cluster's network namespace: "
            "bash e2e/netns/run.sh python -m pytest -m realnode (make test does this)",
            pytrace=False,
        )
    nodes = kube_cluster.get_json("nodes")["items"]
    assert NODE in {n["metadata"]["name"] for n in nodes}, "the cluster has no real node"
    images = built_images()
    import_images(images)
    minio = start_minio()
    try:
        expose_minio(kube_cluster, minio)
        install_chart(kube_cluster, images)
        yield RealWorld(kube_cluster, images, minio)
    finally:
        # The chart's operator watches every namespace: stop it, so that the tests after this
        # module see only the operators they start themselves.
        kube_cluster.kubectl(
            "delete", "deployment", "-n", SYSTEM_NS,
            "-l", "app.kubernetes.io/name=raytrain-operator", "--wait=true", "--timeout=120s",
            check=False, timeout=180,
        )  # fmt: skip
        minio.stop()


def _apply_digits(
    world: RealWorld, namespace: str, name: str, placement: str | None = None, **overrides: Any
) -> None:
    for doc in trainjob_on_real_node(DIGITS, name=name, **overrides):
        if placement and doc.get("kind") == "TrainJob":
            doc["spec"]["scaling"]["placementStrategy"] = placement
        world.cluster.apply(doc, namespace=namespace)


def _trainjob(world: RealWorld, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = world.cluster.get_json("trainjob", name, "-n", namespace)
    return obj


def _ray_pods(world: RealWorld, namespace: str, cluster_name: str) -> list[dict[str, Any]]:
    return pods_of(world.cluster, namespace, f"ray.io/cluster={cluster_name}")


def _running_ray_pods(world: RealWorld, namespace: str, name: str) -> list[dict[str, Any]] | None:
    tj = _trainjob(world, namespace, name)
    cluster_name = tj.get("status", {}).get("rayClusterName")
    if not cluster_name:
        return None
    pods = _ray_pods(world, namespace, cluster_name)
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    return running if len(running) >= 3 else None


def _checkpoints(world: RealWorld, run_name: str) -> set[str]:
    # Directories only: Ray Train keeps a checkpoint_manager_snapshot.json beside them.
    parts = [k.split("/") for k in world.minio.keys(f"checkpoints/{run_name}/")]
    return {p[2] for p in parts if len(p) > 3 and p[2].startswith("checkpoint_")}


def _metric(tj: dict[str, Any], name: str) -> str | None:
    for m in tj.get("status", {}).get("trainerStatus", {}).get("metrics", []):
        if m.get("name") == name:
            return str(m.get("value"))
    return None


def test_the_operator_runs_as_a_pod_on_the_real_node(real_world: RealWorld) -> None:
    pods = pods_of(real_world.cluster, SYSTEM_NS, "app.kubernetes.io/name=raytrain-operator")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    pod = pods[0]
    assert pod["spec"]["nodeName"] == NODE
    assert pod["status"]["phase"] == "Running"
    (container,) = pod["status"]["containerStatuses"]
    assert container["ready"] is True
    assert container["image"].endswith(real_world.images.operator_image.split("/", 1)[1])


def test_digits_trains_to_succeeded_on_real_pods(real_world: RealWorld, namespace: str) -> None:
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, "digits", epochs=3)

    running = wait_for(
        lambda: _running_ray_pods(real_world, namespace, "digits"),
        timeout=START_TIMEOUT,
        what="a Ray head and two workers Running",
    )
    assert {p["spec"]["nodeName"] for p in running} == {NODE}
    roles = sorted(p["metadata"]["labels"].get("ray.io/node-type", "") for p in running)
    assert roles.count("head") == 1 and roles.count("worker") == 2, roles

    # What a user types to wait for the end.
    waited = cluster.kubectl(
        "wait",
        "trainjob/digits",
        "-n",
        namespace,
        "--for=condition=Succeeded",
        f"--timeout={TRAIN_TIMEOUT}s",
        check=False,
        timeout=TRAIN_TIMEOUT + 60,
    )
    tj = _trainjob(real_world, namespace, "digits")
    assert waited.returncode == 0, (waited.stderr, json.dumps(tj.get("status"), indent=1))

    status = tj["status"]
    trainer = status["trainerStatus"]
    assert trainer["progressPercentage"] == 100
    assert trainer["epoch"] == 2
    assert float(_metric(tj, "accuracy") or 0) > 0.5
    run_name = trainer.get("runName") or status["checkpoint"]["latestURI"].split("/")[-2]
    latest = status["checkpoint"]["latestURI"]
    assert latest.startswith(f"s3://raytrain/checkpoints/{run_name}/checkpoint_")
    # numToKeep: 2 in the example: two checkpoints stay in the bucket.
    assert len(_checkpoints(real_world, run_name)) == 2

    logs = subprocess.run(
        [sys.executable, "-m", "raytrain_operator.cli", "logs", "digits", "-n", namespace],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert logs.returncode == 0, logs.stderr
    assert f"run {run_name}, attempt 0: 2 workers" in logs.stdout, logs.stdout[-3000:]
    assert f"run {run_name} finished" in logs.stdout, logs.stdout[-3000:]


def _wait_checkpoint(world: RealWorld, namespace: str, name: str, count: int) -> dict[str, Any]:
    return wait_for(
        lambda: (
            tj
            if (tj := _trainjob(world, namespace, name))
            .get("status", {})
            .get("checkpoint", {})
            .get("count", 0)
            >= count
            else None
        ),
        timeout=START_TIMEOUT + TRAIN_TIMEOUT,
        what=f"{count} checkpoint(s) of {name}",
    )


@pytest.mark.realpods_faults
def test_a_deleted_worker_pod_resumes_from_the_latest_checkpoint(
    real_world: RealWorld, namespace: str
) -> None:
    cluster = real_world.cluster
    # Enough epochs that the delete lands mid-training. SPREAD puts one training worker on each
    # worker pod (the head has no CPUs for them), so the deleted pod always holds one; with the
    # default PACK both could share the other pod and the delete would hit an idle Ray node.
    _apply_digits(real_world, namespace, "worker-kill", epochs=FAULT_EPOCHS, placement="SPREAD")
    tj = _wait_checkpoint(real_world, namespace, "worker-kill", 1)
    ray_cluster = tj["status"]["rayClusterName"]
    workers = [
        p
        for p in _ray_pods(real_world, namespace, ray_cluster)
        if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
    ]
    victim = workers[0]["metadata"]["name"]
    cluster.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
    before = _trainjob(real_world, namespace, "worker-kill")["status"]["trainerStatus"]["epoch"]
    assert before < FAULT_EPOCHS - 1, "training ended before the fault: raise FAULT_EPOCHS"

    done = wait_condition(cluster, namespace, "worker-kill", "Succeeded", TRAIN_TIMEOUT)
    # Ray Train restarted the worker group inside the same cluster (failure.maxFailures), so no
    # new RayJob was needed, and the group went on from a checkpoint, not from epoch 0.
    assert done["status"].get("restarts", 0) == 0
    assert done["status"]["trainerStatus"]["epoch"] == FAULT_EPOCHS - 1
    assert int(float(_metric(done, "start_epoch") or 0)) >= 1


@pytest.mark.realpods_faults
def test_a_deleted_head_pod_retries_and_continues_from_the_latest_checkpoint(
    real_world: RealWorld, namespace: str
) -> None:
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, "head-kill", epochs=FAULT_EPOCHS)
    tj = _wait_checkpoint(real_world, namespace, "head-kill", 1)
    first_rayjob = tj["status"]["rayJobName"]
    ray_cluster = tj["status"]["rayClusterName"]
    (head,) = [
        p
        for p in _ray_pods(real_world, namespace, ray_cluster)
        if p["metadata"]["labels"].get("ray.io/node-type") == "head"
    ]
    cluster.kubectl("delete", "pod", head["metadata"]["name"], "-n", namespace, "--wait=false")

    done = wait_condition(
        cluster, namespace, "head-kill", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT
    )
    status = done["status"]
    assert status["restarts"] >= 1
    assert status["rayJobName"] != first_rayjob
    assert status["trainerStatus"]["epoch"] == FAULT_EPOCHS - 1
    # The next attempt's run resumed: it started past epoch 0.
    assert int(float(_metric(done, "start_epoch") or 0)) >= 1


@pytest.mark.realpods_faults
def test_suspend_takes_a_checkpoint_removes_the_pods_and_resume_continues(
    real_world: RealWorld, namespace: str
) -> None:
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, "pause", epochs=FAULT_EPOCHS)
    tj = _wait_checkpoint(real_world, namespace, "pause", 1)
    ray_cluster = tj["status"]["rayClusterName"]
    cluster.kubectl(
        "patch", "trainjob", "pause", "-n", namespace, "--type=merge", "-p",
        '{"spec":{"suspend":true}}',
    )  # fmt: skip
    wait_condition(cluster, namespace, "pause", "Suspended", START_TIMEOUT)
    wait_for(
        lambda: not _ray_pods(real_world, namespace, ray_cluster),
        timeout=START_TIMEOUT,
        what="the suspended job's Ray pods gone",
    )
    suspended = _trainjob(real_world, namespace, "pause")
    assert suspended["status"]["checkpoint"]["count"] >= 1

    cluster.kubectl(
        "patch", "trainjob", "pause", "-n", namespace, "--type=merge", "-p",
        '{"spec":{"suspend":false}}',
    )  # fmt: skip
    done = wait_condition(cluster, namespace, "pause", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT)
    assert done["status"]["trainerStatus"]["epoch"] == FAULT_EPOCHS - 1
    assert int(float(_metric(done, "start_epoch") or 0)) >= 1
    suspended_cond = condition(done, "Suspended")
    assert suspended_cond is None or suspended_cond["status"] == "False"
