"""Wake-ups (handlers/wake.py): the queue, which RayJob events wake a TrainJob's pass, and how a
woken pass writes (only over the TrainJob it read)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import kopf
import pytest
from _fake_api import recorder

from raytrain_operator.handlers import wake

__all__ = ["recorder"]  # the fixture


def rayjob(status: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "digits-0", "labels": {"raytrain.dev/trainjob": "digits"}, **metadata},
        "spec": {"suspend": False, "entrypoint": "python -m trainer_runtime"},
        "status": status or {},
    }


def wait_until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set: an interruptible wait between checks
    while not check():
        assert time.monotonic() < deadline, "timed out"
        pause.wait(0.01)


# ------------------------------------------------------------------------------- the queue


def test_a_key_runs_when_due_and_an_earlier_schedule_wins() -> None:
    ran: list[tuple[str, float]] = []
    ran: list[tuple[str, float, str]] = []
    waker = wake.Waker(lambda key, cause: ran.append((key[1], time.monotonic(), cause)))
    start = time.monotonic()
    waker.schedule(("ns", "late"), 1.0, wake.RESYNC)
    waker.schedule(("ns", "a"), 30.0, wake.RESYNC)
    # Earlier: replaces the 30 s one. Not due at once, so that it is still queued when the
    # next line schedules again (with 0 s it could already have run, and the 10 s would stay).
    waker.schedule(("ns", "a"), 0.3)
    waker.schedule(("ns", "a"), 10.0, wake.RESYNC)  # later than the queued one: ignored
    wait_until(lambda: len(ran) == 2)
    assert [(name, cause) for name, _, cause in ran] == [("a", "wake"), ("late", "resync")]
    assert ran[0][1] - start >= 0.3
    assert ran[1][1] - start >= 1.0
    assert waker.pending() == {}


@pytest.mark.parametrize(
    ("error", "again_in"),
    [
        (RuntimeError("a bug"), 60.0),  # the resync interval
        (kopf.TemporaryError("the API server did not answer", delay=2.0), 2.0),
    ],
)
def test_a_pass_that_raises_is_queued_again(
    monkeypatch: pytest.MonkeyPatch, error: Exception, again_in: float
) -> None:
    monkeypatch.setattr(wake.CONFIG, "resync_seconds", 60.0)
    calls: list[str] = []

    def run(key: tuple[str, str], cause: str) -> None:
        calls.append(cause)
        if len(calls) == 1:  # only the first: the retry ends the chain, no thread left at it
            raise error

    waker = wake.Waker(run)
    waker.schedule(("ns", "a"))
    wait_until(lambda: bool(calls) and ("ns", "a") in waker.pending())
    assert calls == ["wake"]
    assert waker.pending()[("ns", "a")] == pytest.approx(again_in, abs=1.0)


def test_passes_over_one_key_never_overlap_and_a_wake_during_a_pass_runs_after_it() -> None:
    inside = threading.Event()
    second = threading.Event()
    release = threading.Event()
    calls: list[str] = []
    overlap: list[bool] = []
    running = threading.Lock()

    def run(key: tuple[str, str], cause: str) -> None:
        overlap.append(not running.acquire(blocking=False))
        calls.append(key[1])
        inside.set()
        if len(calls) == 2:
            second.set()
        if len(calls) == 1:
            release.wait(5)
        running.release()

    waker = wake.Waker(run)
    waker.schedule(("ns", "a"))
    assert inside.wait(5)
    waker.schedule(("ns", "a"))  # while the first pass runs
    assert not second.wait(0.2)  # no second pass begins beside the first
    assert calls == ["a"]
    release.set()
    wait_until(lambda: len(calls) == 2)
    assert overlap == [False, False]


# ------------------------------------------------------------------- which events wake


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[str, str], float]]:
    seen: list[tuple[tuple[str, str], float]] = []
    fresh = wake.Waker(lambda key, cause: None)
    monkeypatch.setattr(
        fresh, "schedule", lambda key, delay=0.0, cause=wake.WAKE: seen.append((key, delay))
    )
    monkeypatch.setattr(wake, "WAKER", fresh)
    return seen


def event(kind: str | None, obj: dict[str, Any]) -> None:
    body = kopf.Body(obj)  # type: ignore[arg-type]
    asyncio.run(
        wake.rayjob_changed(
            type=kind, namespace="team-a", name=obj["metadata"]["name"], meta=body.meta, body=body
        )
    )


def test_a_rayjob_status_change_wakes_its_trainjob(queued: list[Any]) -> None:
    created = rayjob()
    wake.WAKER.saw("team-a", created)  # what the creating pass knows
    event("ADDED", created)
    assert queued == []  # its own creation: nothing new
    event("MODIFIED", rayjob({"jobDeploymentStatus": "Initializing"}))
    assert queued == [(("team-a", "digits"), 0.0)]


def test_an_event_showing_what_the_last_pass_saw_wakes_nothing(queued: list[Any]) -> None:
    running = rayjob({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    wake.WAKER.saw("team-a", running)
    event("MODIFIED", {**running, "spec": {**running["spec"], "entrypoint": "other"}})
    assert queued == []
    event("MODIFIED", rayjob(running["status"], deletionTimestamp="2026-11-23T10:00:00Z"))
    assert len(queued) == 1


def test_deletion_wakes_and_the_listing_at_start_up_does_not(queued: list[Any]) -> None:
    event(None, rayjob({"jobDeploymentStatus": "Running"}))
    assert queued == []
    event("DELETED", rayjob())
    assert queued == [(("team-a", "digits"), 0.0)]


# ------------------------------------------------------------------- how a woken pass writes


def test_a_woken_pass_writes_only_over_the_trainjob_it_read(
    recorder: list[dict[str, Any]],
) -> None:
    patch = kopf.Patch()
    patch.status["phase"] = "Running"
    patch.metadata.annotations["raytrain.dev/checkpoint-requested"] = None
    metadata = {"uid": "u-1", "resourceVersion": "41"}
    assert wake.write("team-a", "digits", metadata, patch)
    first, second = recorder
    path = "/apis/raytrain.dev/v1alpha1/namespaces/team-a/trainjobs/digits"
    assert (first["path"], first["content_type"]) == (path, "application/merge-patch+json")
    assert first["body"] == {
        "metadata": {
            "uid": "u-1",
            "resourceVersion": "41",
            "annotations": {"raytrain.dev/checkpoint-requested": None},
        }
    }
    assert second["path"] == path + "/status"
    assert second["body"] == {"metadata": {"uid": "u-1"}, "status": {"phase": "Running"}}


def test_a_conflict_writes_nothing_more(recorder: list[dict[str, Any]]) -> None:
    import _fake_api

    _fake_api.Recorder.patch_status = 409
    patch = kopf.Patch()
    patch.status["phase"] = "Running"
    assert not wake.write("team-a", "digits", {"uid": "u-1", "resourceVersion": "41"}, patch)
    (only,) = recorder
    assert only["body"]["metadata"]["resourceVersion"] == "41"


def report_event(
    kind: str, trainer_status: dict[str, Any] | None, uid: str | None = None, **status: Any
) -> None:
    body = kopf.Body(
        {
            "metadata": {"uid": uid} if uid else {},
            "spec": {},
            "status": {"trainerStatus": trainer_status, **status},
        }
    )
    asyncio.run(
        wake.trainjob_changed(
            type=kind,
            namespace="team-a",
            name="digits",
            status=body.status,
            spec=body.spec,
            meta=body.meta,
            logger=logging.getLogger("t"),
            uid=uid,
        )
    )


def test_a_new_runtime_report_wakes_the_trainjob_and_our_own_status_writes_do_not(
    queued: list[Any],
) -> None:
    wake.WAKER.saw_report("team-a", "digits", None)  # the last pass saw no report
    report_event("MODIFIED", None)  # e.g. the operator's own condition update
    assert queued == []
    report_event("MODIFIED", {"phase": "Succeeded", "lastUpdatedTime": "2026-11-23T10:00:00Z"})
    assert queued == [(("team-a", "digits"), 0.0)]


def test_a_report_on_a_finished_job_wakes_nothing(queued: list[Any]) -> None:
    wake.WAKER.saw_report("team-a", "digits", None)
    finished = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    report_event("MODIFIED", {"phase": "Succeeded"}, **finished)
    assert queued == []


def test_a_deleted_trainjob_is_forgotten() -> None:
    from raytrain_operator.handlers import reconcile

    reconcile._lock("uid-gone")
    wake.WAKER.saw_report("team-a", "digits", {"phase": "Running"})
    report_event("DELETED", None, uid="uid-gone")
    assert "uid-gone" not in reconcile._locks
    assert ("team-a", "digits") not in wake.WAKER._reports


def test_a_deleted_trainjobs_queued_pass_is_dropped() -> None:
    ran: list[str] = []
    waker = wake.Waker(lambda key, cause: ran.append(key[1]))
    waker.schedule(("ns", "gone"), 0.2, wake.RESYNC)
    waker.schedule(("ns", "kept"), 0.3, wake.RESYNC)
    waker.forget_trainjob("ns", "gone")
    assert set(waker.pending()) == {("ns", "kept")}
    wait_until(lambda: ran == ["kept"])
    pause = threading.Event()
    pause.wait(0.1)  # past the dropped pass's time: it does not run late either
    assert ran == ["kept"]
    assert waker.pending() == {}


def test_a_starting_cluster_is_looked_at_once_when_due_then_with_the_resync() -> None:
    from datetime import datetime, timedelta, timezone

    from raytrain_operator.handlers import reconcile

    now = datetime(2026, 11, 23, 10, 0, 0, tzinfo=timezone.utc)

    def started(seconds_ago: float, deployment: str = "Initializing") -> dict[str, Any]:
        when = (now - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return rayjob({"jobDeploymentStatus": deployment, "startTime": when})

    look = reconcile._first_unschedulable_look
    assert look(started(3), now) == pytest.approx(7.5)
    assert look(started(11), now) is None  # the first look is done: the resync repeats it
    assert look(started(3, "Running"), now) is None
    assert look(rayjob({"jobDeploymentStatus": "Initializing"}), now) is None
    assert look(None, now) is None


# ------------------------------------------------------------------------------- the resync

SUCCEEDED = {
    "phase": "Succeeded",
    "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
}


@pytest.mark.parametrize(
    ("status", "spec", "queued_in"),
    [
        ({"attempt": 0, "restarts": 0}, {}, 60.0),  # running: the next pass in one interval
        (SUCCEEDED, {}, None),  # finished: no more passes
        (SUCCEEDED, {"ttlSecondsAfterFinished": 3600}, 60.0),  # its TTL clean-up to come
    ],
)
def test_a_pass_queues_the_next_resync_while_the_job_needs_the_operator(
    monkeypatch: pytest.MonkeyPatch,
    status: dict[str, Any],
    spec: dict[str, Any],
    queued_in: float | None,
) -> None:
    from _factories import UID, manifest

    from raytrain_operator.handlers import reconcile

    monkeypatch.setattr(wake.CONFIG, "resync_seconds", 60.0)
    monkeypatch.setattr(reconcile.preflight, "check", lambda tj, meta: None)
    for post in ("info", "warn"):  # the pass's Events
        monkeypatch.setattr(kopf, post, lambda *args, **kwargs: None)
    seen: list[tuple[tuple[str, str], float, str]] = []
    monkeypatch.setattr(
        reconcile.WAKER,
        "schedule",
        lambda key, delay=0.0, cause=wake.WAKE: seen.append((key, delay, cause)),
    )
    running = {
        "metadata": {
            "name": "digits-0",
            "namespace": "team-a",
            "labels": {"raytrain.dev/trainjob": "digits", "raytrain.dev/attempt": "0"},
            "ownerReferences": [{"uid": UID}],
            "annotations": {},
        },
        "spec": {"suspend": False},
        "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"},
    }
    body = {**manifest(**spec), "status": status}
    index = {("team-a", "digits"): [running]}
    reconcile.reconcile("resync", kopf.Body(body), kopf.Patch(), logging.getLogger("t"), index, {})
    resyncs = [(delay, cause) for key, delay, cause in seen if cause == wake.RESYNC]
    assert resyncs == ([] if queued_in is None else [(queued_in, wake.RESYNC)])
