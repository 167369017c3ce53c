"""Condition bookkeeping: presence rules, transition times, observedGeneration, Events."""

from __future__ import annotations

from raytrain_operator.status import conditions as c
from raytrain_operator.status.conditions import Desired

T0, T1 = "2026-11-22T08:00:00Z", "2026-11-22T08:05:00Z"


def by_type(conds: list[dict]) -> dict[str, dict]:
    return {x["type"]: x for x in conds}


def test_always_present_conditions_start_false_and_abnormal_ones_only_when_true() -> None:
    conds, transitions = c.merge(None, {c.CREATED: Desired(True, "RayJobCreated")}, 1, T0)
    types = by_type(conds)
    assert set(types) == {"Created", "Running", "Suspended", "Succeeded", "Failed"}
    assert types["Created"]["status"] == "True"
    assert types["Running"]["status"] == "False"
    assert [t.type for t in transitions] == ["Created"]


def test_reconciling_and_stalled_are_removed_once_false() -> None:
    first, _ = c.merge(None, {c.STALLED: Desired(True, "StorageNotFound", "no pvc")}, 1, T0)
    assert by_type(first)["Stalled"]["status"] == "True"
    second, transitions = c.merge(first, {c.CREATED: Desired(True, "RayJobCreated")}, 1, T1)
    assert "Stalled" not in by_type(second)
    assert ("Stalled", "False") in [(t.type, t.status) for t in transitions]


def test_last_transition_time_changes_only_with_the_status() -> None:
    first, _ = c.merge(None, {c.RUNNING: Desired(False, "Initializing")}, 1, T0)
    same, transitions = c.merge(first, {c.RUNNING: Desired(False, "ClusterStarting", "x")}, 1, T1)
    assert by_type(same)["Running"]["lastTransitionTime"] == T0
    assert by_type(same)["Running"]["reason"] == "ClusterStarting"
    assert [t.reason for t in transitions] == ["ClusterStarting"]
    flipped, _ = c.merge(same, {c.RUNNING: Desired(True, "RayJobRunning")}, 1, T1)
    assert by_type(flipped)["Running"]["lastTransitionTime"] == T1


def test_observed_generation_is_refreshed_on_every_condition() -> None:
    first, _ = c.merge(None, {c.CREATED: Desired(True, "RayJobCreated")}, 1, T0)
    second, transitions = c.merge(first, {}, 4, T1)
    assert {x["observedGeneration"] for x in second} == {4}
    assert transitions == []
    assert by_type(second)["Created"]["status"] == "True"


def test_no_event_when_nothing_changes() -> None:
    want = {c.CREATED: Desired(True, "RayJobCreated"), c.RECONCILING: Desired(True, "Initializing")}
    first, _ = c.merge(None, want, 1, T0)
    again, transitions = c.merge(first, want, 1, T1)
    assert transitions == [] and again == first


def test_failed_and_stalled_are_warnings() -> None:
    _, transitions = c.merge(None, {c.FAILED: Desired(True, "DeadlineExceeded")}, 1, T0)
    assert transitions[0].is_warning
    _, transitions = c.merge(None, {c.CREATED: Desired(True, "RayJobCreated")}, 1, T0)
    assert not transitions[0].is_warning


def test_unknown_condition_types_are_kept() -> None:
    theirs = {
        "type": "Custom",
        "status": "True",
        "reason": "X",
        "message": "",
        "lastTransitionTime": T0,
    }
    conds, _ = c.merge([theirs], {}, 1, T1)
    assert theirs in conds


def test_long_messages_are_truncated() -> None:
    conds, _ = c.merge(None, {c.FAILED: Desired(True, "TrainingFailed", "x" * 100_000)}, 1, T0)
    message = by_type(conds)["Failed"]["message"]
    assert len(message) <= c.MAX_MESSAGE and message.endswith("(truncated)")


def announced(transitions: list[c.Transition]) -> list[tuple[str, str]]:
    return [(t.type, t.status) for t in transitions if t.announced]


def test_events_announce_what_became_true_and_a_resume_or_a_resolved_problem() -> None:
    start = {c.CREATED: Desired(True, "RayJobCreated"), c.RECONCILING: Desired(True, "Init")}
    first, transitions = c.merge(None, start, 1, T0)
    assert announced(transitions) == [("Created", "True"), ("Reconciling", "True")]
    running = {c.CREATED: Desired(True, "RayJobCreated"), c.RUNNING: Desired(True, "Training")}
    second, transitions = c.merge(first, running, 1, T1)
    # Reconciling clears because Running turned True: that one is the news.
    assert ("Reconciling", "False") in [(t.type, t.status) for t in transitions]
    assert announced(transitions) == [("Running", "True")]
    suspended, transitions = c.merge(second, {c.SUSPENDED: Desired(True, "Suspended")}, 2, T1)
    assert ("Suspended", "True") in announced(transitions)
    resumed, transitions = c.merge(suspended, {c.SUSPENDED: Desired(False, "Resumed")}, 3, T1)
    assert announced(transitions) == [("Suspended", "False")]
    done = {
        c.SUCCEEDED: Desired(True, "TrainingSucceeded"),
        c.RUNNING: Desired(False, "TrainingSucceeded"),
        c.FAILED: Desired(False, "TrainingSucceeded"),
        c.SUSPENDED: Desired(False, "Finished"),
    }
    _, transitions = c.merge(resumed, done, 3, T1)
    # Running ends, Failed and Suspended change their reasons: all in the status, one Event.
    assert len(transitions) == 4
    assert announced(transitions) == [("Succeeded", "True")]


def test_a_cleared_problem_is_announced_and_a_new_reason_of_a_true_condition_too() -> None:
    first, _ = c.merge(None, {c.STALLED: Desired(True, "StorageNotFound", "no pvc")}, 1, T0)
    other, transitions = c.merge(first, {c.STALLED: Desired(True, "SecretNotFound", "no")}, 1, T1)
    assert announced(transitions) == [("Stalled", "True")]
    _, transitions = c.merge(other, {c.CREATED: Desired(True, "RayJobCreated")}, 1, T1)
    assert set(announced(transitions)) == {("Stalled", "False"), ("Created", "True")}


def test_training_that_progresses_again_is_announced() -> None:
    hung = {c.HUNG: Desired(True, "NoProgress", "no report for 900 s")}
    first, transitions = c.merge(None, hung, 1, T0)
    assert announced(transitions) == [("Hung", "True")]
    _, transitions = c.merge(first, {}, 1, T1)
    assert announced(transitions) == [("Hung", "False")]
