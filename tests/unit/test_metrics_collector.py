"""The TrainJob gauges are computed at scrape time from the watch-fed index of TrainJob states."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from raytrain_operator import metrics
from raytrain_operator.handlers import trainjobs

RUNNING = {
    "phase": "Running",
    "conditions": [
        {"type": "Created", "status": "True"},
        {"type": "Running", "status": "True"},
        {"type": "Succeeded", "status": "False"},
    ],
}
STALLED = {
    "phase": "Stalled",
    "conditions": [
        {"type": "Created", "status": "False"},
        {"type": "Stalled", "status": "True"},
        {"type": "Reconciling", "status": "True"},
    ],
}
SUCCEEDED = {"phase": "Succeeded", "conditions": [{"type": "Succeeded", "status": "True"}]}


def index(**jobs: dict[str, Any]) -> dict[tuple[str, str], list[metrics.TrainJobState]]:
    """What kopf's index holds: (namespace, name) -> a store of the index function's values."""
    out: dict[tuple[str, str], list[metrics.TrainJobState]] = {}
    for name, status in jobs.items():
        (((key, value),)) = asyncio.run(
            trainjobs.trainjob_states(namespace="team-a", name=name, status=status)
        ).items()
        out[key] = [value]
    return out


def samples(registry: CollectorRegistry, name: str, label: str) -> dict[str, float]:
    (family,) = [f for f in registry.collect() if f.name == name]
    return {s.labels[label]: s.value for s in family.samples}


def test_collect_counts_a_known_set_of_jobs() -> None:
    states = index(a=RUNNING, b=RUNNING, c=STALLED, d=SUCCEEDED, e={})
    registry = CollectorRegistry()
    metrics.watch_trainjobs(lambda: [s for store in states.values() for s in store], registry)
    assert samples(registry, "raytrain_trainjobs", "phase") == {
        "Pending": 1,  # e: no status yet
        "Running": 2,
        "Suspended": 0,
        "Succeeded": 1,
        "Failed": 0,
        "Stalled": 1,
    }
    assert samples(registry, "raytrain_trainjob_conditions", "type") == {
        "Created": 2,
        "Running": 2,
        "Suspended": 0,
        "Succeeded": 1,
        "Failed": 0,
        "Reconciling": 1,
        "Stalled": 1,
        "Hung": 0,
        "Straggling": 0,
    }
    text = generate_latest(registry).decode()
    assert 'raytrain_trainjobs{phase="Running"} 2.0' in text
    assert "# TYPE raytrain_trainjob_conditions gauge" in text


def test_the_gauges_follow_the_index_without_any_reconcile() -> None:
    states = index(a=RUNNING)
    registry = CollectorRegistry()
    metrics.watch_trainjobs(lambda: [s for store in states.values() for s in store], registry)
    assert samples(registry, "raytrain_trainjobs", "phase")["Running"] == 1
    states.update(index(a=SUCCEEDED, b=RUNNING))  # the watch saw a finish and a new job
    assert samples(registry, "raytrain_trainjobs", "phase")["Running"] == 1
    assert samples(registry, "raytrain_trainjobs", "phase")["Succeeded"] == 1
    del states[("team-a", "b")]  # the watch saw a delete
    assert samples(registry, "raytrain_trainjobs", "phase")["Running"] == 0


def test_the_startup_handler_serves_kopfs_index(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = CollectorRegistry()
    real = metrics.watch_trainjobs
    monkeypatch.setattr(metrics, "watch_trainjobs", lambda states: real(states, registry))
    states = index(a=STALLED)
    trainjobs.serve_trainjob_metrics(trainjob_states=states)  # type: ignore[arg-type]
    assert samples(registry, "raytrain_trainjobs", "phase")["Stalled"] == 1
    # An operator restarted in the same process replaces the collector, no duplicate error.
    trainjobs.serve_trainjob_metrics(trainjob_states=index())  # type: ignore[arg-type]
    assert samples(registry, "raytrain_trainjobs", "phase")["Stalled"] == 0


def test_an_index_changing_during_the_scrape_is_read_again() -> None:
    calls = {"n": 0}

    def states() -> list[metrics.TrainJobState]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("dictionary changed size during iteration")
        return [metrics.TrainJobState("Running", frozenset({"Running"}))]

    registry = CollectorRegistry()
    metrics.watch_trainjobs(states, registry)
    calls["n"] = 0  # registering reads nothing (describe); count from the scrape
    assert samples(registry, "raytrain_trainjobs", "phase")["Running"] == 1
    assert calls["n"] == 2


def test_registering_does_not_read_the_index() -> None:
    def states() -> list[metrics.TrainJobState]:
        raise AssertionError("read at registration")

    metrics.watch_trainjobs(states, CollectorRegistry())


def test_an_unknown_phase_is_still_counted() -> None:
    registry = CollectorRegistry()
    metrics.watch_trainjobs(lambda: [metrics.TrainJobState("Terminating", frozenset())], registry)
    assert samples(registry, "raytrain_trainjobs", "phase")["Terminating"] == 1
