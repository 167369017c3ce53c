"""Every failure reaches a condition with its own words: nothing leaves a job Pending silently."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf
import pytest
from _factories import UID, manifest, meta, trainjob

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.timefmt import rfc3339
from raytrain_operator import k8s
from raytrain_operator.builders import children
from raytrain_operator.handlers import apply, rayjobs, reconcile
from raytrain_operator.handlers.state import PassState
from raytrain_operator.k8s import ApiException
from raytrain_operator.status import machine as m
from raytrain_operator.status.conditions import find

NOW = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)
LOG = logging.getLogger("test")


def cond(p: m.Plan, type_: str) -> dict[str, Any]:
    found = find(p.status["conditions"], type_)
    assert found is not None, f"no {type_} condition in {p.status['conditions']}"
    return dict(found)


def plan(rj: dict[str, Any] | None = None, **kw: Any) -> m.Plan:
    spec = kw.pop("spec", {})
    return m.plan(
        m.Observation(
            meta=meta(), trainjob=TrainJob.model_validate(manifest(**spec)),
            status=kw.pop("status", {"attempt": 0}), now=NOW, rayjob=rj, **kw,
        )
    )  # fmt: skip


def rayjob(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "digits-0", "ownerReferences": [{"uid": UID}], "annotations": {}},
        "spec": {"suspend": False},
        "status": status,
    }


# --------------------------------------------------------------------------- builders, parse


def test_a_builder_bug_is_the_operators_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not InvalidSpec: the user cannot fix a bug (test_operator_error.py has the rest)."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError("'str' object has no attribute 'get'")

    monkeypatch.setattr(reconcile, "build_rayjob", broken)
    tj, problem, reason = reconcile.parse_cached(PassState(), manifest(), logger=LOG)
    assert tj is not None and problem is not None and reason == "OperatorError"
    assert "AttributeError" in problem and "has no attribute 'get'" in problem
    p = plan(spec_problem=problem, spec_problem_reason=reason)
    assert p.phase == "Stalled" and cond(p, "Stalled")["reason"] == "OperatorError"


@pytest.mark.usefixtures("no_fence")
def test_a_builder_breaking_at_create_time_stalls(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ArithmeticError("decimal overflow")

    monkeypatch.setattr(children, "build_contract_configmap", broken)
    with pytest.raises(apply.Rejected) as caught:
        apply.run(
            PassState(), [m.EnsureChildren(0, False)], trainjob(), meta(), kopf.Patch(), None, LOG
        )
    assert caught.value.reason == "OperatorError" and "decimal overflow" in caught.value.message


# --------------------------------------------------------------------------- API refusals


def api_error(status: int, message: str) -> ApiException:
    exc = ApiException(status=status, reason="Unprocessable Entity")
    exc.body = json.dumps({"kind": "Status", "code": status, "message": message})
    return exc


@pytest.mark.usefixtures("no_fence")
@pytest.mark.parametrize(
    ("status", "reason"), [(422, "ChildRejected"), (400, "ChildRejected"), (403, "ChildForbidden")]
)
def test_a_refused_child_carries_the_api_servers_message(
    monkeypatch: pytest.MonkeyPatch, status: int, reason: str
) -> None:
    words = 'RayJob.ray.io "digits-0" is invalid: metadata.labels: Invalid value: "Team A"'

    def create(body: dict[str, Any]) -> Any:
        if body["kind"] == "RayJob":
            raise api_error(status, words)
        return body

    monkeypatch.setattr(k8s, "create", create)
    with pytest.raises(apply.Rejected) as caught:
        apply.ensure_children(
            PassState(), trainjob(), meta(), m.EnsureChildren(0, False), None, LOG
        )
    assert caught.value.reason == reason
    assert words in caught.value.message and f"({status})" in caught.value.message
    p = plan(rejected=(caught.value.reason, caught.value.message))
    assert p.phase == "Stalled"
    assert cond(p, "Stalled")["reason"] == reason and words in cond(p, "Stalled")["message"]
    assert cond(p, "Created")["status"] == "False"


@pytest.mark.usefixtures("no_fence")
def test_a_webhooks_denial_is_not_called_a_missing_permission(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A policy engine's webhook answers 403, like a missing RBAC permission does.
    words = (
        'admission webhook "validation.gatekeeper.sh" denied the request: [require-team] '
        'you must provide labels: {"cost-center"}'
    )

    def create(body: dict[str, Any]) -> Any:
        if body["kind"] == "RayJob":
            raise api_error(403, words)
        return body

    monkeypatch.setattr(k8s, "create", create)
    with pytest.raises(apply.Rejected) as caught:
        apply.ensure_children(
            PassState(), trainjob(), meta(), m.EnsureChildren(0, False), None, LOG
        )
    assert caught.value.reason == "ChildRejected"
    assert (
        words in caught.value.message and "admission webhook of the cluster" in caught.value.message
    )
    assert "permission" not in caught.value.message


@pytest.mark.usefixtures("no_fence")
def test_kueue_refusing_slices_names_the_field_and_its_feature_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Kueue's webhook (0.17 and 0.19 word it alike), its ElasticJobsViaWorkloadSlices gate off,
    # on a queued RayJob that runs Ray's autoscaler.
    words = (
        'admission webhook "vrayjob.kb.io" denied the request: '
        "spec.rayClusterSpec.enableInTreeAutoscaling: Invalid value: true: a kueue managed "
        "job should only use autoscaling when workload slicing is enabled"
    )

    def create(body: dict[str, Any]) -> Any:
        if body["kind"] == "RayJob":
            raise api_error(403, words)  # a webhook's denial is a 403, as Kueue's is
        return body

    monkeypatch.setattr(k8s, "create", create)
    tj = trainjob(
        scaling={"minWorkers": 1, "maxWorkers": 3, "kueueWorkloadSlices": True},
        queueName="team-a",
    )
    with pytest.raises(apply.Rejected) as caught:
        apply.ensure_children(PassState(), tj, meta(), m.EnsureChildren(0, False), None, LOG)
    message = caught.value.message
    assert words in message and caught.value.reason == "ChildRejected"
    assert "permission" not in message
    assert "spec.scaling.kueueWorkloadSlices" in message
    assert "ElasticJobsViaWorkloadSlices" in message and "remove kueueWorkloadSlices" in message


@pytest.mark.usefixtures("no_fence")
def test_no_rayjob_api_says_kuberay_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def create(body: dict[str, Any]) -> Any:
        if body["kind"] == "RayJob":
            raise api_error(404, "the server could not find the requested resource")
        return body

    monkeypatch.setattr(k8s, "create", create)
    with pytest.raises(apply.Rejected) as caught:
        apply.ensure_children(
            PassState(), trainjob(), meta(), m.EnsureChildren(0, False), None, LOG
        )
    assert caught.value.reason == "KubeRayMissing" and "install" in caught.value.message


@pytest.mark.usefixtures("no_fence")
def test_a_passing_error_is_not_turned_into_a_condition(monkeypatch: pytest.MonkeyPatch) -> None:
    def create(body: dict[str, Any]) -> Any:
        raise ApiException(status=500, reason="Internal Server Error")

    monkeypatch.setattr(k8s, "create", create)
    with pytest.raises(ApiException):
        apply.ensure_children(
            PassState(), trainjob(), meta(), m.EnsureChildren(0, False), None, LOG
        )


# --------------------------------------------------------------------------- KubeRay


def test_kuberay_validation_failed_fails_with_its_message_without_retries() -> None:
    words = "The RayJob spec is invalid: metadata.name must be a DNS-1035 label"
    rj = rayjob(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", message=words)
    p = plan(rj, spec={"backoffLimit": 3})
    assert p.phase == "Failed"
    failed = cond(p, "Failed")
    assert failed["reason"] == "RayJobValidationFailed" and words in failed["message"]
    assert p.status["attempt"] == 0 and p.actions == []


def test_replica_failure_of_the_raycluster_reaches_reconciling() -> None:
    body = {
        "conditions": [
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreateWorkerPod",
                "message": 'pods "digits-0-abc-worker-x" is forbidden: exceeded quota: gpu',
            }
        ],
        "desiredWorkerReplicas": 2,
        "readyWorkerReplicas": 0,
    }
    entries = asyncio.run(
        rayjobs.rayclusters_by_rayjob(
            namespace="team-a",
            name="digits-0-abc",
            meta=kopf.Meta({"metadata": {"labels": {rayjobs.ORIGINATED_FROM: "digits-0"}}}),
            status=body,
        )
    )
    index_entry = {key: [value] for key, value in entries.items()}  # as kopf's index holds it
    rj = rayjob(jobDeploymentStatus="Initializing", rayClusterName="digits-0-abc")
    problem = reconcile.cluster_problem(
        PassState(), rj, index_entry, meta(), 0, NOW, trainjob=trainjob()
    )
    assert problem is not None and problem[0] == "ReplicaFailure"
    p = plan(rj, cluster_problem=problem)
    reconciling = cond(p, "Reconciling")
    assert "exceeded quota: gpu" in reconciling["message"]
    assert "FailedCreateWorkerPod" in reconciling["message"]


def _unschedulable_pod(name: str, words: str) -> dict[str, Any]:
    """A pod the scheduler refused, with its words."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": words,
    }
    return {"metadata": {"name": name}, "status": {"conditions": [condition]}}


def test_a_host_network_worker_refused_for_its_ports_gets_advice_in_reconciling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    words = "0/5 nodes are available: 1 node(s) didn't have free ports for the requested pod ports"
    pods = [{**_unschedulable_pod("digits-0-abc-worker-y", words), "spec": {"hostNetwork": True}}]
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: pods)
    started = rfc3339(NOW - timedelta(seconds=30))
    rj = rayjob(jobDeploymentStatus="Initializing", startTime=started)
    problem = reconcile.cluster_problem(PassState(), rj, {}, meta(), 0, NOW, trainjob=trainjob())
    assert problem is not None and problem[0] == "Unschedulable"
    assert words in problem[1] and "spec.scaling.workersPerPod" in problem[1], problem


def test_unschedulable_pods_reach_reconciling_with_the_schedulers_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    words = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pods = [
        {
            "metadata": {"name": "digits-0-abc-head"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]},
        },
        _unschedulable_pod("digits-0-abc-worker-x", words),
    ]
    selectors: list[str] = []

    def list_pods(ns: str, selector: str) -> list[dict[str, Any]]:
        selectors.append(selector)
        return pods

    monkeypatch.setattr(k8s, "list_pods", list_pods)
    started = rfc3339(NOW - timedelta(seconds=30))
    rj = rayjob(jobDeploymentStatus="Initializing", startTime=started)
    job = trainjob()
    problem = reconcile.cluster_problem(PassState(), rj, {}, meta(), 0, NOW, trainjob=job)
    assert problem == ("Unschedulable", f"pod digits-0-abc-worker-x cannot be scheduled: {words}")
    assert selectors == ["raytrain.dev/trainjob=digits,raytrain.dev/attempt=0"]
    p = plan(rj, cluster_problem=problem)
    assert words in cond(p, "Reconciling")["message"]
    # a cluster that has just started is not looked at yet; a Running one never
    fresh = rayjob(jobDeploymentStatus="Initializing", startTime=rfc3339(NOW))
    running = rayjob(jobDeploymentStatus="Running")
    for rj in (fresh, running):
        assert reconcile.cluster_problem(PassState(), rj, {}, meta(), 0, NOW, trainjob=job) is None
    assert len(selectors) == 1


def test_a_pod_the_kubelet_cannot_start_for_a_missing_secret_stalls_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator reads no Secret by default: the kubelet's CreateContainerConfigError is
    where a missing credentials Secret shows. The job is Stalled with the field to fix, its
    RayJob kept (nothing deleted), and the condition goes once the pods start."""
    words = 'secret "digits-s3" not found'
    waiting = {"reason": "CreateContainerConfigError", "message": words}
    pods = [
        {
            "metadata": {"name": "digits-0-abc-head-x"},
            "status": {"containerStatuses": [{"name": "ray-head", "state": {"waiting": waiting}}]},
        }
    ]
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: pods)
    rj = rayjob(jobDeploymentStatus="Initializing", startTime=rfc3339(NOW - timedelta(seconds=30)))
    problem = reconcile.cluster_problem(PassState(), rj, {}, meta(), 0, NOW, trainjob=trainjob())
    assert problem is not None and problem[0] == "CredentialsNotFound", problem
    p = plan(rj, cluster_problem=problem)
    assert p.phase == "Stalled"
    stalled = cond(p, "Stalled")
    assert stalled["reason"] == "CredentialsNotFound"
    assert stalled["message"].startswith("spec.storage.s3.credentialsSecret.name: Secret "), stalled
    assert not any(isinstance(a, m.DeleteRayJob) for a in p.actions), p.actions
    # The Secret created, the kubelet starts the containers: the next pass finds nothing.
    pods[0]["status"] = {"containerStatuses": [{"name": "ray-head", "state": {"running": {}}}]}
    problem = reconcile.cluster_problem(PassState(), rj, {}, meta(), 0, NOW, trainjob=trainjob())
    assert problem is None
    after = plan(rj, status=p.status)
    assert after.phase != "Stalled" and find(after.status["conditions"], "Stalled") is None


def test_without_permission_to_list_pods_nothing_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def forbidden(ns: str, selector: str) -> None:
        calls.append(selector)

    monkeypatch.setattr(k8s, "list_pods", forbidden)
    rj = rayjob(jobDeploymentStatus="Initializing", startTime=rfc3339(NOW - timedelta(minutes=5)))
    state = PassState()
    assert reconcile.cluster_problem(state, rj, {}, meta(), 0, NOW, trainjob=trainjob()) is None
    assert reconcile.cluster_problem(state, rj, {}, meta(), 0, NOW, trainjob=trainjob()) is None
    assert len(calls) == 1  # a 403 is not asked again on every pass
