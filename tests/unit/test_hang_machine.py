"""A running attempt whose reports stop: the watch is a due time, the Hung condition quotes
where the ranks were, spec.failure.onHang decides, a hang is a failure class of its own and
lost time in goodput, a node that hung twice is avoided; the Straggling condition names the
rank the others wait for."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from _factories import manifest, meta

from raytrain_contract import hang
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.timefmt import rfc3339
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.status import goodput
from raytrain_operator.status import machine as m
from raytrain_operator.status.conditions import find
from raytrain_operator.status.triage import Evidence, FailureClass, classify

NOW = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)


def ts(seconds: float = 0) -> str:
    return rfc3339(NOW + timedelta(seconds=seconds))


def tj(failure: dict[str, Any] | None = None, **spec: Any) -> TrainJob:
    if failure is not None:
        spec["failure"] = failure
    return TrainJob.model_validate(manifest(**spec))


def running_rayjob(name: str = "digits-0") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "ownerReferences": [{"uid": meta().uid}], "annotations": {}},
        "spec": {"suspend": False},
        "status": {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "startTime": ts(-3600),
        },
    }


GROUPS = [
    {"where": "at hang.py:31 in loop (time.sleep(3600))", "waiting": False, "ranks": [1]},
    {"where": "in torch.distributed all_reduce, called at hang.py:32 in loop", "waiting": True,
     "ranks": [0, 2]},
]  # fmt: skip


def stacks(since: str) -> dict[str, Any]:
    return {
        "since": since,
        "time": ts(-1),
        "timeoutSeconds": 30.0,
        "workers": 3,
        "groups": GROUPS,
        "suspects": [{"rank": 1, "pod": "digits-0-worker-b", "node": "node-b"}],
        "stacks": "s3://bucket/prefix/run/attempt-0/stacks.txt",
    }


def report(quiet: float, *, with_stacks: bool = False, **extra: Any) -> dict[str, Any]:
    """A report of attempt 0 whose last progress was `quiet` seconds ago."""
    since = ts(-quiet)
    trainer: dict[str, Any] = {
        "phase": "Running",
        "attempt": 0,
        "step": 40,
        "epoch": 3,
        "lastUpdatedTime": ts(-quiet + 1 if with_stacks else -quiet),
        "lastProgressTime": since,
        "reportIntervalSeconds": 2.0,
    }
    if with_stacks:
        trainer["hang"] = stacks(since)
    trainer.update(extra)
    return trainer


def run(
    trainjob: TrainJob, trainer: dict[str, Any], *, now: datetime = NOW, **status: Any
) -> m.Plan:
    st = {"attempt": 0, "restarts": 0, "startTime": ts(-3600), "trainerStatus": trainer, **status}
    return m.plan(
        m.Observation(meta=meta(), trainjob=trainjob, status=st, now=now, rayjob=running_rayjob())
    )


def cond(p: m.Plan, type_: str) -> dict[str, Any] | None:
    found = find(p.status["conditions"], type_)
    return dict(found) if found is not None else None


def test_a_reporting_attempt_is_due_again_when_its_reports_would_be_late() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}), report(10))
    assert p.phase == "Running" and cond(p, "Hung") is None
    assert p.recheck_after == pytest.approx(20)
    # Unset: the derived timeout (10 intervals of 2 s, the 600 s floor).
    p = run(tj(), report(10))
    assert p.recheck_after == pytest.approx(hang.DEFAULT_FLOOR_SECONDS - 10)


def test_the_watch_is_off_at_zero_and_for_a_runtime_that_predates_it() -> None:
    p = run(tj({"hangTimeoutSeconds": 0}), report(10_000))
    assert p.phase == "Running" and cond(p, "Hung") is None and p.recheck_after is None
    old = report(10_000)
    del old["lastProgressTime"]
    p = run(tj({"hangTimeoutSeconds": 30}), old)
    assert p.phase == "Running" and cond(p, "Hung") is None and p.recheck_after is None


def test_past_the_timeout_it_waits_a_while_for_the_ranks_stacks() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}), report(40))
    hung = cond(p, "Hung")
    assert hung is not None and hung["status"] == "True" and hung["reason"] == "NoProgress"
    assert "no training report for 40 s, since step 40 (epoch 3) at " in hung["message"]
    assert "reports came every 2 s (the median)" in hung["message"]
    assert "hang timeout is 30 s (spec.failure.hangTimeoutSeconds 30)" in hung["message"]
    assert "Waiting up to 50 s more for the stacks" in hung["message"]
    assert p.phase == "Running" and p.attempt_failure is None
    assert p.recheck_after == pytest.approx(50)
    assert any(t.type == "Hung" and t.is_warning for t in p.transitions)


def test_with_the_stacks_a_hang_restarts_from_the_checkpoint_as_a_failure_of_its_own() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}, backoffLimit=2), report(35, with_stacks=True))
    assert p.status["attempt"] == 1 and p.status["restarts"] == 1
    assert p.attempt_failure is not None
    assert p.attempt_failure.failure_class is FailureClass.HUNG
    retrying = cond(p, "Reconciling")
    assert retrying is not None and retrying["reason"] == "Retrying"
    message = retrying["message"]
    assert message.startswith("attempt 0 failed (Hung: no training report for 35 s")
    # Grouped, the odd one out first, the likely cause with its pod and node.
    assert (
        "Where the ranks were: rank 1 at hang.py:31 in loop (time.sleep(3600)); ranks 0 and 2 "
        "in torch.distributed all_reduce, called at hang.py:32 in loop" in message
    )
    assert "likely cause: rank 1 (pod digits-0-worker-b, node node-b)" in message
    assert "raytrain logs digits --attempt 0 --stacks" in message
    assert "RayJob digits-1 starts from the latest checkpoint" in message
    assert p.status["hangs"] == [{"attempt": 0, "time": ts(), "nodes": ["node-b"]}]
    assert cond(p, "Hung") is None  # the failure speaks now, in Reconciling and its Event


def test_a_stall_before_the_attempts_first_report_says_so() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}), report(40, attemptReports=0))
    hung = cond(p, "Hung") or {}
    assert (
        "no training report for 40 s, since the start of this attempt's training (it has not "
        "reported yet) at " in hung["message"]
    )


def test_of_two_groups_as_large_the_one_not_waiting_is_named_first() -> None:
    trainer = report(35, with_stacks=True)
    trainer["hang"]["groups"] = [
        {"where": "in torch.distributed all_reduce", "waiting": True, "ranks": [0]},
        {"where": "at hang.py:31 in loop (time.sleep(3600))", "waiting": False, "ranks": [1]},
    ]
    p = run(tj({"hangTimeoutSeconds": 30}, backoffLimit=2), trainer)
    assert p.attempt_failure is not None
    assert (
        "Where the ranks were: rank 1 at hang.py:31 in loop (time.sleep(3600)); rank 0 in "
        "torch.distributed all_reduce" in p.attempt_failure.message
    )


def test_without_stacks_it_acts_once_the_wait_is_over() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}, backoffLimit=1), report(30 + 61))
    assert p.status["attempt"] == 1 and p.attempt_failure is not None
    assert "The runtime sent no stacks within 60 s" in p.attempt_failure.message
    assert p.status["hangs"] == [{"attempt": 0, "time": ts(), "nodes": []}]


def test_stacks_of_an_earlier_stall_do_not_count() -> None:
    trainer = report(40)
    trainer["hang"] = stacks(ts(-500))  # taken before the reports came back
    p = run(tj({"hangTimeoutSeconds": 30}), trainer)
    assert p.phase == "Running" and "Waiting up to" in (cond(p, "Hung") or {})["message"]


def test_on_hang_fail_fails_the_job_and_ends_the_hung_attempt() -> None:
    job = tj({"hangTimeoutSeconds": 30, "onHang": "Fail"}, backoffLimit=3)
    p = run(job, report(35, with_stacks=True))
    assert p.phase == "Failed"
    failed = cond(p, "Failed")
    assert failed is not None and failed["reason"] == "Hung"
    assert "spec.failure.onHang is Fail" in failed["message"]
    assert m.DeleteRayJob("digits-0") in p.actions
    assert p.attempt_failure is not None and p.status["restarts"] == 0


def test_on_hang_report_only_says_so_and_the_next_report_clears_it() -> None:
    job = tj({"hangTimeoutSeconds": 30, "onHang": "Report"})
    p = run(job, report(35, with_stacks=True))
    assert p.phase == "Running" and p.attempt_failure is None and p.actions == []
    hung = cond(p, "Hung")
    assert (
        hung is not None and "spec.failure.onHang is Report: the attempt runs on" in hung["message"]
    )
    assert "rank 1 at hang.py:31" in hung["message"]
    after = run(job, report(2), conditions=p.status["conditions"])
    assert cond(after, "Hung") is None
    assert any(t.type == "Hung" and t.status == "False" for t in after.transitions)


def test_with_no_retries_at_all_a_restart_says_which_setting_gives_one() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}), report(35, with_stacks=True))  # backoffLimit 0
    failed = cond(p, "Failed") or {}
    assert p.phase == "Failed" and failed["reason"] == "Hung"
    assert "spec.failure.onHang is Restart, but spec.backoffLimit is 0" in failed["message"]
    assert "Set spec.backoffLimit to restart a hung attempt" in failed["message"]
    assert m.DeleteRayJob("digits-0") in p.actions and p.attempt_failure is not None


def test_used_up_retries_or_a_policy_that_does_not_retry_end_the_attempt_too() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}, backoffLimit=1), report(35, with_stacks=True),
            restarts=1)  # fmt: skip
    assert p.phase == "Failed" and cond(p, "Failed")["reason"] == "BackoffLimitExceeded"
    assert m.DeleteRayJob("digits-0") in p.actions
    policy = {"classes": {"Hung": False}}
    p = run(tj({"hangTimeoutSeconds": 30}, backoffLimit=3, retryPolicy=policy),
            report(35, with_stacks=True))  # fmt: skip
    assert p.phase == "Failed" and cond(p, "Failed")["reason"] == "Hung"
    assert "spec.retryPolicy.classes.Hung is false" in cond(p, "Failed")["message"]
    assert m.DeleteRayJob("digits-0") in p.actions


def test_a_node_that_hung_twice_is_avoided_by_the_next_attempts_workers() -> None:
    earlier = [{"attempt": 0, "time": ts(-900), "nodes": ["node-b"]}]
    trainer = report(35, with_stacks=True, attempt=1)
    trainer["hang"]["suspects"][0]["pod"] = "digits-1-worker-b"
    st = {"attempt": 1, "restarts": 1, "startTime": ts(-3600), "trainerStatus": trainer}
    p = m.plan(
        m.Observation(
            meta=meta(),
            trainjob=tj({"hangTimeoutSeconds": 30}, backoffLimit=3),
            status={**st, "hangs": earlier},
            now=NOW,
            rayjob=running_rayjob("digits-1"),
        )
    )
    assert [h["nodes"] for h in p.status["hangs"]] == [["node-b"], ["node-b"]]
    assert p.attempt_failure is not None
    assert "node node-b held up the ranks in two hangs" in p.attempt_failure.message
    # The next attempt's children: the RayJob's workers prefer any other node.
    created = m.plan(
        m.Observation(
            meta=meta(),
            trainjob=tj({"hangTimeoutSeconds": 30}, backoffLimit=3),
            status={**st, **p.status},
            now=NOW,
        )
    )
    ensure = [a for a in created.actions if isinstance(a, m.EnsureChildren)]
    assert ensure == [m.EnsureChildren(2, False, None, ("node-b",))]
    body = build_rayjob(tj(), meta(), 2, suspend=False, avoid_nodes=ensure[0].avoid_nodes)
    worker = body["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    preferred = worker["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": ["node-b"]}
    assert {"weight": 100, "preference": {"matchFields": [avoid]}} in preferred
    head = body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "nodeAffinity" not in (head.get("affinity") or {})


def test_the_pods_know_their_node() -> None:
    body = build_rayjob(tj(), meta(), 0, suspend=False)
    cluster = body["spec"]["rayClusterSpec"]
    for spec in (cluster["headGroupSpec"], cluster["workerGroupSpecs"][0]):
        env = spec["template"]["spec"]["containers"][0]["env"]
        assert {
            "name": "RAYTRAIN_NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        } in env


def test_the_hang_is_lost_time_in_goodput() -> None:
    start, stall, end = NOW - timedelta(seconds=600), NOW - timedelta(seconds=300), NOW
    entry = {
        "attempt": 0,
        "start": rfc3339(start),
        "end": rfc3339(end),
        "outcome": "Retried",
        "gpus": 2.0,
        "firstReport": rfc3339(start + timedelta(seconds=60)),
        # The runtime's hang report came after the stall: not training.
        "lastReport": rfc3339(stall + timedelta(seconds=31)),
        "lastCheckpoint": rfc3339(stall - timedelta(seconds=100)),
        "hungSince": rfc3339(stall),
    }
    t = goodput.totals([entry], NOW, False, {})
    assert t.lost_hang == pytest.approx(300)
    assert t.lost_recompute == pytest.approx(100)  # checkpoint to the stall, not to the report
    assert t.lost == pytest.approx(400)
    assert t.productive == pytest.approx(140)
    assert t.lost_gpu == pytest.approx(800)


def test_the_pass_that_ends_a_hung_attempt_marks_its_cluster() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}, backoffLimit=2), report(35, with_stacks=True))
    (entry,) = p.status["goodput"]["clusters"]
    assert entry["outcome"] == "Retried" and entry["hungSince"] == ts(-35)
    assert p.status["goodput"]["lostToHangSeconds"] == pytest.approx(35)


def test_no_hang_no_new_goodput_number() -> None:
    p = run(tj({"hangTimeoutSeconds": 30}), report(5))
    assert "lostToHangSeconds" not in p.status["goodput"]


def test_a_straggler_is_named_with_its_pod_node_and_skew() -> None:
    step = {
        "reports": 5,
        "wallSeconds": 0.45,
        "medianBusySeconds": 0.1,
        "slowest": {"rank": 1, "pod": "digits-0-worker-b", "node": "node-b", "busySeconds": 0.4},
        "skewPercent": 66.7,
        "straggler": True,
    }
    p = run(tj(), report(1, stepTime=step))
    slow = cond(p, "Straggling")
    assert slow is not None and slow["reason"] == "SlowRank"
    assert slow["message"].startswith(
        "rank 1 (pod digits-0-worker-b, node node-b) is the slowest rank in each of the last 5 "
        "reports: it works 0.4 s between two reports where the median rank works 0.1 s, 67% of "
        "the 0.45 s a report takes"
    )
    assert p.phase == "Running"
    p = run(
        tj(), report(1, stepTime={**step, "straggler": False}), conditions=p.status["conditions"]
    )
    assert cond(p, "Straggling") is None


def test_ray_trains_nccl_hang_error_is_the_same_class() -> None:
    final = {
        "phase": "Failed",
        "attempt": 0,
        "message": "training failed: NCCLHangError: 1 of 1 communicators have a collective "
        "mismatch and made no progress for 600 seconds (40 polls).",
    }
    found = classify(Evidence(rayjob_status={"jobDeploymentStatus": "Failed"}, report=final))
    assert found.failure_class is FailureClass.HUNG
    assert "hang_detector/stack_traces" in found.message


def test_editing_the_timeout_or_on_hang_is_not_a_pending_spec_change() -> None:
    from raytrain_operator.builders.rayjob import field_hashes, spec_hash

    before, after = tj(), tj({"hangTimeoutSeconds": 120, "onHang": "Report"})
    assert spec_hash(before) == spec_hash(after)
    assert field_hashes(before) == field_hashes(after)
    two = tj({"maxFailures": 2})
    assert spec_hash(two) == spec_hash(tj({"maxFailures": 2, "hangTimeoutSeconds": 60}))
    assert spec_hash(before) != spec_hash(two)


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        ({"hangTimeoutSeconds": -1}, "failure.hangTimeoutSeconds"),
        ({"onHang": "Ignore"}, "failure.onHang"),
    ],
)
def test_a_bad_value_names_the_field(failure: dict[str, Any], words: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        tj(failure)
    where = {".".join(str(p) for p in e["loc"]) for e in caught.value.errors()}
    assert any(w.endswith(words) for w in where), where


def test_the_contract_carries_the_timeout_and_on_hang_only_when_set() -> None:
    from raytrain_contract import dump_contract, load_contract
    from raytrain_operator.builders.contract import build_contract

    plain = dump_contract(build_contract(tj(), meta(), attempt=0))
    assert plain["failure"] == {"maxFailures": 0}  # what a 0.1.0 runtime reads
    doc = dump_contract(
        build_contract(tj({"hangTimeoutSeconds": 45, "onHang": "Report"}), meta(), 0)
    )
    assert doc["failure"] == {"maxFailures": 0, "hangTimeoutSeconds": 45.0, "onHang": "Report"}
    parsed = load_contract(doc).failure
    assert (parsed.hang_timeout_seconds, parsed.on_hang) == (45.0, "Report")
