"""The SDK's typed views of TrainJobs and Events, and how a wait is decided, from plain dicts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from raytrain.models import Checkpoints, Event, TrainJob, wait_outcome, wanted_statuses


def _obj(generation: int = 2, spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "digits",
            "namespace": "team-a",
            "uid": "u-1",
            "generation": generation,
            "creationTimestamp": "2026-11-22T07:58:45Z",
        },
        "spec": spec or {"storage": {"s3": {"uri": "s3://b/p"}}},
        "status": status,
    }


def _cond(ctype: str, status: str = "True", gen: int | None = 2, **extra: str) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": ctype, "status": status, "reason": "R", "message": ""}
    if gen is not None:
        cond["observedGeneration"] = gen
    return cond | extra


def test_every_field_users_read_comes_from_status() -> None:
    job = TrainJob.from_object(
        _obj(
            phase="Running",
            attempt=2,
            restarts=1,
            rayJobName="digits-2",
            rayClusterName="digits-2-abcde",
            workers={"desired": 4, "ready": 3},
            startTime="2026-11-22T08:00:00Z",
            trainerStatus={
                "progressPercentage": 55,
                "epoch": 4,
                "step": 9,
                "estimatedRemainingSeconds": 30,
                "metrics": [{"name": "loss", "value": "0.2"}],
                "message": "training",
            },
            checkpoint={"latestURI": "s3://b/p/c4", "bestURI": "s3://b/p/c3", "count": 4},
            conditions=[_cond("Running", message="epoch 4")],
            someFutureField={"x": 1},
        )
    )
    assert (job.name, job.namespace, job.phase, job.uid, job.generation) == (
        "digits", "team-a", "Running", "u-1", 2,
    )  # fmt: skip
    assert (job.progress, job.epoch, job.step, job.estimated_remaining_seconds) == (55, 4, 9, 30)
    assert job.metrics == {"loss": "0.2"} and job.message == "training"
    assert (job.attempt, job.restarts, job.workers_desired, job.workers_ready) == (2, 1, 4, 3)
    assert job.ray_cluster_name == "digits-2-abcde"
    assert job.start_time == dt.datetime(2026, 11, 22, 8, tzinfo=dt.timezone.utc)
    assert job.checkpoints == Checkpoints("s3://b/p/c4", "s3://b/p/c3", None, 4, "s3://b/p")
    assert job.manifest["status"]["someFutureField"] == {"x": 1}
    assert not job.finished


def test_a_new_job_has_defaults_not_errors() -> None:
    job = TrainJob.from_object({"metadata": {"name": "x"}, "spec": {}})
    assert (job.phase, job.attempt, job.restarts, job.metrics, job.conditions) == (
        "Pending", 0, 0, {}, (),
    )  # fmt: skip
    assert job.describe_conditions() == "no conditions yet (is the operator running?)"
    assert job.checkpoints.uris == [] and job.checkpoints.storage is None


def test_checkpoint_uris_are_distinct_latest_first() -> None:
    assert Checkpoints("s3://a", "s3://a").uris == ["s3://a"]
    assert Checkpoints("s3://a", "s3://b").uris == ["s3://a", "s3://b"]
    assert Checkpoints(None, "s3://b").uris == ["s3://b"]
    pvc = Checkpoints.from_object({"spec": {"storage": {"pvc": {"claimName": "ckpt"}}}})
    assert pvc.storage == "pvc/ckpt"


def test_complete_is_succeeded_and_unknown_statuses_are_refused() -> None:
    assert wanted_statuses("Complete") == {"Succeeded"}
    assert wanted_statuses(["Running", "Complete"]) == {"Running", "Succeeded"}
    with pytest.raises(ValueError, match=r"'Done' is not a TrainJob status; use Created, Running"):
        wanted_statuses({"Done", "Running"})
    with pytest.raises(ValueError, match="at least one"):
        wanted_statuses([])


def test_wait_is_met_by_a_fresh_true_condition() -> None:
    job = TrainJob.from_object(_obj(conditions=[_cond("Succeeded", message="ok")]))
    assert wait_outcome(job, wanted_statuses("Complete")) == (True, "ok")
    assert job.condition("Complete") == job.condition("Succeeded")


def test_wait_ignores_a_stale_condition() -> None:
    job = TrainJob.from_object(_obj(conditions=[_cond("Running", gen=1)]))
    assert wait_outcome(job, frozenset({"Running"})) is None
    # a condition without observedGeneration counts (older operators did not write it)
    job = TrainJob.from_object(_obj(conditions=[_cond("Running", gen=None)]))
    assert wait_outcome(job, frozenset({"Running"})) == (True, "Running")


def test_wait_for_success_ends_when_the_job_fails() -> None:
    failed = _cond("Failed", reason="BackoffLimitExceeded", message="3 attempts failed")
    job = TrainJob.from_object(_obj(conditions=[failed]))
    assert wait_outcome(job, frozenset({"Succeeded"})) == (
        False,
        "BackoffLimitExceeded: 3 attempts failed",
    )
    assert wait_outcome(job, frozenset({"Failed"})) == (True, "3 attempts failed")


def test_wait_keeps_waiting_while_running() -> None:
    job = TrainJob.from_object(_obj(conditions=[_cond("Running"), _cond("Failed", "False")]))
    assert wait_outcome(job, frozenset({"Succeeded"})) is None
    assert job.describe_conditions() == "Running=True (R), Failed=False (R)"


def test_an_event_reads_legacy_and_new_time_fields() -> None:
    legacy = Event.from_dict(
        {
            "type": "Warning",
            "reason": "BackOff",
            "message": "m",
            "involvedObject": {"kind": "Pod", "name": "p"},
            "count": 3,
            "firstTimestamp": "2026-11-22T08:00:00Z",
            "lastTimestamp": "2026-11-22T08:05:00Z",
            "source": {"component": "kubelet"},
        }
    )
    assert legacy.count == 3 and legacy.source == "kubelet"
    assert legacy.event_time == dt.datetime(2026, 11, 22, 8, 5, tzinfo=dt.timezone.utc)
    new = Event.from_dict(
        {
            "reason": "Created",
            "involvedObject": {"kind": "TrainJob", "name": "digits"},
            "eventTime": "2026-11-22T08:01:00.000000Z",
            "reportingComponent": "raytrain-operator",
        }
    )
    assert new.type == "Normal" and new.count == 1 and new.source == "raytrain-operator"
    assert new.event_time == dt.datetime(2026, 11, 22, 8, 1, tzinfo=dt.timezone.utc)
