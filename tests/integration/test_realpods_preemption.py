"""Preemptions on real pods: an eviction and a node drain mid-training lose at most the epoch in
flight (digits reports and checkpoints every epoch), and a preempted attempt spends
spec.disruption.maxPreemptions, not spec.backoffLimit.

- A worker evicted through the Eviction API: its preStop hook drains its Ray node, Ray Train
  restarts the worker group in the same cluster from the latest checkpoint; no new RayJob.
- The head evicted through the Eviction API (what a drain does to it): the attempt ends, the
  next one resumes from the latest checkpoint; status.preemptions 1, status.restarts 0, with
  spec.backoffLimit 0.
- `kubectl drain` of the node with the job's pods selected: kubectl asks for every pod at once
  and the budget lets one Ray pod go. A worker first: its replacement cannot be scheduled on
  the cordoned node, so the drain evicts no second pod before its timeout. The head first: the
  attempt ends as a preemption and its pods are let go. After the uncordon the job resumes from
  its latest checkpoint and succeeds, with no retry spent.

Marker `realpods_preemption`: `make test-faults` runs them, `make test` does not (they add about
20 minutes).

Needs the real node (marker `realnode`), like test_realpods.py, whose module fixture it uses.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from kubernetes import client, config
from realpods import NODE, wait_condition
from test_realpods import (
    FAULT_EPOCHS,
    START_TIMEOUT,
    TRAIN_TIMEOUT,
    RealWorld,
    _apply_digits,
    _ray_pods,
    _record,
    _trainjob,
    _wait_checkpoint,
    _watch_resume,
    real_world,
)

pytestmark = [
    pytest.mark.realnode,
    pytest.mark.realpods_faults,
    pytest.mark.realpods_preemption,
    pytest.mark.timeout(2400),
]
__all__ = ["real_world"]  # fixture used by name


def _evict(cluster: KubeCluster, namespace: str, name: str) -> None:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    core.create_namespaced_pod_eviction(name, namespace, body)


def _role_pods(world: RealWorld, namespace: str, name: str, role: str) -> list[dict[str, Any]]:
    tj = _trainjob(world, namespace, name)
    pods = _ray_pods(world, namespace, tj["status"]["rayClusterName"])
    return [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == role]


def _epoch(world: RealWorld, namespace: str, name: str) -> int:
    return int(_trainjob(world, namespace, name)["status"]["trainerStatus"]["epoch"])


def test_an_evicted_worker_drains_and_resumes_in_the_same_cluster(
    real_world: RealWorld, namespace: str
) -> None:
    name = "evict-worker"
    _apply_digits(real_world, namespace, name, epochs=FAULT_EPOCHS, placement="SPREAD")
    _wait_checkpoint(real_world, namespace, name, 1)
    victim = _role_pods(real_world, namespace, name, "worker")[0]["metadata"]["name"]
    before = _epoch(real_world, namespace, name)
    faulted_at = time.monotonic()
    _evict(real_world.cluster, namespace, victim)
    assert before < FAULT_EPOCHS - 1, "training ended before the fault: raise FAULT_EPOCHS"

    seconds, resumed_at = _watch_resume(real_world, namespace, name, faulted_at, TRAIN_TIMEOUT)
    _record("worker pod evicted", before, resumed_at, seconds, new_rayjob=False)
    assert resumed_at >= before + 1, (before, resumed_at)
    done = wait_condition(real_world.cluster, namespace, name, "Succeeded", TRAIN_TIMEOUT)
    status = done["status"]
    assert status.get("restarts", 0) == 0 and status.get("preemptions", 0) == 0
    assert status["rayJobName"] == f"{name}-0"


def test_an_evicted_head_is_a_preemption_not_a_retry(real_world: RealWorld, namespace: str) -> None:
    name = "evict-head"
    _apply_digits(real_world, namespace, name, epochs=FAULT_EPOCHS, backoffLimit=0)
    _wait_checkpoint(real_world, namespace, name, 1)
    (head,) = _role_pods(real_world, namespace, name, "head")
    before = _epoch(real_world, namespace, name)
    faulted_at = time.monotonic()
    _evict(real_world.cluster, namespace, head["metadata"]["name"])

    seconds, resumed_at = _watch_resume(
        real_world, namespace, name, faulted_at, START_TIMEOUT + TRAIN_TIMEOUT
    )
    _record("head pod evicted", before, resumed_at, seconds, new_rayjob=True)
    assert resumed_at >= before + 1, (before, resumed_at)
    done = wait_condition(real_world.cluster, namespace, name, "Succeeded", TRAIN_TIMEOUT)
    status = done["status"]
    assert status["preemptions"] == 1 and status.get("restarts", 0) == 0
    assert status["attempt"] == 1


def test_a_drain_takes_one_pod_and_waits(real_world: RealWorld, namespace: str) -> None:
    name = "drain"
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, name, epochs=FAULT_EPOCHS, placement="SPREAD")
    _wait_checkpoint(real_world, namespace, name, 1)
    ray_cluster = _trainjob(real_world, namespace, name)["status"]["rayClusterName"]
    before = {p["metadata"]["name"] for p in _ray_pods(real_world, namespace, ray_cluster)}
    epoch = _epoch(real_world, namespace, name)
    faulted_at = time.monotonic()
    try:
        drained = cluster.kubectl(
            "drain", NODE, f"--pod-selector=raytrain.dev/trainjob={name}",
            "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s",
            check=False, timeout=240,
        )  # fmt: skip
        out = drained.stdout + drained.stderr
        # kubectl asks for every pod at once; the budget lets one Ray pod go and refuses the
        # others while the cluster runs.
        assert "violate the pod's disruption budget" in out, out
        left = {p["metadata"]["name"] for p in _ray_pods(real_world, namespace, ray_cluster)}
        status = _trainjob(real_world, namespace, name)["status"]
        if drained.returncode != 0:
            # A worker went first: its replacement cannot run on the cordoned node, so the
            # budget refuses every further eviction until the drain gives up.
            assert len(before - left) <= 1, before - left
        else:
            # The head went first: that ends the attempt (a preemption, not a retry), and the
            # ended attempt's pods are no longer held by the budget.
            assert wait_for(
                lambda: (
                    (t := _trainjob(real_world, namespace, name))["status"].get("preemptions") and t
                ),
                timeout=120,
                what="the head's eviction counted as a preemption",
            ), status
    finally:
        cluster.kubectl("uncordon", NODE, check=False)

    seconds, resumed_at = _watch_resume(
        real_world, namespace, name, faulted_at, START_TIMEOUT + TRAIN_TIMEOUT
    )
    new_rayjob = _trainjob(real_world, namespace, name)["status"]["rayJobName"] != f"{name}-0"
    _record("node drained (job's pods)", epoch, resumed_at, seconds, new_rayjob=new_rayjob)
    assert resumed_at >= epoch + 1, (epoch, resumed_at)
    done = wait_condition(cluster, namespace, name, "Succeeded", TRAIN_TIMEOUT)
    assert done["status"].get("restarts", 0) == 0
