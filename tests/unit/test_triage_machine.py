"""A failed attempt's class decides its condition's reason, its message and whether to retry."""

from __future__ import annotations

from typing import Any

import pytest
from _factories import manifest, meta
from _passes import passed
from prometheus_client import REGISTRY
from test_status_machine import NOW, cond, rayjob, run, status_after
from test_triage import GLOO_TIMEOUT, NO_CHECKPOINT_DRIVER, USER_TRACEBACK, container, pod

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_operator import k8s
from raytrain_operator.handlers import reconcile
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status import machine as m
from raytrain_operator.status import triage
from raytrain_operator.status.conditions import find


def tj(**spec: Any) -> TrainJob:
    return TrainJob.model_validate(manifest(**spec))


def failed_report(message: str, reported: int = 0) -> dict[str, Any]:
    return {
        "attempt": 0,
        "trainerStatus": {"phase": "Failed", "message": message, "attempt": reported},
    }


OOM_POD = pod(
    containers=[
        container(
            state={"running": {}},
            lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}},
        )
    ]
)


def test_a_user_exception_fails_at_once_without_spending_retries() -> None:
    p = run(tj(backoffLimit=3), failed_report(USER_TRACEBACK), rayjob(deployment="Running"))
    assert p.phase == "Failed" and p.status["attempt"] == 0 and p.status["restarts"] == 0
    failed = cond(p, "Failed")
    assert failed["reason"] == "UserException"
    assert "KeyError" in failed["message"] and 'batch["label"]' in failed["message"]
    assert "spec.backoffLimit is not spent" in failed["message"]
    assert "3 of spec.backoffLimit 3 retries left unused" in failed["message"]
    assert p.attempt_failure is not None and p.attempt_failure.reason == "UserException"
    assert p.actions == []


def test_oomkilled_fails_at_once_naming_pod_exit_code_and_memory() -> None:
    rj = rayjob(deployment="Failed", job_status="FAILED", message="Job entrypoint failed")
    p = run(tj(backoffLimit=2), {"attempt": 0}, rj, attempt_pods=[OOM_POD])
    failed = cond(p, "Failed")
    assert p.phase == "Failed" and failed["reason"] == "OOMKilled"
    message = failed["message"]
    assert "digits-0-abc-worker-x" in message and "exit code 137" in message
    assert "resourcesPerWorker.memory (now 2Gi)" in message
    assert "Job entrypoint failed" in message  # what KubeRay said is kept beside it


def test_node_lost_is_retried_then_the_backoff_limit_names_the_class() -> None:
    lost = pod(phase="Failed", reason="NodeLost", message="Node node-a is unresponsive")
    # With spec.disruption.maxPreemptions spent, a lost node spends spec.backoffLimit.
    st: dict[str, Any] = {"attempt": 0, "restarts": 0, "preemptions": 10}
    rj = rayjob(deployment="Failed", job_status="FAILED")
    p = run(tj(backoffLimit=1), st, rj, attempt_pods=[lost])
    assert p.status["attempt"] == 1 and p.phase == "Pending"
    retrying = cond(p, "Reconciling")
    assert retrying["reason"] == "Retrying"
    assert retrying["message"].startswith("attempt 0 failed (NodeLost: pod digits-0-abc-worker-x")
    assert p.attempt_failure is not None and p.attempt_failure.infrastructure
    p2 = run(
        tj(backoffLimit=1), status_after(p, st), rayjob("digits-1", deployment="Failed"),
        attempt_pods=[lost],
    )  # fmt: skip
    failed = cond(p2, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and "(NodeLost:" in failed["message"]


def test_collective_timeout_is_retried_and_without_retries_is_the_reason() -> None:
    st = failed_report(f"training failed: worker 0: {GLOO_TIMEOUT}")
    p = run(tj(backoffLimit=1), st, rayjob(deployment="Running"))
    assert p.status["attempt"] == 1 and "CollectiveTimeout" in cond(p, "Running")["message"]
    p0 = run(tj(), st, rayjob(deployment="Running"))
    assert cond(p0, "Failed")["reason"] == "CollectiveTimeout"


def test_an_invalid_image_is_not_retried() -> None:
    bad = container(state={"waiting": {"reason": "InvalidImageName", "message": "bad"}})
    rj = rayjob(deployment="Failed", job_status="FAILED")
    p = run(tj(backoffLimit=2), {"attempt": 0}, rj, attempt_pods=[pod(containers=[bad])])
    assert cond(p, "Failed")["reason"] == "ImagePullFailed"
    assert "fix spec.image" in cond(p, "Failed")["message"]


def test_no_checkpoint_to_resume_from_fails_at_once_and_says_how_to_go_on() -> None:
    st = failed_report(NO_CHECKPOINT_DRIVER)
    st["checkpoint"] = {"latestURI": "s3://b/r/checkpoint_v"}
    p = run(tj(backoffLimit=3), st, rayjob(deployment="Running"))
    assert p.phase == "Failed" and p.status["attempt"] == 0 and p.status["restarts"] == 0
    failed = cond(p, "Failed")
    assert failed is not None and failed["reason"] == "CheckpointUnusable"
    message = failed["message"]
    assert message.startswith("attempt 0 failed (CheckpointUnusable): no checkpoint to resume")
    assert "s3://b/r/checkpoint_x: file state.pt is missing" in message
    assert "spec.resumeFrom.checkpoint naming a checkpoint that passes its check" in message
    assert "every attempt would meet the same checkpoints" in message
    assert "3 of spec.backoffLimit 3 retries left unused" in message
    # Not the usual "continue from its latest checkpoint": that is what just failed.
    assert "To continue from its latest checkpoint" not in message
    assert p.attempt_failure is not None and p.attempt_failure.reason == "CheckpointUnusable"
    event = reconcile.announce_failure(meta(), 0, p.attempt_failure)
    assert event.reason == "CheckpointUnusable"
    assert event.message.startswith("attempt 0 failed (workload): no checkpoint to resume")


def test_unknown_keeps_the_retries_and_the_words() -> None:
    p = run(tj(backoffLimit=1), failed_report("OOM"), rayjob(deployment="Running"))
    assert p.status["attempt"] == 1
    assert "Unknown: OOM;" in cond(p, "Reconciling")["message"]


def test_attempt_failed_says_when_the_pods_are_read() -> None:
    running = rayjob(deployment="Running", job_status="RUNNING")
    assert not m.attempt_failed({"attempt": 0}, running, 0)
    assert m.attempt_failed({"attempt": 0}, rayjob(deployment="Failed"), 0)
    assert m.attempt_failed(failed_report("x"), running, 0)
    assert not m.attempt_failed(failed_report("x", reported=1), running, 0)  # another attempt's
    assert not m.attempt_failed({"attempt": 0}, rayjob(deployment="ValidationFailed"), 0)
    assert not m.attempt_failed({"attempt": 0}, None, 0)
    done = {"attempt": 0, "conditions": [{"type": "Failed", "status": "True"}]}
    assert not m.attempt_failed(done, rayjob(deployment="Failed"), 0)
    assert find(run(tj(), done, None).status["conditions"], "Failed") is not None


def test_the_handler_reads_the_attempts_pods_and_announces_the_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    selectors: list[str] = []

    def list_pods(ns: str, selector: str) -> list[dict[str, Any]]:
        selectors.append(selector)
        return [OOM_POD]

    monkeypatch.setattr(k8s, "list_pods", list_pods)
    index = {("team-a", "digits-0"): [{"name": "digits-0-abc", "replicaFailure": None}]}
    pods, events = reconcile.attempt_evidence(PassState(), rayjob(), index, meta(), 0)
    assert pods == [OOM_POD] and events == []
    assert selectors == ["raytrain.dev/trainjob=digits,raytrain.dev/attempt=0"]

    labels = {"namespace": "team-a", "trainjob": "digits", "reason": "OOMKilled"}
    before = REGISTRY.get_sample_value("raytrain_attempt_failures_total", labels) or 0.0
    found = triage.classify(triage.Evidence({}, pods=pods))
    event = reconcile.announce_failure(meta(), 0, found)
    assert event.warning and event.reason == "OOMKilled"
    assert event.message.startswith("attempt 0 failed (workload): container ray-worker")
    after = REGISTRY.get_sample_value("raytrain_attempt_failures_total", labels)
    assert after == before + 1


def test_without_permission_to_list_pods_the_class_comes_from_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: None)
    quota = {"reason": "FailedCreateWorkerPod", "message": "exceeded quota: gpu"}
    index = {("team-a", "digits-0"): [{"name": "digits-0-abc", "replicaFailure": quota}]}
    pods, events = reconcile.attempt_evidence(PassState(), rayjob(), index, meta(), 0)
    assert pods == [] and events[0]["involvedObject"]["name"] == "digits-0-abc"
    p = run(tj(), {"attempt": 0}, rayjob(deployment="Failed"), attempt_events=events, now=NOW)
    assert cond(p, "Failed")["reason"] == "Unschedulable"


def test_one_pass_over_a_failed_attempt_reads_its_pods_and_warns_with_the_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import logging

    import kopf

    selectors: list[str] = []

    def list_pods(ns: str, selector: str) -> list[dict[str, Any]]:
        selectors.append(selector)
        return [OOM_POD]

    monkeypatch.setattr(k8s, "list_pods", list_pods)
    warned: list[tuple[str, str]] = []
    monkeypatch.setattr(kopf, "info", lambda *a, **kw: None)
    monkeypatch.setattr(
        kopf, "warn", lambda body, reason, message: warned.append((reason, message))
    )
    failed = rayjob(deployment="Failed", job_status="FAILED")
    failed["metadata"]["labels"] = {"raytrain.dev/attempt": "0"}
    body = {**manifest(backoffLimit=2), "status": {"attempt": 0, "restarts": 0}}
    patch = kopf.Patch()
    index = {("team-a", "digits"): [failed]}
    p = passed(patch, "resync", kopf.Body(body), logging.getLogger("t"), index, {})
    assert selectors == ["raytrain.dev/trainjob=digits,raytrain.dev/attempt=0"]
    assert cond(p, "Failed")["reason"] == "OOMKilled"
    assert patch["status"]["phase"] == "Failed"
    # The attempt's own Event, beside the one of the Failed condition (same reason).
    assert warned[0][0] == "OOMKilled"
    assert warned[0][1].startswith("attempt 0 failed (workload): container ray-worker")
    assert [r for r, _ in warned] == ["OOMKilled", "OOMKilled"]
    # A running attempt's pods are not listed.
    running = rayjob(deployment="Running", job_status="RUNNING")
    running["metadata"]["labels"] = {"raytrain.dev/attempt": "0"}
    body = {**manifest(), "status": {"attempt": 0, "restarts": 0}}
    passed(kopf.Patch(), "resync", kopf.Body(body), logging.getLogger("t"),
        {("team-a", "digits"): [running]}, {},
    )  # fmt: skip
    assert len(selectors) == 1


IMAGE_POD = pod(
    phase="Pending",
    containers=[
        container(
            state={
                "waiting": {
                    "reason": "ErrImageNeverPull",
                    "message": 'Container image "raytrain/trainer-runtime:0.1.0" is not present '
                    "with pull policy of Never",
                }
            }
        )
    ],
)


def test_a_deadline_that_ends_a_stuck_attempt_says_what_held_it() -> None:
    from datetime import timedelta

    started = {"attempt": 0, "startTime": m.rfc3339(NOW - timedelta(seconds=120))}
    job = tj(activeDeadlineSeconds=60)
    assert m.deadline_passed(started, job, NOW)
    assert not m.deadline_passed(started, tj(activeDeadlineSeconds=600), NOW)
    assert not m.deadline_passed({"attempt": 0}, job, NOW)
    rj = rayjob(deployment="Initializing")
    p = run(job, started, rj, attempt_pods=[IMAGE_POD])
    failed = cond(p, "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert "While it ran, ImagePullFailed: container ray-worker" in failed["message"]
    assert "ErrImageNeverPull" in failed["message"]
    plain = cond(run(job, started, rj), "Failed")
    assert "While it ran" not in plain["message"]


def test_a_starting_cluster_whose_image_cannot_be_pulled_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import timedelta

    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: [IMAGE_POD])
    rj = rayjob(deployment="Initializing", startTime=m.rfc3339(NOW - timedelta(seconds=30)))
    problem = reconcile.cluster_problem(PassState(), rj, {}, meta(), 0, NOW, trainjob=tj())
    assert problem is not None and problem[0] == "ImagePullFailed"
    assert "ErrImageNeverPull" in problem[1] and "fix spec.image" in problem[1]
    p = run(tj(), {"attempt": 0}, rj, cluster_problem=problem)
    assert "ErrImageNeverPull" in cond(p, "Reconciling")["message"]


def test_one_pass_at_the_deadline_reads_the_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging
    from datetime import timedelta

    import kopf

    from raytrain_operator.handlers import apply

    selectors: list[str] = []

    def list_pods(ns: str, selector: str) -> list[dict[str, Any]]:
        selectors.append(selector)
        return [IMAGE_POD]

    monkeypatch.setattr(k8s, "list_pods", list_pods)
    monkeypatch.setattr(apply, "run", lambda *a, **kw: [])
    monkeypatch.setattr(kopf, "info", lambda *a, **kw: None)
    monkeypatch.setattr(kopf, "warn", lambda *a, **kw: None)
    stuck = rayjob(deployment="Running")  # not starting: cluster_problem lists no pods
    stuck["metadata"]["labels"] = {"raytrain.dev/attempt": "0"}
    started = m.rfc3339(m.now_utc() - timedelta(seconds=120))
    body = {
        **manifest(activeDeadlineSeconds=60),
        "status": {"attempt": 0, "restarts": 0, "startTime": started},
    }
    body["metadata"]["generation"] = 7  # parse_cached keys on the generation, not the spec
    index = {("team-a", "digits"): [stuck]}
    p = passed(kopf.Patch(), "resync", kopf.Body(body), logging.getLogger("t"), index)
    assert selectors == ["raytrain.dev/trainjob=digits,raytrain.dev/attempt=0"]
    assert "While it ran, ImagePullFailed" in cond(p, "Failed")["message"]


def test_the_failure_event_says_whose_fault_or_that_it_is_not_known() -> None:
    from raytrain_operator.handlers.reconcile import announce_failure
    from raytrain_operator.status.triage import FailureClass, Triage

    def said(cls: FailureClass) -> str:
        return announce_failure(meta(), 0, Triage(cls, "m")).message

    assert said(FailureClass.NODE_LOST) == "attempt 0 failed (infrastructure): m"
    assert said(FailureClass.USER_EXCEPTION) == "attempt 0 failed (workload): m"
    assert said(FailureClass.HUNG) == "attempt 0 failed (cause not known): m"
    assert said(FailureClass.UNKNOWN) == "attempt 0 failed (cause not known): m"
