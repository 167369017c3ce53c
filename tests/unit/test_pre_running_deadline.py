"""spec.preRunningDeadlineSeconds: an attempt whose cluster does not start training in time is
deleted and the job fails, saying what it waited for; the clock starts at the RayJob's creation
or the latest resume, and stops mattering once training runs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from _factories import manifest, meta

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.timefmt import rfc3339
from raytrain_operator.status import machine as m
from raytrain_operator.status.conditions import find

NOW = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)
UNSCHEDULABLE = (
    "Unschedulable",
    "pod digits-0-worker-x cannot be scheduled: 0/3 nodes are available: 3 Insufficient "
    "nvidia.com/gpu",
)


def ts(seconds: float) -> str:
    return rfc3339(NOW + timedelta(seconds=seconds))


def rayjob(created: float, deployment: str = "Initializing", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "digits-0",
            "creationTimestamp": ts(created),
            "ownerReferences": [{"uid": meta().uid}],
        },
        "spec": {"suspend": False},
        "status": {"jobDeploymentStatus": deployment, **status},
    }


def plan(rj: dict[str, Any], status: dict[str, Any] | None = None, **kw: Any) -> m.Plan:
    job = TrainJob.model_validate(manifest(preRunningDeadlineSeconds=600))
    return m.plan(
        m.Observation(
            meta=meta(),
            trainjob=job,
            status={"attempt": 0, **(status or {})},
            now=NOW,
            rayjob=rj,
            **kw,
        )
    )


def test_a_cluster_that_waits_past_the_deadline_is_deleted_and_the_job_fails() -> None:
    p = plan(rayjob(-601), cluster_problem=UNSCHEDULABLE)
    assert p.actions == [m.DeleteRayJob("digits-0")]
    assert p.phase == "Failed"
    failed = find(p.status["conditions"], "Failed")
    assert failed is not None and failed["reason"] == "PreRunningDeadlineExceeded"
    msg = failed["message"]
    assert "attempt 0 waited 601 s for its Ray cluster to start training" in msg
    assert "spec.preRunningDeadlineSeconds (600)" in msg
    assert "RayJob digits-0 was Initializing" in msg
    assert "3 Insufficient nvidia.com/gpu" in msg


def test_within_the_deadline_the_job_waits_and_is_looked_at_when_it_runs_out() -> None:
    p = plan(rayjob(-100), cluster_problem=UNSCHEDULABLE)
    assert p.actions == [] and p.phase == "Pending"
    assert p.recheck_after == 500


def test_a_submitted_job_whose_runtime_has_not_reported_is_still_waiting() -> None:
    p = plan(rayjob(-700, deployment="Running", jobStatus="PENDING"))
    assert p.phase == "Failed"


def test_a_running_attempt_is_never_failed_by_it() -> None:
    p = plan(rayjob(-7000, deployment="Running", jobStatus="RUNNING"))
    assert p.phase == "Running" and p.actions == []


def test_the_clock_starts_again_at_a_resume() -> None:
    resumed = {
        "type": "Suspended",
        "status": "False",
        "reason": "Resumed",
        "message": "",
        "lastTransitionTime": ts(-60),
    }
    p = plan(rayjob(-7000), {"conditions": [resumed]})
    assert p.phase == "Pending" and p.recheck_after == 540
    still = dict(resumed, status="True", reason="Suspended")
    assert plan(rayjob(-7000), {"conditions": [still]}).phase == "Failed"


def test_without_the_field_nothing_changes() -> None:
    job = TrainJob.model_validate(manifest())
    p = m.plan(
        m.Observation(
            meta=meta(), trainjob=job, status={"attempt": 0}, now=NOW, rayjob=rayjob(-9e5)
        )
    )
    assert p.phase == "Pending" and p.actions == []
