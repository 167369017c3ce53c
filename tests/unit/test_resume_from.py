"""spec.resumeFrom: the checkpoint it names reaches the contract and status.resumedFrom, the
source TrainJob is resolved once with a message for each way it cannot be used, and a failed
job's message says how to continue it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from _factories import manifest, meta

from raytrain_contract import load_contract
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.timefmt import rfc3339
from raytrain_contract.v1 import ContractError, dump_contract
from raytrain_operator import k8s
from raytrain_operator.builders.contract import build_contract, build_contract_configmap
from raytrain_operator.handlers import preflight
from raytrain_operator.status import machine as m
from raytrain_operator.status.conditions import find

NOW = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)
LATEST = "s3://bucket/prefix/old-0123456789ab/checkpoint_2026-11-20_10-00-00.000000"


def tj(**spec: Any) -> TrainJob:
    return TrainJob.model_validate(manifest(**spec))


def plan(trainjob: TrainJob, status: dict[str, Any], **kw: Any) -> m.Plan:
    return m.plan(m.Observation(meta=meta(), trainjob=trainjob, status=status, now=NOW, **kw))


def failed_message(p: m.Plan) -> str:
    found = find(p.status["conditions"], "Failed")
    assert found is not None and found["status"] == "True"
    return str(found["message"])


# ---------------------------------------------------------------------------------- contract


def test_the_contract_carries_the_checkpoint_only_when_there_is_one() -> None:
    job = tj()
    plain = dump_contract(build_contract(job, meta(), 0))
    assert "resumeFrom" not in plain  # documents of jobs without it stay what 0.1.0 reads
    seeded = dump_contract(build_contract(job, meta(), 0, LATEST))
    assert seeded["resumeFrom"] == LATEST
    assert load_contract(seeded).resume_from == LATEST
    configmap = build_contract_configmap(job, meta(), 1, LATEST)
    assert LATEST in configmap["data"]["contract.json"]


def test_the_runtime_refuses_a_relative_checkpoint_location() -> None:
    doc = dump_contract(build_contract(tj(), meta(), 0, LATEST))
    doc["resumeFrom"] = "runs/checkpoint_1"
    with pytest.raises(ContractError, match="resumeFrom: expected an s3:// URI or an absolute"):
        load_contract(doc)


# ---------------------------------------------------------------------------------- machine


def test_the_first_rayjob_records_where_the_run_starts() -> None:
    p = plan(tj(resumeFrom={"trainJob": "old"}), {}, resume_from=LATEST)
    assert p.actions == [m.EnsureChildren(0, False, LATEST)]
    assert p.status["resumedFrom"] == LATEST


def test_without_resume_from_nothing_is_recorded() -> None:
    p = plan(tj(), {})
    assert p.actions == [m.EnsureChildren(0, False, None)]
    assert "resumedFrom" not in p.status


def test_a_source_that_is_not_ready_stalls_the_job_before_anything_is_created() -> None:
    problem = ("ResumeSourceNotReady", "spec.resumeFrom.trainJob: TrainJob 'old' has no ...")
    p = plan(tj(resumeFrom={"trainJob": "old"}), {}, preflight_problem=problem)
    assert p.actions == [] and p.phase == "Stalled"


def _deadline_plan(status: dict[str, Any]) -> m.Plan:
    started = rfc3339(NOW - timedelta(seconds=101))
    rj = {
        "metadata": {"name": "digits-0", "ownerReferences": [{"uid": meta().uid}]},
        "spec": {"suspend": False},
        "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"},
    }
    return m.plan(
        m.Observation(
            meta=meta(),
            trainjob=tj(activeDeadlineSeconds=100),
            status={"attempt": 0, "startTime": started, **status},
            now=NOW,
            rayjob=rj,
        )
    )


def test_deadline_exceeded_says_how_to_continue_from_the_latest_checkpoint() -> None:
    msg = failed_message(_deadline_plan({"checkpoint": {"latestURI": LATEST}}))
    assert "create a TrainJob with spec.resumeFrom.trainJob: digits" in msg
    assert f"spec.resumeFrom.checkpoint: {LATEST}" in msg
    assert "with a larger activeDeadlineSeconds" in msg
    assert "create the job again to continue" not in msg


def test_deadline_exceeded_without_a_checkpoint_says_a_new_job_starts_over() -> None:
    msg = failed_message(_deadline_plan({}))
    assert "Its run saved no checkpoint: a new TrainJob starts from the beginning" in msg
    seeded = failed_message(_deadline_plan({"resumedFrom": LATEST}))
    assert f"a TrainJob with spec.resumeFrom.checkpoint: {LATEST} starts where this one" in seeded


def test_every_failure_with_a_checkpoint_says_how_to_continue() -> None:
    rj = {
        "metadata": {"name": "digits-0", "ownerReferences": [{"uid": meta().uid}]},
        "spec": {"suspend": False},
        "status": {"jobDeploymentStatus": "ValidationFailed", "message": "bad head"},
    }
    status = {"attempt": 0, "checkpoint": {"latestURI": LATEST}}
    msg = failed_message(plan(tj(), status, rayjob=rj))
    assert msg.startswith("KubeRay refused RayJob digits-0: bad head")
    assert msg.endswith(f"spec.resumeFrom.checkpoint: {LATEST}")


# ---------------------------------------------------------------------------------- preflight


def _source(status: dict[str, Any] | None, storage: dict[str, Any] | None = None) -> Any:
    spec = {"storage": storage or manifest()["spec"]["storage"]}
    return {"metadata": {"name": "old"}, "spec": spec, "status": status or {}}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    calls: list[str] = []

    def get_trainjob(namespace: str, name: str) -> Any:
        calls.append(f"{namespace}/{name}")
        return jobs.get(name)

    monkeypatch.setattr(k8s, "get_trainjob", get_trainjob)
    return {"jobs": jobs, "calls": calls}


def test_a_trainjob_source_resolves_to_its_latest_checkpoint(api: dict[str, Any]) -> None:
    api["jobs"]["old"] = _source({"phase": "Failed", "checkpoint": {"latestURI": LATEST}})
    job = tj(resumeFrom={"trainJob": "old"})
    assert preflight.resume_source(job, meta(), {}) == (LATEST, None)
    assert api["calls"] == ["team-a/old"]


def test_a_recorded_source_is_used_without_reading_the_other_job(api: dict[str, Any]) -> None:
    job = tj(resumeFrom={"trainJob": "old"})
    assert preflight.resume_source(job, meta(), {"resumedFrom": LATEST}) == (LATEST, None)
    assert api["calls"] == []


def test_a_checkpoint_source_needs_no_lookup(api: dict[str, Any]) -> None:
    job = tj(resumeFrom={"checkpoint": LATEST})
    assert preflight.resume_source(job, meta(), {}) == (LATEST, None)
    assert preflight.resume_source(tj(), meta(), {}) == (None, None)
    assert api["calls"] == []


@pytest.mark.parametrize(
    ("source", "reason", "words"),
    [
        (None, "ResumeSourceNotFound", "TrainJob 'old' does not exist in namespace 'team-a'"),
        (
            {"phase": "Running"},
            "ResumeSourceNotReady",
            "TrainJob 'old' has no checkpoint yet (status.checkpoint.latestURI is empty, "
            "phase Running)",
        ),
        (
            {"checkpoint": {"latestURI": "/mnt/raytrain/old-0123/checkpoint_1"}},
            "ResumeSourceUnreachable",
            "keeps its checkpoints on a volume (/mnt/raytrain/old-0123/checkpoint_1) and this "
            "job's storage is s3",
        ),
    ],
)
def test_a_source_that_cannot_be_used_is_named_with_the_fix(
    api: dict[str, Any], source: dict[str, Any] | None, reason: str, words: str
) -> None:
    if source is not None:
        api["jobs"]["old"] = _source(source)
    found, problem = preflight.resume_source(tj(resumeFrom={"trainJob": "old"}), meta(), {})
    assert found is None and problem is not None
    assert problem[0] == reason
    assert problem[1].startswith("spec.resumeFrom.trainJob: ")
    assert words in problem[1]


def test_a_source_on_another_claim_is_unreachable(api: dict[str, Any]) -> None:
    mine = {"pvc": {"claimName": "ckpt", "mountPath": "/mnt/raytrain"}}
    theirs = {"pvc": {"claimName": "other", "mountPath": "/mnt/raytrain"}}
    latest = "/mnt/raytrain/old-0123/checkpoint_1"
    api["jobs"]["old"] = _source({"checkpoint": {"latestURI": latest}}, theirs)
    job = tj(storage=mine, resumeFrom={"trainJob": "old"})
    found, problem = preflight.resume_source(job, meta(), {})
    assert found is None and problem is not None and problem[0] == "ResumeSourceUnreachable"
    assert "PersistentVolumeClaim 'other'" in problem[1]
    api["jobs"]["old"] = _source({"checkpoint": {"latestURI": latest}}, mine)
    assert preflight.resume_source(job, meta(), {}) == (latest, None)


def test_a_job_cannot_resume_from_itself(api: dict[str, Any]) -> None:
    found, problem = preflight.resume_source(tj(resumeFrom={"trainJob": "digits"}), meta(), {})
    assert found is None and problem is not None and problem[0] == "ResumeSourceInvalid"
    assert api["calls"] == []
