"""spec.retryPolicy: the model refuses what it cannot mean, the machine merges it over the default
policy, and a change to it is applied at once without touching the running attempt."""

from __future__ import annotations

from typing import Any

import pytest
from _factories import manifest, meta
from pydantic import ValidationError
from test_status_machine import NOW, cond, rayjob, run, status_after
from test_triage import NO_CHECKPOINT_DRIVER, USER_TRACEBACK, container, pod
from test_triage_machine import OOM_POD, failed_report

from raytrain_contract.api.v1alpha1 import FAILURE_CLASSES, TrainJob
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.status import machine as m
from raytrain_operator.status import triage


def tj(**spec: Any) -> TrainJob:
    return TrainJob.model_validate(manifest(**spec))


def test_the_api_names_every_failure_class_and_only_those() -> None:
    assert set(FAILURE_CLASSES) == {c.value for c in triage.FailureClass}
    assert set(FAILURE_CLASSES) == set(triage.DEFAULT_POLICY["classes"])


def test_an_unknown_class_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ValidationError) as err:
        tj(retryPolicy={"classes": {"OOMKilled": True, "Oom": True}})
    text = str(err.value)
    assert "spec.retryPolicy.classes: unknown class Oom" in text
    assert "UserException" in text and "CollectiveTimeout" in text


@pytest.mark.parametrize("code", [-1, 256])
def test_an_exit_code_outside_0_255_is_refused(code: int) -> None:
    with pytest.raises(ValidationError):
        tj(retryPolicy={"exitCodes": [{"code": code, "retry": True}]})


def test_an_exit_code_listed_twice_is_refused() -> None:
    with pytest.raises(ValidationError, match="code 75 is listed more than once"):
        tj(retryPolicy={"exitCodes": [{"code": 75, "retry": True}, {"code": 75, "retry": False}]})


def test_unset_keys_keep_the_defaults_and_exit_codes_win() -> None:
    job = tj(
        retryPolicy={"classes": {"OOMKilled": True}, "exitCodes": [{"code": 3, "retry": False}]}
    )
    policy = m.retry_policy(job)
    assert policy["classes"]["OOMKilled"] is True
    assert policy["classes"]["UserException"] is False  # the default, left alone
    assert policy["classes"]["NodeLost"] is True
    assert policy["exitCodes"] == {3: False}
    assert triage.retry_decision(triage.FailureClass.NODE_LOST, 3, policy) is False
    assert m.retry_policy(tj()) == triage.DEFAULT_POLICY


def test_a_user_exception_retried_by_policy_spends_the_backoff_limit() -> None:
    job = tj(backoffLimit=1, retryPolicy={"classes": {"UserException": True}})
    st: dict[str, Any] = {"attempt": 0, "restarts": 0, **failed_report(USER_TRACEBACK)}
    p = run(job, st, rayjob(deployment="Running"))
    assert p.phase == "Pending" and p.status["attempt"] == 1 and p.status["restarts"] == 1
    retrying = cond(p, "Reconciling")
    assert retrying is not None and retrying["reason"] == "Retrying"
    assert "retry 1 of 1" in retrying["message"]
    # attempt 1 fails the same way: the limit, not the policy, ends the job
    after = status_after(p, st)
    after["trainerStatus"] = {"phase": "Failed", "message": USER_TRACEBACK, "attempt": 1}
    p2 = run(job, after, rayjob("digits-1", deployment="Running"))
    failed = cond(p2, "Failed")
    assert p2.phase == "Failed" and failed is not None
    assert failed["reason"] == "BackoffLimitExceeded" and "(UserException:" in failed["message"]


def test_no_policy_retries_a_run_without_a_checkpoint_to_resume_from() -> None:
    job = tj(
        backoffLimit=2,
        retryPolicy={
            "classes": {"CheckpointUnusable": True, "Unknown": True, "UserException": True},
            "exitCodes": [{"code": 2, "retry": True}],  # the driver exits 2
        },
    )
    assert m.retry_policy(job)["classes"]["CheckpointUnusable"] is True  # accepted as a key
    p = run(job, failed_report(NO_CHECKPOINT_DRIVER), rayjob(deployment="Running"))
    failed = cond(p, "Failed")
    assert p.phase == "Failed" and p.status["attempt"] == 0 and p.status["restarts"] == 0
    assert failed is not None and failed["reason"] == "CheckpointUnusable"
    assert "spec.retryPolicy cannot change that" in failed["message"]
    assert "set spec.retryPolicy.classes.CheckpointUnusable: true" not in failed["message"]
    # By default it is not retried either.
    p = run(tj(backoffLimit=2), failed_report(NO_CHECKPOINT_DRIVER), rayjob(deployment="Running"))
    failed = cond(p, "Failed")
    assert p.phase == "Failed" and failed is not None and failed["reason"] == "CheckpointUnusable"


def test_the_no_retry_message_says_how_to_retry_the_class() -> None:
    p = run(tj(backoffLimit=2), {"attempt": 0}, rayjob(deployment="Failed"), attempt_pods=[OOM_POD])
    failed = cond(p, "Failed")
    assert failed is not None and failed["reason"] == "OOMKilled"
    assert "or set spec.retryPolicy.classes.OOMKilled: true" in failed["message"]


def test_a_class_the_policy_turns_off_fails_at_once_and_says_which_setting() -> None:
    lost = pod(phase="Failed", reason="NodeLost", message="Node node-a is unresponsive")
    job = tj(backoffLimit=3, retryPolicy={"classes": {"NodeLost": False}})
    p = run(job, {"attempt": 0}, rayjob(deployment="Failed"), attempt_pods=[lost])
    failed = cond(p, "Failed")
    assert p.phase == "Failed" and failed is not None and failed["reason"] == "NodeLost"
    assert "spec.retryPolicy.classes.NodeLost is false" in failed["message"]
    assert "3 of spec.backoffLimit 3 retries left unused" in failed["message"]


def test_an_exit_code_rule_decides_over_the_class() -> None:
    killed = pod(
        containers=[
            container(
                state={"running": {}},
                lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}},
            )
        ]
    )
    job = tj(backoffLimit=1, retryPolicy={"exitCodes": [{"code": 137, "retry": True}]})
    p = run(job, {"attempt": 0}, rayjob(deployment="Failed"), attempt_pods=[killed])
    assert p.phase == "Pending" and p.status["attempt"] == 1
    job = tj(backoffLimit=1, retryPolicy={"exitCodes": [{"code": 137, "retry": False}],
                                          "classes": {"OOMKilled": True}})  # fmt: skip
    p = run(job, {"attempt": 0}, rayjob(deployment="Failed"), attempt_pods=[killed])
    failed = cond(p, "Failed")
    assert (
        failed is not None and "spec.retryPolicy.exitCodes says exit code 137" in failed["message"]
    )


def _running(built_from: TrainJob) -> dict[str, Any]:
    body = build_rayjob(built_from, meta(generation=1), 0, suspend=False)
    body["status"] = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    return body


def _plan(job: TrainJob, status: dict[str, Any], rj: dict[str, Any], generation: int) -> m.Plan:
    return m.plan(
        m.Observation(
            meta=meta(generation=generation), trainjob=job, status=status, now=NOW, rayjob=rj
        )
    )


@pytest.mark.parametrize(
    "before",
    [{}, {"retryPolicy": {"classes": {"UserException": True}}}],
    ids=["unset-then-set", "set-then-changed"],
)
def test_a_retry_policy_edit_is_observed_at_once_and_leaves_the_attempt(
    before: dict[str, Any],
) -> None:
    built = tj(**before)
    rj = _running(built)
    first = _plan(built, {"attempt": 0}, rj, 1)
    edited = tj(
        retryPolicy={"classes": {"OOMKilled": True}, "exitCodes": [{"code": 75, "retry": True}]}
    )
    p = _plan(edited, dict(first.status), rj, 2)
    assert p.actions == [] and p.phase == "Running"
    assert p.status["observedGeneration"] == 2
    assert cond(p, "Reconciling") is None
    # with another field beside it, only that field waits
    p = _plan(
        tj(retryPolicy={"classes": {}}, backoffLimit=2, image="r/t:2"), dict(first.status), rj, 3
    )
    pending = cond(p, "Reconciling")
    assert pending is not None and pending["reason"] == m.SPEC_CHANGE_PENDING
    assert "spec.image" in pending["message"] and "spec.retryPolicy" not in pending["message"]


def test_resuming_after_a_retry_policy_edit_keeps_the_attempt() -> None:
    rj = _running(tj())
    rj["spec"]["suspend"] = True
    rj["status"] = {"jobDeploymentStatus": "Suspended"}
    edited = tj(retryPolicy={"classes": {"UserException": True}})
    p = _plan(edited, {"attempt": 0, "restarts": 0}, rj, 2)
    assert p.status["attempt"] == 0
    assert any(isinstance(a, m.SetRayJobSuspend) and not a.suspend for a in p.actions)
    changed = tj(image="r/t:2")
    p = _plan(changed, {"attempt": 0, "restarts": 0}, rj, 2)
    assert p.status["attempt"] == 1  # a built field still starts a new attempt
