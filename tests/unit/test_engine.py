"""The engine (handlers/engine.py) and its queue (handlers/queue.py): due times, one pass per
job at a time, which events queue a pass, how a pass writes, that nothing is queued for a job
where nothing happens, the resync of the whole set, and the pause: no pass and no write."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf
import pytest
from _factories import UID, manifest
from _fake_api import recorder

from raytrain_operator import k8s
from raytrain_operator.handlers import engine as engine_module
from raytrain_operator.handlers import events, queue, reconcile, trainjobs
from raytrain_operator.handlers.engine import Engine
from raytrain_operator.handlers.peering import blocking_peers
from raytrain_operator.settings import OperatorConfig

__all__ = ["recorder"]  # the fixture


def rayjob(status: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "digits-0",
            "namespace": "team-a",
            "labels": {"raytrain.dev/trainjob": "digits", "raytrain.dev/attempt": "0"},
            "ownerReferences": [{"uid": UID}],
            "annotations": {},
            **metadata,
        },
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
    ran: list[tuple[str, float, str]] = []
    q = queue.WorkQueue(lambda key, cause: ran.append((key[1], time.monotonic(), cause)))
    start = time.monotonic()
    q.schedule(("ns", "late"), 1.0, "due")
    q.schedule(("ns", "a"), 30.0, "due")
    # Earlier: replaces the 30 s one. Not due at once, so that it is still queued when the
    # next line schedules again (with 0 s it could already have run, and the 10 s would stay).
    q.schedule(("ns", "a"), 0.3)
    q.schedule(("ns", "a"), 10.0, "due")  # later than the queued one: ignored
    wait_until(lambda: len(ran) == 2)
    assert [(name, cause) for name, _, cause in ran] == [("a", "wake"), ("late", "due")]
    assert ran[0][1] - start >= 0.3
    assert ran[1][1] - start >= 1.0
    assert q.pending() == {}
    assert q.stop(5)


def test_a_pass_that_raises_is_queued_again() -> None:
    calls: list[str] = []

    def run(key: tuple[str, str], cause: str) -> None:
        calls.append(cause)
        if len(calls) == 1:
            raise RuntimeError("a bug")

    q = queue.WorkQueue(run)
    q.schedule(("ns", "a"))
    wait_until(lambda: bool(calls) and ("ns", "a") in q.pending())
    assert q.pending()[("ns", "a")] == pytest.approx(queue.ERROR_RETRY_SECONDS, abs=1.0)
    q.stop(5)


def test_passes_over_one_key_never_overlap_and_a_wake_during_a_pass_runs_after_it() -> None:
    inside, second, release = threading.Event(), threading.Event(), threading.Event()
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

    q = queue.WorkQueue(run)
    q.schedule(("ns", "a"))
    assert inside.wait(5)
    q.schedule(("ns", "a"))  # while the first pass runs
    assert not second.wait(0.2)  # no second pass begins beside the first
    release.set()
    wait_until(lambda: len(calls) == 2)
    assert overlap == [False, False]
    q.stop(5)


def test_a_paused_queue_starts_no_pass_and_keeps_what_it_holds() -> None:
    ran: list[str] = []
    q = queue.WorkQueue(lambda key, cause: ran.append(key[1]))
    q.pause()
    q.schedule(("ns", "queued-before"), 0.0)
    pause = threading.Event()
    pause.wait(0.3)  # past its due time
    assert ran == []
    assert ("ns", "queued-before") in q.pending()
    q.resume()
    wait_until(lambda: ran == ["queued-before"])
    assert q.stop(5)
    q.schedule(("ns", "after-stop"), 0.0)
    pause.wait(0.1)
    assert ran == ["queued-before"]


def test_a_deleted_trainjobs_queued_pass_is_dropped() -> None:
    ran: list[str] = []
    engine = Engine(OperatorConfig())
    engine.queue = queue.WorkQueue(lambda key, cause: ran.append(key[1]))
    engine.queue.schedule(("ns", "gone"), 0.2)
    engine.queue.schedule(("ns", "kept"), 0.3)
    engine.state.parsed[("uid-gone", 1)] = "parsed"
    engine.forget("ns", "gone", "uid-gone")
    assert set(engine.queue.pending()) == {("ns", "kept")}
    assert engine.state.parsed == {}
    wait_until(lambda: ran == ["kept"])
    pause = threading.Event()
    pause.wait(0.1)  # past the dropped pass's time: it does not run late either
    assert ran == ["kept"]
    engine.queue.stop(5)


# ------------------------------------------------------------------- which events queue


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    built = Engine(OperatorConfig())
    built.queued = []  # type: ignore[attr-defined]
    monkeypatch.setattr(
        built.queue,
        "schedule",
        lambda key, delay=0.0, cause="wake": built.queued.append((key, delay, cause)),  # type: ignore[attr-defined]
    )
    return built


def event(engine: Engine, kind: str | None, obj: dict[str, Any]) -> None:
    body = kopf.Body(obj)  # type: ignore[arg-type]
    asyncio.run(
        events.rayjob_changed(
            type=kind,
            namespace="team-a",
            name=obj["metadata"]["name"],
            meta=body.meta,
            body=body,
            memo=kopf.Memo(engine=engine),
        )
    )


def keys(engine: Engine) -> list[tuple[str, str]]:
    return [key for key, _, _ in engine.queued]  # type: ignore[attr-defined]


def test_a_rayjob_status_change_queues_its_trainjob(engine: Engine) -> None:
    created = rayjob()
    engine.seen.saw_rayjob("team-a", created)  # what the creating pass knows
    event(engine, "ADDED", created)
    assert keys(engine) == []  # its own creation: nothing new
    event(engine, "MODIFIED", rayjob({"jobDeploymentStatus": "Initializing"}))
    assert keys(engine) == [("team-a", "digits")]


def test_an_event_showing_what_the_last_pass_saw_queues_nothing(engine: Engine) -> None:
    running = rayjob({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    engine.seen.saw_rayjob("team-a", running)
    event(engine, "MODIFIED", {**running, "spec": {**running["spec"], "entrypoint": "other"}})
    assert keys(engine) == []
    event(engine, "MODIFIED", rayjob(running["status"], deletionTimestamp="2026-11-23T10:00:00Z"))
    assert len(keys(engine)) == 1


def test_deletion_queues_and_the_listing_at_start_up_does_not(engine: Engine) -> None:
    event(engine, None, rayjob({"jobDeploymentStatus": "Running"}))
    assert keys(engine) == []
    event(engine, "DELETED", rayjob())
    assert keys(engine) == [("team-a", "digits")]


def cluster_event(engine: Engine, kind: str | None, status: dict[str, Any]) -> None:
    body = kopf.Body(
        {
            "metadata": {
                "name": "digits-0-raycluster",
                "labels": {"raytrain.dev/trainjob": "digits"},
            },
            "status": status,
        }
    )
    asyncio.run(
        events.raycluster_changed(
            type=kind,
            namespace="team-a",
            name="digits-0-raycluster",
            meta=body.meta,
            status=body.status,
            memo=kopf.Memo(engine=engine),
        )
    )


def test_a_raycluster_queues_its_trainjob_only_when_what_a_pass_reads_changes(
    engine: Engine,
) -> None:
    cluster_event(engine, None, {"readyWorkerReplicas": 0})  # the listing
    cluster_event(engine, "MODIFIED", {"readyWorkerReplicas": 0, "state": "other"})
    assert keys(engine) == []
    cluster_event(engine, "MODIFIED", {"readyWorkerReplicas": 2})
    assert keys(engine) == [("team-a", "digits")]


def report_event(
    engine: Engine, kind: str, trainer_status: dict[str, Any] | None, **status: Any
) -> None:
    body = kopf.Body(
        {
            "metadata": {"uid": UID, "namespace": "team-a", "name": "digits"},
            "spec": {},
            "status": {"trainerStatus": trainer_status, **status},
        }
    )
    asyncio.run(
        trainjobs.trainjob_changed(
            type=kind,
            namespace="team-a",
            name="digits",
            body=body,
            status=body.status,
            spec=body.spec,
            meta=body.meta,
            logger=logging.getLogger("t"),
            memo=kopf.Memo(engine=engine),
            uid=UID,
        )
    )


def test_a_new_runtime_report_queues_the_trainjob_and_our_own_status_writes_do_not(
    engine: Engine,
) -> None:
    read = {
        "metadata": {"uid": UID, "namespace": "team-a", "name": "digits"},
        "status": {"trainerStatus": None, "phase": "Pending"},
    }
    patch = kopf.Patch()
    patch.status["phase"] = "Running"
    engine.seen.saw_trainjob(engine_module.written(read, patch))  # what the pass wrote
    report_event(engine, "MODIFIED", None, phase="Running")  # the event of that write
    assert keys(engine) == []
    report_event(
        engine,
        "MODIFIED",
        {"phase": "Succeeded", "lastUpdatedTime": "2026-11-23T10:00Z"},
        phase="Running",
    )
    assert keys(engine) == [("team-a", "digits")]


def test_a_status_someone_else_changed_queues_the_trainjob(engine: Engine) -> None:
    """A lost patch, a hand edit: the status is not what the operator wrote."""
    engine.seen.saw_trainjob(
        {
            "metadata": {"uid": UID, "namespace": "team-a", "name": "digits"},
            "status": {"trainerStatus": None, "attempt": 1},
        }
    )
    report_event(engine, "MODIFIED", None, attempt=1)
    assert keys(engine) == []
    report_event(engine, "MODIFIED", None, attempt=0)
    assert keys(engine) == [("team-a", "digits")]


def trainjob_event(engine: Engine, kind: str | None, **fields: Any) -> None:
    body = kopf.Body(
        {"metadata": {"uid": UID, "namespace": "team-a", "name": "digits", "generation": 1}}
        | fields
    )
    asyncio.run(
        trainjobs.trainjob_changed(
            type=kind,
            namespace="team-a",
            name="digits",
            body=body,
            status=body.status,
            spec=body.spec,
            meta=body.meta,
            logger=logging.getLogger("t"),
            memo=kopf.Memo(engine=engine),
            uid=UID,
        )
    )


def test_each_trainjob_event_queues_a_pass_labelled_with_what_it_brought(engine: Engine) -> None:
    """A new TrainJob (its body handed to the first pass), one listed at the watch's start, a
    new spec, and an event of a job no pass has read (a status changed meanwhile)."""
    key = ("team-a", "digits")
    trainjob_event(engine, "ADDED", spec={"image": "a"})
    assert engine.queued[-1] == (key, 0.0, "create")  # type: ignore[attr-defined]
    assert engine._created[key]["spec"] == {"image": "a"}
    engine.forget(*key, UID)
    trainjob_event(engine, None, spec={"image": "a"}, status={"observedGeneration": 1})
    assert engine.queued[-1] == (key, 0.0, "resume")  # type: ignore[attr-defined]
    assert key not in engine._created
    seen = {"observedGeneration": 1, "phase": "Running"}
    engine.seen.saw_trainjob(
        {
            "metadata": {"uid": UID, "namespace": "team-a", "name": "digits", "generation": 1},
            "status": seen,
        }
    )
    engine.queued.clear()  # type: ignore[attr-defined]
    trainjob_event(engine, "MODIFIED", spec={"image": "a"}, status=seen)
    assert engine.queued == []  # type: ignore[attr-defined]
    edited = {"uid": UID, "namespace": "team-a", "name": "digits", "generation": 2}
    trainjob_event(engine, "MODIFIED", spec={"image": "b"}, status=seen, metadata=edited)
    assert engine.queued[-1] == (key, 0.0, "update")  # type: ignore[attr-defined]
    engine.forget(*key, UID)
    # A status that changed before any pass here read the job (an ADDED with a status: a job
    # restored from a backup, say) is read again by its pass, not taken from the event.
    trainjob_event(engine, "ADDED", status={"attempt": 2})
    assert engine.queued[-1] == (key, 0.0, "create")  # type: ignore[attr-defined]
    assert key not in engine._created


def test_a_report_on_a_finished_job_queues_nothing(engine: Engine) -> None:
    engine.seen.saw_trainjob({"metadata": {"uid": UID, "namespace": "team-a", "name": "digits"}})
    finished = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    report_event(engine, "MODIFIED", {"phase": "Succeeded"}, **finished)
    assert keys(engine) == []


# ------------------------------------------------------------------- how a pass writes


def test_a_pass_writes_its_status_over_the_trainjob_it_read(
    recorder: list[dict[str, Any]],
) -> None:
    patch = kopf.Patch()
    patch.status["phase"] = "Running"
    patch.metadata.annotations["raytrain.dev/checkpoint-requested"] = None
    metadata = {"uid": "u-1", "resourceVersion": "41"}
    assert Engine(OperatorConfig()).write("team-a", "digits", metadata, patch)
    first, second = recorder
    path = "/apis/raytrain.dev/v1alpha1/namespaces/team-a/trainjobs/digits"
    assert (first["path"], first["content_type"]) == (path, "application/merge-patch+json")
    assert first["body"] == {
        "metadata": {"uid": "u-1", "annotations": {"raytrain.dev/checkpoint-requested": None}}
    }
    assert second["path"] == path + "/status"
    assert second["body"] == {"metadata": {"uid": "u-1"}, "status": {"phase": "Running"}}


def test_a_replaced_trainjob_gets_nothing_more(recorder: list[dict[str, Any]]) -> None:
    import _fake_api

    _fake_api.Recorder.patch_status = 409  # the uid precondition failed
    patch = kopf.Patch()
    patch.status["phase"] = "Running"
    assert not Engine(OperatorConfig()).write("team-a", "digits", {"uid": "u-1"}, patch)
    (only,) = recorder
    assert only["body"]["metadata"] == {"uid": "u-1"}


def test_a_paused_engine_writes_nothing_and_keeps_the_job_queued(
    recorder: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(OperatorConfig())
    before = k8s.configure(may_write=engine.may_write)
    try:
        engine.set_paused(True)
        patch = kopf.Patch()
        patch.status["phase"] = "Running"
        with pytest.raises(k8s.WritesPaused):
            engine.write("team-a", "digits", {"uid": "u-1"}, patch)
        assert recorder == []
        # A pass caught by the pause mid-way is queued again (it runs once the pause ends).
        monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: {**manifest(), "status": {}})

        def reconcile_(*args: Any, **kwargs: Any) -> Any:
            return engine.write("team-a", "digits", {"uid": UID}, patch)

        monkeypatch.setattr(engine_module, "reconcile", reconcile_)
        engine.run_pass(("team-a", "digits"), "due")
        assert recorder == []
        assert engine.queue.pending().keys() == {("team-a", "digits")}
    finally:
        k8s.configure(before.user_agent, before.may_write)
        engine.queue.stop(1)


def test_a_creation_events_body_runs_the_first_pass_unless_a_pause_came_between(
    monkeypatch: pytest.MonkeyPatch, engine: Engine
) -> None:
    """The body a creation event brought runs the first pass, read from nobody and without
    the fence (created=True); a pass after a pause reads the TrainJob as it is then."""
    reads: list[str] = []
    runs: list[tuple[bool, dict[str, Any]]] = []
    now = {**manifest(), "status": {"attempt": 3}}

    def get_trainjob(ns: str, name: str) -> dict[str, Any]:
        reads.append(name)
        return now

    def reconcile_(state: Any, cause: str, obj: Any, *args: Any, created: bool = False) -> Any:
        runs.append((created, obj))
        return reconcile.PassResult(reconcile.machine.Plan(), kopf.Patch(), write=False)

    monkeypatch.setattr(k8s, "get_trainjob", get_trainjob)
    monkeypatch.setattr(engine_module, "reconcile", reconcile_)
    key = ("team-a", "digits")
    engine.enqueue(key, "create", created=manifest())
    engine.run_pass(key, "create")
    assert reads == [] and runs[-1] == (True, manifest())
    engine.enqueue(key, "create", created=manifest())
    engine.set_paused(True)
    engine.set_paused(False)
    engine.run_pass(key, "create")
    assert reads == ["digits"] and runs[-1] == (False, now)
    engine.queue.stop(1)


# ------------------------------------------------------- nothing runs for an idle job


def running_index() -> dict[tuple[str, str], list[dict[str, Any]]]:
    return {
        ("team-a", "digits"): [rayjob({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})]
    }


SUCCEEDED = {
    "phase": "Succeeded",
    "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
}


@pytest.mark.parametrize(
    ("status", "spec", "due"),
    [
        ({"attempt": 0, "restarts": 0}, {}, None),  # running: nothing is due, no resync
        ({"attempt": 0, "restarts": 0, "startTime": "now"}, {"activeDeadlineSeconds": 3600}, "due"),
        (SUCCEEDED, {"ttlSecondsAfterFinished": 3600}, "due"),  # its TTL clean-up to come
    ],
)
def test_a_pass_queues_its_job_again_only_for_what_falls_due(
    monkeypatch: pytest.MonkeyPatch,
    engine: Engine,
    status: dict[str, Any],
    spec: dict[str, Any],
    due: str | None,
) -> None:
    monkeypatch.setattr(reconcile.preflight, "check", lambda *a, **kw: None)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = {**manifest(**spec), "status": {k: now if v == "now" else v for k, v in status.items()}}
    if status is SUCCEEDED:
        obj["status"] = {**SUCCEEDED, "completionTime": now}
    monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: obj)
    monkeypatch.setattr(engine, "write", lambda *a: True)
    monkeypatch.setattr(reconcile.apply, "run", lambda *a, **kw: [])  # no child to touch
    monkeypatch.setattr(k8s, "post_event", lambda *args: None)  # the pass's Events
    engine.indexes = (running_index(), {})
    engine.run_pass(("team-a", "digits"), "create")
    causes = [cause for _, _, cause in engine.queued]  # type: ignore[attr-defined]
    assert causes == ([] if due is None else [due])


def test_a_starting_cluster_is_looked_at_when_due_and_then_less_and_less_often() -> None:
    now = datetime(2026, 11, 23, 10, 0, 0, tzinfo=timezone.utc)

    def started(seconds_ago: float, deployment: str = "Initializing") -> dict[str, Any]:
        when = (now - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return rayjob({"jobDeploymentStatus": deployment, "startTime": when})

    look = reconcile._unschedulable_look
    assert look(started(3), now, 300) == pytest.approx(7.5)
    # Looks at 10, 70, 190, 430 s after the start, then 300 s apart (the resync interval).
    assert look(started(11), now, 300) == pytest.approx(59.5)
    assert look(started(100), now, 300) == pytest.approx(90.5)
    assert look(started(200), now, 300) == pytest.approx(230.5)
    assert look(started(500), now, 300) == pytest.approx(230.5)
    assert look(started(11), now, 2) == pytest.approx(1.5)
    assert look(started(3, "Running"), now, 60) is None
    assert look(rayjob({"jobDeploymentStatus": "Initializing"}), now, 60) is None
    assert look(None, now, 60) is None


# ---------------------------------------------------------------------------- the resync


def listing(monkeypatch: pytest.MonkeyPatch, listed: dict[str, list[dict[str, Any]]]) -> list[bool]:
    """k8s.iter_all answering from `listed` by plural; records whether each list asked for
    metadata only."""
    asked: list[bool] = []

    def iter_all(
        group: str, version: str, plural: str, ns: Any, selector: str = "", **kw: Any
    ) -> Any:
        asked.append(bool(kw.get("metadata_only")))
        return iter([{"metadata": dict(o["metadata"])} for o in listed[plural]])

    monkeypatch.setattr(k8s, "iter_all", iter_all)
    return asked


def versioned(obj: dict[str, Any], version: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}


def test_the_resync_compares_versions_of_metadata_and_queues_only_what_no_event_showed(
    monkeypatch: pytest.MonkeyPatch, engine: Engine
) -> None:
    job = versioned({**manifest(), "status": {"attempt": 0}}, "10")
    running = versioned(rayjob({"jobDeploymentStatus": "Running"}), "11")
    listed = {"trainjobs": [job], "rayjobs": [running], "rayclusters": []}
    asked = listing(monkeypatch, listed)
    # What the watches showed (every event records its version, news or not).
    engine.seen.saw_version("trainjobs", job["metadata"], UID)
    engine.seen.saw_version("rayjobs", running["metadata"], "digits")
    assert engine.resync() == 0
    assert asked and all(asked), "the resync lists metadata only"
    # A RayJob event that never arrived, whatever it changed:
    listed["rayjobs"] = [versioned(running, "15")]
    assert engine.resync() == 1
    assert engine.queued == [(("team-a", "digits"), 0.0, "resync")]  # type: ignore[attr-defined]
    # An older version than the watch showed (a list served from a lagging cache) is not news.
    engine.seen.saw_version("rayjobs", versioned(running, "20")["metadata"], "digits")
    listed["rayjobs"] = [versioned(running, "19")]
    engine.queued.clear()  # type: ignore[attr-defined]
    assert engine.resync() == 0
    # A TrainJob whose ADDED event was missed, and one edited without an event:
    other = {**manifest(), "metadata": {**job["metadata"], "name": "other"}}
    listed["trainjobs"] = [versioned(job, "30"), other]
    assert engine.resync() == 2
    assert sorted(keys(engine)) == [("team-a", "digits"), ("team-a", "other")]


def test_the_resync_queues_the_owner_of_a_rayjob_gone_unseen_and_forgets_a_trainjob_gone_unseen(
    monkeypatch: pytest.MonkeyPatch, engine: Engine
) -> None:
    listing(monkeypatch, {"trainjobs": [], "rayjobs": [], "rayclusters": []})
    gone = rayjob()
    gone["metadata"].update(name="digits-3", resourceVersion="5")
    engine.seen.saw_version("rayjobs", gone["metadata"], "digits")
    engine.seen.saw_version(
        "trainjobs", {"namespace": "team-a", "name": "deleted", "resourceVersion": "4"}, "u-9"
    )
    forgotten: list[tuple[str, str, Any]] = []
    monkeypatch.setattr(engine, "forget", lambda ns, name, uid: forgotten.append((ns, name, uid)))
    # The owner comes from the label the RayJob carried, not from its name.
    assert engine.resync() == 1
    assert keys(engine) == [("team-a", "digits")]
    assert forgotten == [("team-a", "deleted", "u-9")]
    assert engine.resync() == 0


def test_a_resync_pass_reads_the_rayjobs_from_the_api_not_from_the_indexes(
    monkeypatch: pytest.MonkeyPatch, engine: Engine
) -> None:
    """The watch that missed an event fills kopf's indexes too."""
    given: list[tuple[Any, Any]] = []

    def reconcile_(
        state: Any, cause: str, obj: Any, log: Any, rayjobs: Any, clusters: Any, **kw: Any
    ) -> Any:
        given.append((rayjobs, clusters))
        return reconcile.PassResult(reconcile.machine.Plan(), kopf.Patch(), write=False)

    monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: {**manifest(), "status": {}})
    monkeypatch.setattr(engine_module, "reconcile", reconcile_)
    engine.indexes = ({"index": []}, {"index": []})
    engine.run_pass(("team-a", "digits"), "resync")
    engine.run_pass(("team-a", "digits"), "wake")
    assert given == [(None, None), engine.indexes]


# ---------------------------------------------------------------------------- the peering


def test_a_live_peer_of_higher_or_equal_priority_pauses_and_a_dead_one_does_not() -> None:
    now = datetime(2026, 11, 23, 10, 0, 0, tzinfo=timezone.utc)
    fresh = "2026-11-23T09:59:50.123456+00:00"
    status = {
        "me": {"priority": 5, "lifetime": 60, "lastseen": fresh},
        "newer": {"priority": 9, "lifetime": 60, "lastseen": fresh},
        "older": {"priority": 1, "lifetime": 60, "lastseen": fresh},
        "dead": {"priority": 99, "lifetime": 60, "lastseen": "2026-11-23T09:00:00+00:00"},
    }
    blocking, ends_in = blocking_peers(status, "me", 5, now)
    assert blocking == ["newer"] and ends_in == pytest.approx(50, abs=1)
    assert blocking_peers({**status, "twin": status["me"]}, "me", 5, now)[0] == ["newer", "twin"]
    assert blocking_peers(status, "newer", 9, now) == ([], None)


def test_an_instance_writes_only_once_settled_in_the_peering_with_no_peer_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Paused from the start; resumed once its own heartbeat has been in the peering object
    for SETTLE_SECONDS with no peer of higher or equal priority; a peer that registers during
    the settling pauses it for good; no peering object at all pauses nothing."""
    from raytrain_operator.handlers import peering

    clock = [1000.0]
    monkeypatch.setattr(peering.time, "monotonic", lambda: clock[0])
    fresh = datetime.now(timezone.utc).isoformat()
    changes: list[bool] = []
    watch = peering.PeeringWatch("p", [], "me", 5, changes.append, settle_seconds=10)
    assert watch.paused
    me = {"me": {"priority": 5, "lifetime": 60, "lastseen": fresh}}
    assert watch._set(None, {}) == 10  # the object, without this instance's heartbeat yet
    assert watch.paused and changes == []
    assert watch._set(None, me) == pytest.approx(10)
    clock[0] += 9.5
    assert watch._set(None, me) == pytest.approx(0.5) and watch.paused
    clock[0] += 0.5
    watch._set(None, me)
    assert not watch.paused and changes == [False]
    # A peer that started at about the same time registers, with the higher priority: paused.
    newer = {**me, "newer": {"priority": 9, "lifetime": 60, "lastseen": fresh}}
    watch._set(None, newer)
    assert watch.paused and changes == [False, True]

    other = peering.PeeringWatch("p", [], "me", 5, changes.append, settle_seconds=10)
    other._set(None, me)
    watch = other
    clock[0] += 3
    watch._set(None, newer)  # the newer one came while this one settled: it never writes
    clock[0] += 30
    watch._set(None, newer)
    assert watch.paused and changes == [False, True]

    alone = peering.PeeringWatch("p", [], "me", 5, changes.append, settle_seconds=10)
    alone._set(None, {}, exists=False)
    assert not alone.paused and changes == [False, True, False]


def test_a_creation_while_paused_runs_its_pass_from_a_fresh_read(engine: Engine) -> None:
    engine.set_paused(True)
    engine.enqueue(("team-a", "digits"), "create", created=manifest())
    assert ("team-a", "digits") not in engine._created
    engine.set_paused(False)
    engine.enqueue(("team-a", "digits"), "create", created=manifest())
    assert ("team-a", "digits") in engine._created


def test_what_a_pass_wrote_is_a_merge_patch_of_what_it_read() -> None:
    patch = kopf.Patch()
    patch.status["workers"] = {"ready": 2}
    patch.status["resumedFrom"] = None
    read = {"status": {"workers": {"desired": 2, "ready": 0}, "resumedFrom": "s3://b/c"}}
    assert engine_module.written(read, patch)["status"] == {"workers": {"desired": 2, "ready": 2}}
