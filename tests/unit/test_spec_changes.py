"""Generation honesty: a spec change the running attempt does not carry is not "observed".

The verdicts are those of kstatus, the status library behind `kubectl`'s and kpt's wait, Argo
CD's and Flux's health of custom resources. No Python implementation of it exists, so its
generic rules are encoded here from its documentation (kubernetes-sigs/cli-utils,
pkg/kstatus/README.md: "Conventions", and the CRD status convention it links):

1. an object being deleted is Terminating;
2. when `status.observedGeneration` is present and differs from `metadata.generation`, the
   controller has not seen the latest spec: InProgress;
3. a `Reconciling` condition with status True: InProgress;
4. a `Stalled` condition with status True: Failed;
5. otherwise Current.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from _factories import manifest, meta

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.status import machine as m
from raytrain_operator.status.conditions import find

NOW = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)


def kstatus(obj: dict[str, Any]) -> str:
    metadata, status = obj.get("metadata") or {}, obj.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return "Terminating"
    observed = status.get("observedGeneration")
    if observed is not None and observed != metadata.get("generation"):
        return "InProgress"
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    if conditions.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    if conditions.get("Stalled", {}).get("status") == "True":
        return "Failed"
    return "Current"


def tj(**spec: Any) -> TrainJob:
    return TrainJob.model_validate(manifest(**spec))


def running_rayjob(built_from: TrainJob, generation: int = 1) -> dict[str, Any]:
    """The RayJob as the builder made it from `built_from` at `generation`, now Running."""
    body = build_rayjob(built_from, meta(generation=generation), 0, suspend=False)
    body["status"] = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    return body


def run(
    trainjob: TrainJob, status: dict[str, Any], rj: dict[str, Any] | None, generation: int
) -> m.Plan:
    return m.plan(
        m.Observation(
            meta=meta(generation=generation),
            trainjob=trainjob,
            status=status,
            now=NOW,
            rayjob=rj,
        )
    )


def as_object(p: m.Plan, generation: int) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "status": p.status}


def settled() -> tuple[dict[str, Any], dict[str, Any]]:
    """A job Running at generation 1, and its status."""
    rj = running_rayjob(tj())
    first = run(tj(), {"attempt": 0}, rj, 1)
    assert first.phase == "Running" and kstatus(as_object(first, 1)) == "Current"
    return rj, dict(first.status)


def test_a_training_field_edit_waits_and_says_so() -> None:
    rj, status = settled()
    edited = tj(scaling={"numWorkers": 4}, config={"epochs": 10, "lr": 0.05})
    p = run(edited, status, rj, 2)
    assert p.actions == []  # the running attempt is left alone
    assert p.status["observedGeneration"] == 1
    assert kstatus(as_object(p, 2)) == "InProgress"
    reconciling = find(p.status["conditions"], "Reconciling")
    assert reconciling is not None
    assert reconciling["reason"] == "SpecChangePending"
    assert reconciling["observedGeneration"] == 2
    assert "spec.config" in reconciling["message"] and "spec.scaling" in reconciling["message"]
    assert "spec.suspend" in reconciling["message"]  # how to apply it now
    # the other conditions speak of the attempt that runs: generation 1
    running = find(p.status["conditions"], "Running")
    assert running is not None and running["status"] == "True"
    assert running["observedGeneration"] == 1
    events = [t for t in p.transitions if t.reason == "SpecChangePending"]
    assert len(events) == 1 and "spec.scaling" in events[0].message


def test_another_edit_while_one_waits_is_announced_again() -> None:
    rj, status = settled()
    second = run(tj(config={"epochs": 10}), status, rj, 2)
    after = {**status, **second.status}
    third = run(tj(config={"epochs": 12}, image="raytrain/trainer-runtime:0.2.0"), after, rj, 3)
    assert third.status["observedGeneration"] == 1
    events = [t for t in third.transitions if t.reason == "SpecChangePending"]
    assert len(events) == 1 and "spec.image" in events[0].message
    # the same generation seen again posts nothing new
    again = run(tj(config={"epochs": 12}, image="raytrain/trainer-runtime:0.2.0"),
                {**after, **third.status}, rj, 3)  # fmt: skip
    assert not [t for t in again.transitions if t.reason == "SpecChangePending"]


def test_fields_the_operator_applies_at_once_are_observed_at_once() -> None:
    rj, status = settled()
    for generation, edit in enumerate(
        [
            {"ttlSecondsAfterFinished": 30},
            {"backoffLimit": 3},
            {"activeDeadlineSeconds": 86400},
        ],
        start=2,
    ):
        p = run(tj(**edit), status, rj, generation)
        assert p.status["observedGeneration"] == generation, edit
        assert kstatus(as_object(p, generation)) == "Current", edit
        assert find(p.status["conditions"], "Reconciling") is None


def test_suspend_is_observed_at_once() -> None:
    rj, status = settled()
    p = run(tj(suspend=True), status, rj, 2)
    assert p.status["observedGeneration"] == 2
    assert m.Annotate(m.ANNOTATION_CHECKPOINT_REQUESTED, m.rfc3339(NOW)) in p.actions


def test_the_next_attempt_carries_the_change_and_observes_the_generation() -> None:
    rj, status = settled()
    edited = tj(config={"epochs": 10})
    pending = run(edited, status, rj, 2)
    failed = dict(rj, status={"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"})
    retry = run(tj(config={"epochs": 10}, backoffLimit=1), {**status, **pending.status}, failed, 3)
    assert retry.status["attempt"] == 1
    rebuilt = running_rayjob(tj(config={"epochs": 10}, backoffLimit=1), generation=3)
    rebuilt["metadata"]["name"] = "digits-1"
    done = run(tj(config={"epochs": 10}, backoffLimit=1), {**status, **retry.status}, rebuilt, 3)
    assert done.status["observedGeneration"] == 3
    assert kstatus(as_object(done, 3)) == "Current"


def test_a_finished_job_observes_its_last_generation() -> None:
    rj, status = settled()
    edited = tj(config={"epochs": 10})
    status = {**status, "trainerStatus": {"phase": "Succeeded", "attempt": 0}}
    p = run(edited, status, rj, 2)
    assert p.phase == "Succeeded"
    assert p.status["observedGeneration"] == 2  # nothing will ever apply it: nothing waits


def test_a_rayjob_from_an_older_operator_without_field_hashes_still_counts() -> None:
    rj, status = settled()
    del rj["metadata"]["annotations"]["raytrain.dev/spec-field-hashes"]
    p = run(tj(config={"epochs": 10}), status, rj, 2)
    reconciling = find(p.status["conditions"], "Reconciling")
    assert reconciling is not None and "the spec" in reconciling["message"]
    assert p.status["observedGeneration"] == 1


def test_a_queued_rayjob_that_never_ran_is_replaced_by_one_with_the_new_spec() -> None:
    queued = build_rayjob(tj(queueName="q"), meta(), 0, suspend=True)
    queued["status"] = {"jobDeploymentStatus": "Suspended"}
    p = run(tj(queueName="q", config={"epochs": 10}), {"attempt": 0}, queued, 2)
    assert p.status["attempt"] == 1 and p.status["restarts"] == 0
    assert p.status["observedGeneration"] == 2  # decided: the next attempt carries it
