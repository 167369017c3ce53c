"""Attempts never overlap, and a lost or stale status never sends the job back an attempt."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import kopf
import pytest
from _factories import UID, manifest, meta, trainjob
from _passes import passed

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_operator import k8s
from raytrain_operator.handlers import apply, reconcile
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status import machine as m

NOW = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)
LOG = logging.getLogger("test")


def rayjob(
    attempt: int, *, deployment: str = "Running", deleting: bool = False, uid: str = UID
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": f"digits-{attempt}",
        "namespace": "team-a",
        "labels": {"raytrain.dev/trainjob": "digits", "raytrain.dev/attempt": str(attempt)},
        "ownerReferences": [{"uid": uid}],
        "annotations": {},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-22T07:59:00Z"
    return {
        "metadata": metadata,
        "spec": {"suspend": False},
        "status": {"jobDeploymentStatus": deployment},
    }


def plan(status: dict[str, Any], rj: dict[str, Any] | None, **kw: Any) -> m.Plan:
    return m.plan(
        m.Observation(
            meta=meta(), trainjob=TrainJob.model_validate(manifest(backoffLimit=2)),
            status=status, now=NOW, rayjob=rj, **kw,
        )
    )  # fmt: skip


# ---------------------------------------------------------------------------- the state machine


def test_the_attempt_never_goes_below_a_rayjob_that_exists() -> None:
    # The status patch that moved to attempt 1 was lost; RayJob digits-1 exists.
    p = plan({"attempt": 0, "restarts": 1}, rayjob(1), highest_attempt=1)
    assert p.status["attempt"] == 1 and p.status["rayJobName"] == "digits-1"
    assert not any(isinstance(a, m.EnsureChildren) for a in p.actions)


def test_a_failed_attempt_is_left_alone_until_the_next_attempt_is_on_record() -> None:
    failed = rayjob(0, deployment="Failed")
    first = plan({"attempt": 0, "restarts": 0}, failed, highest_attempt=0)
    assert first.actions == [] and first.status["attempt"] == 1
    # That status patch was lost: the same decision again, still without touching RayJob 0.
    again = plan({"attempt": 0, "restarts": 0}, failed, highest_attempt=0)
    assert again.actions == [] and again.status == first.status


def test_a_rayjob_being_deleted_is_waited_for_not_recreated() -> None:
    p = plan({"attempt": 0}, rayjob(0, deleting=True), highest_attempt=0)
    assert p.actions == []
    assert p.status["conditions"][-1]["reason"] == "RayJobDeleting"


def test_the_next_attempt_waits_for_every_older_rayjob() -> None:
    older = {"digits-0": True, "digits-1": False}
    p = plan({"attempt": 2, "restarts": 2}, None, older_rayjobs=older, highest_attempt=1)
    assert p.actions == [m.DeleteRayJob("digits-1")]
    assert p.phase == "Pending"


# ---------------------------------------------------------------------------- the fence (I/O)


class Server:
    """The TrainJob's status and the RayJobs, as the API server has them now."""

    def __init__(self, attempt: int, rayjobs: list[dict[str, Any]]) -> None:
        self.trainjob = {"metadata": {"uid": UID}, "status": {"attempt": attempt}}
        self.rayjobs = rayjobs
        self.pods: list[dict[str, Any]] | None = []
        self.ensured: list[int] = []  # the attempts whose RayJob was created
        self.children: list[str] = []  # the kinds of every child created


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Server:
    srv = Server(0, [])
    monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: srv.trainjob)
    monkeypatch.setattr(k8s, "list_rayjobs", lambda ns, selector: list(srv.rayjobs))
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: srv.pods)

    def ensure(body: dict[str, Any], meta: Any) -> bool:
        srv.children.append(body["kind"])
        if body["kind"] == "RayJob":
            srv.ensured.append(int(body["metadata"]["labels"]["raytrain.dev/attempt"]))
        return True

    monkeypatch.setattr(apply, "_ensure", ensure)
    return srv


def run_actions(actions: list[m.Action]) -> None:
    apply.run(PassState(), actions, trainjob(), meta(), kopf.Patch(), None, LOG)


def test_a_stale_snapshot_creates_nothing(server: Server) -> None:
    # The snapshot says attempt 0 and RayJob 0 is gone; the server is at attempt 1 already.
    server.trainjob["status"] = {"attempt": 1}
    with pytest.raises(apply.Fenced, match="attempt 1"):
        run_actions([m.EnsureChildren(0, False)])
    assert server.ensured == []
    # Only what names no attempt went out beside the fence's reads.
    assert set(server.children) <= {"Role", "ServiceAccount"}


def test_a_rayjob_of_another_attempt_blocks_the_next_one(server: Server) -> None:
    server.trainjob["status"] = {"attempt": 1}
    server.rayjobs = [rayjob(0, deleting=True)]
    with pytest.raises(apply.Fenced, match="digits-0"):
        run_actions([m.EnsureChildren(1, False)])
    server.rayjobs = []
    run_actions([m.EnsureChildren(1, False)])
    assert server.ensured == [1]


def test_a_pod_of_another_attempt_blocks_the_next_one(server: Server) -> None:
    server.trainjob["status"] = {"attempt": 1}
    labels = {"raytrain.dev/trainjob": "digits", "raytrain.dev/attempt": "0"}
    server.pods = [{"metadata": {"name": "digits-0-abc-worker-x", "labels": labels}}]
    with pytest.raises(apply.Fenced, match="digits-0-abc-worker-x"):
        run_actions([m.EnsureChildren(1, False)])
    server.pods = None  # the operator may not list pods: the RayJobs decide alone
    run_actions([m.EnsureChildren(1, False)])
    assert server.ensured == [1]


def test_a_higher_rayjob_on_the_server_fences_a_lower_attempt(server: Server) -> None:
    server.rayjobs = [rayjob(1)]  # status patch lost, RayJob 1 created
    with pytest.raises(apply.Fenced):
        run_actions([m.EnsureChildren(0, False)])


def test_a_foreign_rayjob_with_our_label_does_not_count(server: Server) -> None:
    server.rayjobs = [rayjob(3, uid="someone-else")]
    run_actions([m.EnsureChildren(0, False)])
    assert server.ensured == [0]


# ------------------------------------------------------------------- one pass, from the index


def test_a_pass_with_a_stale_body_follows_the_rayjobs_in_the_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"no API call expected: {args}")

    for name in ("create", "apply", "get", "get_rayjob", "delete_rayjob", "patch_rayjob"):
        monkeypatch.setattr(k8s, name, refuse)
    monkeypatch.setattr(kopf, "info", lambda *a, **kw: None)
    monkeypatch.setattr(kopf, "warn", lambda *a, **kw: None)
    body = {**manifest(), "status": {"attempt": 0, "restarts": 0}}
    index = {("team-a", "digits"): [rayjob(0, deleting=True), rayjob(1, deployment="Initializing")]}
    patch = kopf.Patch()
    p = passed(patch, "resync", kopf.Body(body), LOG, index, {})
    assert p.status["attempt"] == 1 and p.actions == []
    assert patch["status"]["attempt"] == 1


def test_a_fenced_pass_writes_no_status(monkeypatch: pytest.MonkeyPatch) -> None:
    from raytrain_operator import metrics

    def fenced(pool: Any, meta: Any, attempt: int) -> None:
        raise apply.Fenced("the TrainJob is at attempt 1 on the API server")

    monkeypatch.setattr(apply, "fence", fenced)
    monkeypatch.setattr(reconcile.preflight, "check", lambda *a, **kw: None)
    monkeypatch.setattr(k8s, "get_rayjob", lambda ns, name: None)
    before = metrics.FENCED_PASSES._value.get()
    body = {**manifest(), "status": {"attempt": 0}}
    patch = kopf.Patch()
    passed(patch, "resync", kopf.Body(body), LOG, {}, {})
    assert "status" not in patch
    assert metrics.FENCED_PASSES._value.get() == before + 1


def test_a_first_pass_reads_no_rayjob_and_a_later_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TrainJob with no status yet: the index has no RayJob and nobody is asked (the fence
    reads the server before anything is created). Once a status is on record, a RayJob the
    index has not seen is read from the API server."""
    reads: list[str] = []
    monkeypatch.setattr(k8s, "get_rayjob", lambda ns, name: reads.append(name))
    monkeypatch.setattr(reconcile.preflight, "check", lambda *a, **kw: None)
    monkeypatch.setattr(apply, "run", lambda *args, **kwargs: [])
    monkeypatch.setattr(kopf, "info", lambda *a, **kw: None)
    new = passed(kopf.Patch(), "create", kopf.Body(manifest()), LOG, {}, {})
    assert reads == []
    assert any(isinstance(a, m.EnsureChildren) for a in new.actions)
    body = {**manifest(), "status": {"attempt": 0, "rayJobName": "digits-0"}}
    passed(kopf.Patch(), "resync", kopf.Body(body), LOG, {}, {})
    assert reads == ["digits-0"]
