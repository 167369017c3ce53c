"""A checkpoint the runtime's resume check passed over (status.checkpoint.rejected) becomes one
Warning Event `CheckpointRejected` on the TrainJob, once: status.announcedRejection keeps the
newest entry announced, written by the same status patch."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest
from _factories import manifest
from _fake_api import recorder
from _passes import passed
from test_status_machine import rayjob, run, status_after

from raytrain_operator import k8s
from raytrain_operator.handlers import reconcile
from raytrain_operator.handlers.engine import Engine
from raytrain_operator.settings import OperatorConfig
from raytrain_operator.status import machine as m

__all__ = ["recorder"]  # the fixture

RUN = "s3://raytrain/checkpoints/digits-5f0c2a7e91b3"
C1, C2, C3 = (f"{RUN}/checkpoint_2026-12-03_12-0{i}-00.000000" for i in (1, 2, 3))


def entry(uri: str, attempt: int, reason: str, problem: str = "size") -> dict[str, Any]:
    return {
        "uri": uri,
        "problem": problem,
        "reason": reason,
        "attempt": attempt,
        "time": f"2026-12-03T12:1{attempt}:00Z",
    }


SHORT = "file model.pt is 12 bytes, the manifest says 1234"
NO_MANIFEST = "no manifest (.raytrain/manifest.json): its upload did not finish"


def resumed(
    attempt: int, rejected: list[dict[str, Any]], resumed_from: str | None = C1, **more: Any
) -> dict[str, Any]:
    """The status once attempt `attempt`'s runtime reported its resume."""
    checkpoint: dict[str, Any] = {
        "count": 3,
        "latestURI": resumed_from,
        "resumedAttempt": attempt,
        "rejected": rejected,
    }
    if resumed_from is not None:
        checkpoint["resumedFrom"] = resumed_from
    return {
        "attempt": attempt,
        "restarts": attempt,
        "trainerStatus": {"phase": "Running", "attempt": attempt, "message": "epoch 4"},
        "checkpoint": checkpoint,
        **more,
    }


def running(attempt: int) -> dict[str, Any]:
    return rayjob(f"digits-{attempt}", deployment="Running", job_status="RUNNING")


def test_each_new_rejection_is_announced_with_what_was_used_instead() -> None:
    rejected = [entry(C3, 1, SHORT), entry(C2, 1, NO_MANIFEST, "no-manifest")]
    p = run(None, resumed(1, rejected), running(1))
    assert p.phase == "Running"
    assert p.checkpoint_rejections == [
        f"checkpoint {C3} rejected by attempt 1: {SHORT} (size); resumed from {C1} instead",
        f"checkpoint {C2} rejected by attempt 1: {NO_MANIFEST} (no-manifest); "
        f"resumed from {C1} instead",
    ]
    assert p.status["announcedRejection"] == {
        "uri": C2,
        "attempt": 1,
        "time": "2026-12-03T12:11:00Z",
    }


def test_a_rejection_is_announced_once() -> None:
    st = resumed(1, [entry(C3, 1, SHORT)])
    first = run(None, st, running(1))
    assert len(first.checkpoint_rejections) == 1
    after = status_after(first, st)
    again = run(None, after, running(1))
    assert again.checkpoint_rejections == []
    # Nothing to write: the record is what the TrainJob holds already.
    assert "announcedRejection" not in again.status


def test_only_the_entries_after_the_newest_announced_are_new() -> None:
    old = [entry(C3, 1, SHORT)]
    st = resumed(1, old, announcedRejection={"uri": C3, "attempt": 1, "time": old[0]["time"]})
    # Attempt 2 finds C2 bad too, and no checkpoint it can use.
    later = resumed(2, [*old, entry(C2, 2, NO_MANIFEST, "no-manifest")], resumed_from=None)
    later["announcedRejection"] = st["announcedRejection"]
    p = run(None, later, running(2))
    assert p.checkpoint_rejections == [
        f"checkpoint {C2} rejected by attempt 2: {NO_MANIFEST} (no-manifest); "
        "no checkpoint could be used"
    ]
    assert p.status["announcedRejection"]["uri"] == C2
    # The same checkpoint rejected again by a later attempt is a new entry.
    third = resumed(3, [*later["checkpoint"]["rejected"], entry(C3, 3, "marked rejected earlier")])
    third["announcedRejection"] = p.status["announcedRejection"]
    (again,) = run(None, third, running(3)).checkpoint_rejections
    assert again.startswith(f"checkpoint {C3} rejected by attempt 3: marked rejected earlier")


def test_resumed_from_counts_only_for_the_attempt_that_resumed() -> None:
    # Attempt 2's rejection, while resumedFrom is still attempt 1's (it did not report its own).
    st = resumed(1, [entry(C2, 2, SHORT)])
    (message,) = run(None, st, running(1)).checkpoint_rejections
    assert message.endswith("; no checkpoint could be used"), message


def test_every_entry_is_new_when_the_list_no_longer_holds_the_announced_one() -> None:
    # More than the 20 kept arrived at once: the announced one was dropped from the front.
    rejected = [entry(f"{RUN}/checkpoint_{i:02d}", 2, SHORT) for i in range(20)]
    gone = {"uri": C3, "attempt": 1, "time": "2026-12-03T12:11:00Z"}
    p = run(None, resumed(2, rejected, announcedRejection=gone), running(2))
    assert len(p.checkpoint_rejections) == 20
    assert p.status["announcedRejection"]["uri"] == f"{RUN}/checkpoint_19"


def test_the_pass_that_fails_the_attempt_announces_them_too() -> None:
    st = resumed(0, [entry(C1, 0, SHORT)], resumed_from=None)
    st["trainerStatus"] = {
        "phase": "Failed",
        "attempt": 0,
        "message": f"none of the run's 1 checkpoint(s) can be resumed from ({C1}: {SHORT})",
    }
    p = run(None, st, running(0))
    assert p.phase == "Failed"
    assert p.checkpoint_rejections == [
        f"checkpoint {C1} rejected by attempt 0: {SHORT} (size); no checkpoint could be used"
    ]


def test_a_job_without_rejections_announces_nothing() -> None:
    for checkpoint in ({}, {"count": 2, "latestURI": C1}, {"rejected": []}):
        p = run(None, {"attempt": 0, "checkpoint": checkpoint}, running(0))
        assert p.checkpoint_rejections == [] and "announcedRejection" not in p.status


# ------------------------------------------------------------------ through a pass, the engine


def pass_body(status: dict[str, Any]) -> tuple[kopf.Body, dict[Any, Any]]:
    rj = running(status["attempt"])
    rj["metadata"]["labels"] = {"raytrain.dev/attempt": str(status["attempt"])}
    return kopf.Body({**manifest(), "status": status}), {("team-a", "digits"): [rj]}


def test_one_pass_posts_a_warning_and_writes_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    warned: list[tuple[str, str]] = []
    monkeypatch.setattr(kopf, "info", lambda *a, **kw: None)
    monkeypatch.setattr(
        kopf, "warn", lambda body, reason, message: warned.append((reason, message))
    )
    st = resumed(1, [entry(C3, 1, SHORT)])
    body, index = pass_body(st)
    patch = kopf.Patch()
    passed(patch, "report", body, logging.getLogger("t"), index, {})
    assert warned == [
        (
            "CheckpointRejected",
            f"checkpoint {C3} rejected by attempt 1: {SHORT} (size); resumed from {C1} instead",
        )
    ]
    record = patch["status"]["announcedRejection"]
    assert record == {"uri": C3, "attempt": 1, "time": "2026-12-03T12:11:00Z"}
    # The next pass reads the record back: nothing more is posted or written about it.
    body, index = pass_body({**st, "announcedRejection": record})
    patch = kopf.Patch()
    passed(patch, "resync", body, logging.getLogger("t"), index, {})
    assert [r for r, _ in warned] == ["CheckpointRejected"]
    assert "announcedRejection" not in (patch.get("status") or {})


def test_the_engine_posts_the_event_on_the_trainjob(
    recorder: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(OperatorConfig())
    monkeypatch.setattr(engine.queue, "schedule", lambda *a, **kw: None)
    st = resumed(1, [entry(C3, 1, SHORT)])
    body, index = pass_body(st)
    monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: dict(body))
    monkeypatch.setattr(reconcile.apply, "run", lambda *a, **kw: [])
    engine.indexes = (index, {})
    engine.run_pass(("team-a", "digits"), "report")
    writes = [r for r in recorder if r["method"] == "PATCH"]
    assert writes[-1]["path"].endswith("/trainjobs/digits/status")
    assert writes[-1]["body"]["status"]["announcedRejection"]["uri"] == C3
    posted = [r["body"] for r in recorder if r["path"] == "/api/v1/namespaces/team-a/events"]
    rejected = [e for e in posted if e["reason"] == m.CHECKPOINT_REJECTED]
    assert len(rejected) == 1, posted
    event = rejected[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "digits" and event["involvedObject"]["kind"] == (
        "TrainJob"
    )
    assert C3 in event["message"] and SHORT in event["message"] and C1 in event["message"]
    engine.queue.stop(1)
