"""The TrainJob state machine: every lifecycle decision, without a cluster."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from _factories import manifest, meta

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import ANNOTATION_CHECKPOINT_REQUESTED
from raytrain_contract.timefmt import rfc3339
from raytrain_operator.status import machine as m
from raytrain_operator.status import triage
from raytrain_operator.status.conditions import find

NOW = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)


def ts(seconds: float = 0) -> str:
    return rfc3339(NOW + timedelta(seconds=seconds))


def tj(**spec: Any) -> TrainJob:
    return TrainJob.model_validate(manifest(**spec))


def rayjob(
    name: str = "digits-0",
    *,
    deployment: str = "",
    job_status: str = "",
    suspend: bool = False,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [{"uid": uid or meta().uid}],
            "annotations": annotations or {},
        },
        "spec": {"suspend": suspend},
        "status": {"jobDeploymentStatus": deployment, "jobStatus": job_status, **status},
    }


def run(
    trainjob: TrainJob | None = None,
    status: dict[str, Any] | None = None,
    rj: dict[str, Any] | None = None,
    *,
    now: datetime = NOW,
    annotations: dict[str, str] | None = None,
    generation: int = 1,
    **kw: Any,
) -> m.Plan:
    return m.plan(
        m.Observation(
            meta=meta(annotations=annotations or {}, generation=generation),
            trainjob=trainjob or tj(),
            status=status or {},
            now=now,
            rayjob=rj,
            **kw,
        )
    )


def cond(p: m.Plan, type_: str) -> dict[str, Any] | None:
    found = find(p.status["conditions"], type_)
    return dict(found) if found is not None else None


def status_after(p: m.Plan, before: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**(before or {}), **{k: v for k, v in p.status.items()}}


# ------------------------------------------------------------------------------ first visit


def test_first_visit_creates_children_and_reports_pending() -> None:
    p = run()
    assert p.actions == [m.EnsureChildren(0, False)]
    assert p.phase == "Pending"
    assert p.status["observedGeneration"] == 1
    assert p.status["runName"] == "digits-5f0c2a7e91b3"
    assert p.status["rayJobName"] == "digits-0" and p.status["attempt"] == 0
    assert cond(p, "Created")["status"] == "True"
    assert cond(p, "Reconciling")["status"] == "True"
    assert cond(p, "Running")["status"] == "False"
    assert cond(p, "Stalled") is None


def test_preflight_problem_stalls_without_a_rayjob() -> None:
    problem = ("StorageNotFound", "spec.storage.pvc.claimName: PersistentVolumeClaim 'x' ...")
    p = run(preflight_problem=problem)
    assert p.actions == []
    assert p.phase == "Stalled"
    stalled = cond(p, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "StorageNotFound"
    assert "claimName" in stalled["message"]
    assert cond(p, "Created")["status"] == "False"
    assert any(t.type == "Stalled" and t.is_warning for t in p.transitions)


def test_fixing_the_problem_unblocks_and_removes_stalled() -> None:
    stalled = run(preflight_problem=("StorageNotFound", "x"))
    p = run(status=status_after(stalled))
    assert p.actions == [m.EnsureChildren(0, False)]
    assert cond(p, "Stalled") is None


def test_invalid_spec_stalls() -> None:
    p = run(spec_problem="spec.scaling.resourcesPerWorker.cpu: 'abc' is not a quantity")
    assert p.phase == "Stalled" and p.actions == []
    assert "resourcesPerWorker.cpu" in cond(p, "Stalled")["message"]


def test_a_foreign_rayjob_with_our_name_is_never_touched() -> None:
    p = run(rj=rayjob(uid="someone-else"))
    assert p.actions == [] and p.phase == "Stalled"
    assert cond(p, "Stalled")["reason"] == "NameConflict"


def test_kueue_jobs_are_created_suspended() -> None:
    p = run(tj(queueName="q"))
    assert p.actions == [m.EnsureChildren(0, True)]
    assert cond(p, "Suspended")["reason"] == "Queued" and p.phase == "Pending"


def test_kueue_owns_suspend_of_a_queued_rayjob() -> None:
    p = run(tj(queueName="q"), {"attempt": 0}, rayjob(suspend=True, deployment="Suspended"))
    assert p.actions == []
    assert cond(p, "Suspended")["reason"] == "Queued"


# ------------------------------------------------------------------------------ progress


def test_initializing_rayjob_is_reconciling_and_sets_start_time() -> None:
    rj = rayjob(
        deployment="Initializing",
        rayClusterName="digits-0-abcde",
        startTime=ts(-5),
        rayClusterStatus={"desiredWorkerReplicas": 2, "readyWorkerReplicas": 1},
    )
    p = run(status={"attempt": 0}, rj=rj)
    assert p.actions == []
    assert p.phase == "Pending"
    assert p.status["startTime"] == ts(-5)
    assert p.status["rayClusterName"] == "digits-0-abcde"
    assert p.status["workers"] == {"desired": 2, "ready": 1}
    assert "1/2" in cond(p, "Reconciling")["message"]


def test_running_rayjob_is_running() -> None:
    rj = rayjob(deployment="Running", job_status="RUNNING", dashboardURL="digits-0-head-svc:8265")
    p = run(status={"attempt": 0, "startTime": ts(-60)}, rj=rj)
    assert p.phase == "Running"
    assert cond(p, "Running")["status"] == "True"
    assert cond(p, "Reconciling") is None
    assert p.status["dashboardURL"] == "digits-0-head-svc:8265"
    assert "startTime" not in p.status  # kept, not rewritten


# ------------------------------------------------------------------------------ outcomes


def test_runtime_success_decides_even_if_the_rayjob_still_runs() -> None:
    st = {
        "attempt": 0,
        "trainerStatus": {"phase": "Succeeded", "attempt": 0, "message": "acc 0.97"},
    }
    p = run(status=st, rj=rayjob(deployment="Running"))
    assert p.phase == "Succeeded"
    assert cond(p, "Succeeded")["status"] == "True"
    assert cond(p, "Succeeded")["message"] == "acc 0.97"
    assert cond(p, "Running")["status"] == "False"
    assert p.status["completionTime"] == ts()


def test_rayjob_success_counts_when_the_runtime_said_nothing() -> None:
    p = run(status={"attempt": 0}, rj=rayjob(deployment="Complete", job_status="SUCCEEDED"))
    assert p.phase == "Succeeded"


def test_runtime_failure_without_retries_fails() -> None:
    st = {"attempt": 0, "trainerStatus": {"phase": "Failed", "message": "CUDA OOM"}}
    p = run(status=st, rj=rayjob(deployment="Running"))
    assert p.phase == "Failed"
    failed = cond(p, "Failed")
    assert failed["reason"] == "Unknown" and "CUDA OOM" in failed["message"]
    assert p.actions == []


def test_failed_attempt_retries_with_a_new_rayjob_until_the_backoff_limit() -> None:
    st: dict[str, Any] = {"attempt": 0, "restarts": 0}
    p = run(
        tj(backoffLimit=2), st, rayjob(deployment="Failed", job_status="FAILED", message="boom")
    )
    # The next attempt is written first; nothing is deleted or created in this pass.
    assert p.actions == []
    assert p.status["attempt"] == 1 and p.status["restarts"] == 1
    assert p.status["rayJobName"] == "digits-1"
    assert cond(p, "Reconciling")["reason"] == "Retrying"
    assert p.phase == "Pending"

    st2 = status_after(p, st)
    # The old RayJob is deleted, and attempt 1 waits until it and its pods are gone.
    deleting = run(
        tj(backoffLimit=2), st2, None, older_rayjobs={"digits-0": False}, highest_attempt=0
    )
    assert deleting.actions == [m.DeleteRayJob("digits-0")]
    stopping = cond(deleting, "Reconciling")
    assert stopping["reason"] == "StoppingPreviousAttempt"
    # Why the attempt failed stays in the condition while its RayJob goes, not for one pass.
    message = stopping["message"]
    assert ". Why: attempt 0 failed (Unknown: RayJob digits-0 ended" in message, message
    assert "boom" in message and message.endswith(triage.UNKNOWN_HINT + ")"), message
    st3 = status_after(deleting, st2)
    waiting = run(
        tj(backoffLimit=2), st3, None, older_rayjobs={"digits-0": True}, highest_attempt=0
    )
    assert waiting.actions == []
    assert cond(waiting, "Reconciling")["message"] == message
    created = run(tj(backoffLimit=2), st2, None)
    assert created.actions == [m.EnsureChildren(1, False)]

    p2 = run(tj(backoffLimit=2), st2, rayjob("digits-1", deployment="Failed"))
    assert p2.status["attempt"] == 2 and p2.status["restarts"] == 2
    p3 = run(tj(backoffLimit=2), status_after(p2, st2), rayjob("digits-2", deployment="Failed"))
    assert p3.phase == "Failed"
    assert cond(p3, "Failed")["reason"] == "BackoffLimitExceeded"


def test_a_report_from_an_earlier_attempt_does_not_count() -> None:
    st = {"attempt": 1, "restarts": 1, "trainerStatus": {"phase": "Failed", "attempt": 0}}
    p = run(tj(backoffLimit=1), st, rayjob("digits-1", deployment="Running", job_status="RUNNING"))
    assert p.phase == "Running"
    stale_running = {"attempt": 1, "trainerStatus": {"phase": "Running", "attempt": 0}}
    p = run(tj(), stale_running, rayjob("digits-1", deployment="Running"))
    assert p.phase == "Pending" and cond(p, "Running")["status"] == "False"
    assert cond(p, "Reconciling")["reason"] == "Starting"


def test_terminal_job_is_never_rerun_when_children_vanish() -> None:
    done = run(
        status={"attempt": 0, "trainerStatus": {"phase": "Succeeded"}},
        rj=rayjob(deployment="Running"),
    )
    p = run(status=status_after(done), rj=None, now=NOW + timedelta(seconds=30))
    assert p.actions == []
    assert p.phase == "Succeeded"


def test_ttl_deletes_children_once_and_keeps_the_status() -> None:
    job = tj(ttlSecondsAfterFinished=60)
    done = run(
        job, {"attempt": 0, "trainerStatus": {"phase": "Succeeded"}}, rayjob(deployment="Running")
    )
    assert done.recheck_after == 60
    st = status_after(done)
    early = run(job, st, now=NOW + timedelta(seconds=30))
    assert early.actions == [] and early.recheck_after == 30
    late = run(job, st, now=NOW + timedelta(seconds=61))
    assert late.actions[0] == m.DeleteChildren()
    assert (
        isinstance(late.actions[1], m.Annotate) and late.actions[1].key == m.ANNOTATION_CLEANED_UP
    )
    assert late.phase == "Succeeded"
    again = run(
        job, st, now=NOW + timedelta(seconds=90), annotations={m.ANNOTATION_CLEANED_UP: ts()}
    )
    assert again.actions == []


def test_deadline_exceeded_deletes_the_rayjob_and_fails() -> None:
    job = tj(activeDeadlineSeconds=100)
    st = {"attempt": 0, "startTime": ts(-101)}
    p = run(job, st, rayjob(deployment="Running"))
    assert p.actions == [m.DeleteRayJob("digits-0")]
    assert p.phase == "Failed"
    assert cond(p, "Failed")["reason"] == "DeadlineExceeded"
    within = run(
        job,
        {"attempt": 0, "startTime": ts(-40)},
        rayjob(deployment="Running", job_status="RUNNING"),
    )
    assert within.phase == "Running" and within.recheck_after == 60


# ------------------------------------------------------------------------------ suspend/resume


def test_suspend_before_the_runtime_runs_suspends_at_once() -> None:
    p = run(tj(suspend=True), {"attempt": 0}, rayjob(deployment="Initializing"))
    assert p.actions == [
        m.Annotate(ANNOTATION_CHECKPOINT_REQUESTED, ts()),
        m.SetRayJobSuspend("digits-0", True, by_user=True),
    ]
    assert p.phase == "Suspended"
    assert cond(p, "Suspended")["status"] == "True"


def test_suspend_of_a_running_runtime_requests_a_checkpoint_first() -> None:
    rj = rayjob(deployment="Running", job_status="RUNNING")
    p = run(tj(suspend=True), {"attempt": 0}, rj)
    assert p.actions == [m.Annotate(ANNOTATION_CHECKPOINT_REQUESTED, ts())]
    assert cond(p, "Reconciling")["reason"] == "Checkpointing"
    assert p.recheck_after == 120

    requested = {ANNOTATION_CHECKPOINT_REQUESTED: ts()}
    waiting = run(
        tj(suspend=True), {"attempt": 0}, rj, annotations=requested, now=NOW + timedelta(seconds=10)
    )
    assert waiting.actions == [] and waiting.recheck_after == 110

    checkpointed = {
        "attempt": 0,
        "trainerStatus": {"checkpointing": False, "lastUpdatedTime": ts(12)},
    }
    done = run(
        tj(suspend=True), checkpointed, rj, annotations=requested, now=NOW + timedelta(seconds=15)
    )
    assert done.actions == [m.SetRayJobSuspend("digits-0", True, by_user=True)]
    assert done.phase == "Suspended"


def test_suspend_goes_ahead_after_the_grace_period() -> None:
    rj = rayjob(deployment="Running", job_status="RUNNING")
    still = {"attempt": 0, "trainerStatus": {"checkpointing": True, "lastUpdatedTime": ts(5)}}
    p = run(
        tj(suspend=True),
        still,
        rj,
        annotations={ANNOTATION_CHECKPOINT_REQUESTED: ts()},
        now=NOW + timedelta(seconds=121),
    )
    assert p.actions == [m.SetRayJobSuspend("digits-0", True, by_user=True)]


def test_suspended_rayjob_is_suspended() -> None:
    p = run(tj(suspend=True), {"attempt": 0}, rayjob(suspend=True, deployment="Suspended"))
    assert p.actions == [] and p.phase == "Suspended"


def test_resume_unsuspends_the_same_rayjob_and_clears_the_request() -> None:
    rj = rayjob(
        suspend=True,
        deployment="Suspended",
        annotations={m.ANNOTATION_SPEC_HASH: m.spec_hash(tj())},
    )
    p = run(tj(), {"attempt": 0}, rj, annotations={ANNOTATION_CHECKPOINT_REQUESTED: ts()})
    assert m.SetRayJobSuspend("digits-0", False, by_user=False) in p.actions
    assert m.Annotate(ANNOTATION_CHECKPOINT_REQUESTED, None) in p.actions
    assert cond(p, "Suspended")["status"] == "False"


def test_resume_with_a_changed_spec_starts_a_new_attempt() -> None:
    rj = rayjob(suspend=True, annotations={m.ANNOTATION_SPEC_HASH: m.spec_hash(tj())})
    changed = tj(config={"epochs": 10})
    p = run(changed, {"attempt": 0, "restarts": 0}, rj)
    assert p.actions == []
    assert p.status["attempt"] == 1 and p.status["restarts"] == 0
    after = status_after(p, {"attempt": 0, "restarts": 0})
    p2 = run(changed, after, None, older_rayjobs={"digits-0": False}, highest_attempt=0)
    assert p2.actions == [m.DeleteRayJob("digits-0")]
    assert run(changed, after, None).actions == [m.EnsureChildren(1, False)]


def test_resume_with_kueue_hands_the_rayjob_back_to_kueue() -> None:
    rj = rayjob(suspend=True, annotations={m.ANNOTATION_SUSPENDED_BY_USER: "true"})
    p = run(tj(queueName="q"), {"attempt": 0}, rj)
    assert m.SetRayJobSuspend("digits-0", False, by_user=False) in p.actions


def test_spec_hash_ignores_what_the_operator_applies_at_once() -> None:
    assert m.spec_hash(tj(suspend=True)) == m.spec_hash(tj(suspend=False))
    for immediate in (
        {"backoffLimit": 3},
        {"activeDeadlineSeconds": 60},
        {"ttlSecondsAfterFinished": 5},
    ):
        assert m.spec_hash(tj(**immediate)) == m.spec_hash(tj()), immediate
    assert m.spec_hash(tj(config={"epochs": 9})) != m.spec_hash(tj())


def test_a_generation_acted_on_refreshes_every_condition() -> None:
    first = run(status={"attempt": 0}, rj=rayjob(deployment="Running"))
    # Generation 5 suspends the job: the plan acts on it, so generation 5 is observed.
    p = run(tj(suspend=True), status_after(first), rayjob(deployment="Running"), generation=5)
    assert m.SetRayJobSuspend("digits-0", True, by_user=True) in p.actions
    assert p.status["observedGeneration"] == 5
    assert {x["observedGeneration"] for x in p.status["conditions"]} == {5}


def test_a_spec_edit_to_a_running_job_does_not_advance_observed_generation() -> None:
    built_from_1 = rayjob(
        deployment="Running", annotations={m.ANNOTATION_SPEC_HASH: m.spec_hash(tj())}
    )
    first = run(status={"attempt": 0}, rj=built_from_1)
    assert first.status["observedGeneration"] == 1
    # Generation 2 changes the training config; the running RayJob still runs generation 1's.
    p = run(tj(config={"epochs": 10}), status_after(first), built_from_1, generation=2)
    assert p.status["observedGeneration"] == 1


def test_a_child_name_taken_by_another_object_stalls() -> None:
    message = "a ConfigMap named digits-contract exists in namespace team-a but does not belong"
    p = run(conflict=message)
    assert p.phase == "Stalled" and p.actions == []
    assert cond(p, "Stalled")["reason"] == "NameConflict"
    assert cond(p, "Stalled")["message"] == message


# ------------------------------------------------------------------ fresh checkpoint, stale reports


def test_a_request_left_from_an_earlier_suspend_is_never_reused() -> None:
    rj = rayjob(deployment="Running", job_status="RUNNING", startTime=ts(-600))
    # Left from a suspend an hour ago that was undone before the RayJob was suspended, and
    # "answered" by a report from back then: this suspend must ask again and wait.
    old = {ANNOTATION_CHECKPOINT_REQUESTED: ts(-3600)}
    answered = {
        "attempt": 0,
        "trainerStatus": {"checkpointing": False, "lastUpdatedTime": ts(-3500), "attempt": 0},
    }
    p = run(tj(suspend=True), answered, rj, annotations=old)
    assert p.actions == [m.Annotate(ANNOTATION_CHECKPOINT_REQUESTED, ts())]
    assert cond(p, "Reconciling")["reason"] == "Checkpointing"


def test_a_request_from_before_the_current_cluster_started_is_stale() -> None:
    rj = rayjob(deployment="Running", job_status="RUNNING", startTime=ts(-60))
    p = run(
        tj(suspend=True), {"attempt": 0}, rj, annotations={ANNOTATION_CHECKPOINT_REQUESTED: ts(-90)}
    )
    assert m.Annotate(ANNOTATION_CHECKPOINT_REQUESTED, ts()) in p.actions
    assert not any(isinstance(a, m.SetRayJobSuspend) for a in p.actions)


def test_a_request_is_withdrawn_as_soon_as_the_job_is_not_suspended() -> None:
    rj = rayjob(deployment="Running", job_status="RUNNING")
    p = run(tj(), {"attempt": 0}, rj, annotations={ANNOTATION_CHECKPOINT_REQUESTED: ts(-5)})
    assert p.actions == [m.Annotate(ANNOTATION_CHECKPOINT_REQUESTED, None)]


def test_after_a_resume_the_old_clusters_report_does_not_make_it_running() -> None:
    before_suspend = {"phase": "Running", "attempt": 0, "lastUpdatedTime": ts(-300)}
    st = {"attempt": 0, "trainerStatus": before_suspend}
    # KubeRay started a new cluster for the resumed RayJob 60 s ago and submitted the job.
    rj = rayjob(deployment="Running", startTime=ts(-60))
    p = run(tj(), st, rj)
    assert p.phase == "Pending" and cond(p, "Running")["status"] == "False"
    assert cond(p, "Reconciling")["reason"] == "Starting"
    while_starting = run(tj(), st, rayjob(deployment="Initializing", startTime=ts(-60)))
    assert cond(while_starting, "Running")["status"] == "False"
    fresh = {"attempt": 0, "trainerStatus": {**before_suspend, "lastUpdatedTime": ts(-10)}}
    assert run(tj(), fresh, rj).phase == "Running"
