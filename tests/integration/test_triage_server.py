"""A failed attempt says why, against the real control plane (its scheduler, KubeRay, KWOK).

Workers that ask for more memory than any fake node has stay Pending with the scheduler's own
PodScheduled=False/Unschedulable condition: a real Unschedulable, no real node needed. The
attempt is then failed the way the runtime reports it; the class must come from the pods the
operator reads, not from that report. A user exception fails the job without a retry.
"""

from __future__ import annotations

import re
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
    events_of,
    get,
    names,
    operator,
    runtime_report,
    secret,
    trainjob,
    utc_now,
    wait_condition,
)

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures used by name


def failed_report(message: str) -> dict[str, Any]:
    return {"phase": "Failed", "attempt": 0, "message": message, "lastUpdatedTime": utc_now()}


def _unschedulable_pods(cluster: KubeCluster, ns: str, name: str) -> list[dict[str, Any]]:
    selector = f"raytrain.dev/trainjob={name},raytrain.dev/attempt=0"
    found = []
    for pod in cluster.get_json("pods", "-n", ns, "-l", selector)["items"]:
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                found.append(dict(pod))
    return found


def _unschedulable_pod(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    pods = _unschedulable_pods(cluster, ns, name)
    return pods[0] if pods else None


def test_workers_no_node_can_hold_fail_the_attempt_as_unschedulable(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "unplaced"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    # Every fake node has 256Gi; a worker asking for 1Ti can never be placed.
    scaling = {"numWorkers": 2, "resourcesPerWorker": {"cpu": "1", "memory": "1Ti"}}
    create(kube_cluster, ns, trainjob(name, scaling=scaling, backoffLimit=0))
    pod = wait_for(
        lambda: _unschedulable_pod(kube_cluster, ns, name), T_KUBERAY, "a Pending worker pod"
    )
    words = next(c["message"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "Insufficient memory" in words, words

    # What a runtime says when it ends without naming a cause.
    runtime_report(kube_cluster, ns, name, failed_report("the Ray job ended"))
    failed = wait_condition(kube_cluster, ns, name, "Failed")
    assert failed["reason"] == "Unschedulable", failed
    # Both workers are Pending for the same reason; the message may name either of them.
    named = re.search(r"pod (\S+) cannot be scheduled", failed["message"])
    assert named, failed["message"]
    pending = {p["metadata"]["name"] for p in _unschedulable_pods(kube_cluster, ns, name)}
    assert named.group(1) in pending, (named.group(1), pending)
    assert named.group(1).startswith(f"{name}-0-") and "-workers-worker-" in named.group(1)
    assert words in failed["message"]
    assert "the Ray job ended" in failed["message"]

    def attempt_event() -> dict[str, Any] | None:
        for event in events_of(kube_cluster, ns, name):
            if event["reason"] == "Unschedulable" and event["message"].startswith(
                "attempt 0 failed (infrastructure)"
            ):
                return event
        return None

    event = wait_for(attempt_event, T_CREATE, "the attempt's Unschedulable Event")
    assert event["type"] == "Warning"
    sample = (
        f'raytrain_attempt_failures_total{{namespace="{ns}",reason="Unschedulable",'
        f'trainjob="{name}"}} 1.0'
    )
    assert sample in operator.metrics(), operator.metrics()


USER_TRACEBACK = """training failed: worker 0: KeyError: 'label'
Traceback (most recent call last):
  File "/app/train.py", line 41, in train_loop_per_worker
    y = batch["label"]
KeyError: 'label'"""


def test_a_user_exception_fails_without_spending_the_backoff_limit(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "buggy"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name, backoffLimit=3))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    runtime_report(kube_cluster, ns, name, failed_report(USER_TRACEBACK))
    failed = wait_condition(kube_cluster, ns, name, "Failed")
    assert failed["reason"] == "UserException", failed
    assert 'y = batch["label"]' in failed["message"]
    assert "spec.backoffLimit is not spent" in failed["message"]
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert (status["attempt"], status["restarts"]) == (0, 0)
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [
        f"{name}-0"
    ]


def test_workers_that_never_start_hit_the_pre_running_deadline(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "stuck"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    scaling = {"numWorkers": 2, "resourcesPerWorker": {"cpu": "1", "memory": "1Ti"}}
    create(kube_cluster, ns, trainjob(name, scaling=scaling, preRunningDeadlineSeconds=30))
    wait_for(lambda: _unschedulable_pod(kube_cluster, ns, name), T_KUBERAY, "a Pending worker")
    failed = wait_condition(kube_cluster, ns, name, "Failed", timeout=T_KUBERAY)
    assert failed["reason"] == "PreRunningDeadlineExceeded", failed
    assert "spec.preRunningDeadlineSeconds (30)" in failed["message"]
    assert "Insufficient memory" in failed["message"], failed["message"]
    wait_for(
        lambda: names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [],
        T_CREATE,
        "the stuck attempt's RayJob deleted",
    )


def test_workers_a_resource_quota_refuses_fail_the_attempt_as_unschedulable(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    """A ResourceQuota that admits the head pod and no worker: KubeRay's pod creates are
    refused by the API server itself, and the RayCluster's ReplicaFailure carries its words."""
    ns, name = namespace, "overquota"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "one-pod"},
        "spec": {"hard": {"pods": "1"}},
    }
    kube_cluster.apply(quota, namespace=ns)
    create(kube_cluster, ns, trainjob(name, backoffLimit=0))

    def refused() -> dict[str, Any] | None:
        for rc in kube_cluster.get_json("rayclusters", "-n", ns)["items"]:
            for cond in rc.get("status", {}).get("conditions") or []:
                if cond.get("type") == "ReplicaFailure" and "exceeded quota" in cond.get(
                    "message", ""
                ):
                    return dict(cond)
        return None

    refusal = wait_for(refused, T_KUBERAY, "the RayCluster's ReplicaFailure: exceeded quota")
    runtime_report(kube_cluster, ns, name, failed_report("the Ray job ended"))
    failed = wait_condition(kube_cluster, ns, name, "Failed")
    assert failed["reason"] == "Unschedulable", failed
    assert "a ResourceQuota refuses the pods" in failed["message"], failed["message"]
    assert "exceeded quota" in failed["message"] and "one-pod" in failed["message"], refusal
