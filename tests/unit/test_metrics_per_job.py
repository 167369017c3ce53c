"""The per-job gauges: one series per TrainJob and gauge (per kind for goodput), labelled
trainjob_namespace and trainjob, none for a value the status lacks, gone with the job."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from raytrain_operator import metrics
from raytrain_operator.handlers import trainjobs

FULL: dict[str, Any] = {
    "phase": "Running",
    "restarts": 1,
    "trainerStatus": {
        "progressPercentage": 40,
        "epoch": 2,
        "lastUpdatedTime": "2026-11-23T10:00:00Z",
        "lastProgressTime": "2026-11-23T09:59:30Z",
        "stepTime": {"skewPercent": 3.5, "straggler": False, "slowest": {"rank": 0}},
    },
    "checkpoint": {"count": 3, "lastTime": "2026-11-23T09:59:00Z"},
    "goodput": {
        "allocatedSeconds": 100.0,
        "productiveSeconds": 60.0,
        "lostSeconds": 20.0,
        "allocatedGPUSeconds": 200.0,
        "productiveGPUSeconds": 120.0,
        "lostGPUSeconds": 40.0,
    },
}
#: What a job has before its runtime reported: a restart count and nothing else.
NEW: dict[str, Any] = {"phase": "Pending", "restarts": 0}
PER_JOB = [
    *metrics.JOB_GAUGES,
    metrics.GOODPUT_SECONDS,
    metrics.GOODPUT_GPU_SECONDS,
    metrics.STRAGGLER,
]


def index(jobs: dict[tuple[str, str], dict[str, Any]]) -> dict[Any, list[metrics.TrainJobState]]:
    out: dict[Any, list[metrics.TrainJobState]] = {}
    for (namespace, name), status in jobs.items():
        ((key, value),) = asyncio.run(
            trainjobs.trainjob_states(namespace=namespace, name=name, status=status)
        ).items()
        out[key] = [value]
    return out


def series(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        if family.name in PER_JOB
        for s in family.samples
    }


def watched(states: dict[Any, list[metrics.TrainJobState]]) -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics.watch_trainjobs(lambda: [s for store in states.values() for s in store], registry)
    return registry


def test_every_gauge_of_a_reporting_job() -> None:
    registry = watched(index({("team-a", "digits"): FULL}))
    job = (("trainjob", "digits"), ("trainjob_namespace", "team-a"))
    got = series(registry)
    assert got[("raytrain_trainjob_progress_percent", job)] == 40
    assert got[("raytrain_trainjob_epoch", job)] == 2
    assert got[("raytrain_trainjob_restarts", job)] == 1
    assert got[("raytrain_trainjob_checkpoints", job)] == 3
    assert got[("raytrain_trainjob_last_report_timestamp_seconds", job)] == 1795428000.0
    assert got[("raytrain_trainjob_last_checkpoint_timestamp_seconds", job)] == 1795427940.0
    assert got[("raytrain_trainjob_last_progress_timestamp_seconds", job)] == 1795427970.0
    assert got[("raytrain_trainjob_step_skew_percent", job)] == 3.5
    assert not [k for k in got if k[0] == metrics.STRAGGLER]  # none named: no series
    for kind, seconds, gpu in (("allocated", 100, 200), ("productive", 60, 120), ("lost", 20, 40)):
        labelled = (("kind", kind), *job)
        assert got[("raytrain_trainjob_goodput_seconds", labelled)] == seconds
        assert got[("raytrain_trainjob_goodput_gpu_seconds", labelled)] == gpu
    text = generate_latest(registry).decode()
    assert (
        'raytrain_trainjob_goodput_seconds{kind="lost",trainjob="digits",'
        'trainjob_namespace="team-a"} 20.0' in text
    )
    assert 'namespace="team-a"' not in text.replace('trainjob_namespace="team-a"', "")


def test_one_series_per_job_and_gauge_and_none_for_what_is_not_known() -> None:
    jobs = {("team-a", f"job-{i}"): FULL for i in range(5)}
    jobs[("team-b", "job-0")] = NEW  # same name, other namespace: its own series
    registry = watched(index(jobs))
    got = series(registry)
    per_job_full = len(metrics.JOB_GAUGES) + 2 * len(metrics.GOODPUT_KINDS)
    assert len(got) == 5 * per_job_full + 1  # the new job has only its restart count
    assert (
        "raytrain_trainjob_restarts",
        (("trainjob", "job-0"), ("trainjob_namespace", "team-b")),
    ) in got
    unknown = dict(FULL, goodput={"allocatedSeconds": 10.0, "allocatedGPUSeconds": 0.0})
    got = series(watched(index({("team-a", "old-runtime"): unknown})))
    kinds = {dict(labels)["kind"] for name, labels in got if name == metrics.GOODPUT_SECONDS}
    assert kinds == {"allocated"}  # productive and lost are not known: no series, not 0


def test_a_straggler_is_a_series_with_its_rank_pod_and_node() -> None:
    slow = {"skewPercent": 66.7, "straggler": True,
            "slowest": {"rank": 1, "pod": "digits-0-worker-b", "node": "node-b"}}  # fmt: skip
    status = dict(FULL, trainerStatus={**FULL["trainerStatus"], "stepTime": slow})
    got = series(watched(index({("team-a", "digits"): status})))
    labels = (
        ("node", "node-b"),
        ("pod", "digits-0-worker-b"),
        ("rank", "1"),
        ("trainjob", "digits"),
        ("trainjob_namespace", "team-a"),
    )
    assert got[(metrics.STRAGGLER, labels)] == 66.7


def test_a_deleted_job_leaves_no_series() -> None:
    states = index({("team-a", "a"): FULL, ("team-a", "b"): FULL})
    registry = watched(states)
    assert {dict(labels)["trainjob"] for _, labels in series(registry)} == {"a", "b"}
    del states[("team-a", "b")]  # the watch saw the delete: kopf drops it from the index
    assert {dict(labels)["trainjob"] for _, labels in series(registry)} == {"a"}
    states.clear()
    assert series(registry) == {}


def test_a_value_of_the_wrong_type_is_no_series() -> None:
    odd = {"restarts": True, "trainerStatus": {"epoch": "2", "lastUpdatedTime": "yesterday"}}
    assert metrics.job_values(odd) == ()
