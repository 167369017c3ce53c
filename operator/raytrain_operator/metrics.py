"""Prometheus metrics of the operator, served on --metrics-port at /metrics."""

from __future__ import annotations

import threading
from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter(
    "raytrain_reconciles_total",
    "Reconcile passes by handler and result (ok, stalled, retry, error).",
    ["handler", "result"],
)
RECONCILE_SECONDS = Histogram(
    "raytrain_reconcile_duration_seconds",
    "Time spent in one reconcile pass, by handler.",
    ["handler"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
TRAINJOBS_BY_PHASE = Gauge("raytrain_trainjobs", "TrainJobs seen, by phase.", ["phase"])
TRAINJOBS_BY_CONDITION = Gauge(
    "raytrain_trainjob_conditions",
    "TrainJobs with a condition True, by condition type.",
    ["type"],
)
API_ERRORS = Counter(
    "raytrain_api_errors_total",
    "Kubernetes API calls that failed, by verb and resource (404/409 expected ones excluded).",
    ["verb", "resource"],
)
RAYJOB_LOOKUPS = Counter(
    "raytrain_rayjob_lookups_total",
    "Reads of a TrainJob's current RayJob, by source: the watch-fed index or the API server.",
    ["source"],
)
RAYJOB_CREATION_SECONDS = Histogram(
    "raytrain_rayjob_creation_latency_seconds",
    "From the TrainJob's creationTimestamp to the creation of its first RayJob.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)

_lock = threading.Lock()
_phases: dict[tuple[str, str], str] = {}
_conditions: dict[tuple[str, str], frozenset[str]] = {}


def observe_trainjob(
    namespace: str, name: str, phase: str | None, true_conditions: frozenset[str]
) -> None:
    """Remember one TrainJob's phase and True conditions (None phase: it is gone)."""
    key = (namespace, name)
    with _lock:
        if phase is None:
            _phases.pop(key, None)
            _conditions.pop(key, None)
        else:
            _phases[key] = phase
            _conditions[key] = true_conditions
        by_phase = Tally(_phases.values())
        by_condition = Tally(t for conds in _conditions.values() for t in conds)
    for p in ("Pending", "Running", "Suspended", "Succeeded", "Failed", "Stalled"):
        TRAINJOBS_BY_PHASE.labels(phase=p).set(by_phase.get(p, 0))
    for t in ("Created", "Running", "Suspended", "Succeeded", "Failed", "Reconciling", "Stalled"):
        TRAINJOBS_BY_CONDITION.labels(type=t).set(by_condition.get(t, 0))


def serve(port: int, addr: str = "0.0.0.0") -> None:
    start_http_server(port, addr=addr)
