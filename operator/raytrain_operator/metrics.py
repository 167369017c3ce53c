"""Prometheus metrics of the operator, served on --metrics-port at /metrics.

Counters and histograms are counted where things happen. The TrainJob gauges are not kept at
all: `TrainJobCollector` computes them when Prometheus scrapes, from the watch-fed index of
TrainJob states (handlers/trainjobs.py), so they always match what the API server holds and a
reconcile pass does no bookkeeping for them.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

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
FENCED_PASSES = Counter(
    "raytrain_fenced_passes_total",
    "Passes that created nothing: the API server showed another attempt than the pass saw, or "
    "a RayJob or pod of another attempt still existed.",
)
WAKEUPS = Counter(
    "raytrain_wakeups_total",
    "TrainJob passes queued without waiting for the resync, by cause: a RayJob event "
    "(rayjob), a new runtime report (report), a time a plan named (due), a pass that found its "
    "picture out of date (fenced).",
    ["cause"],
)
WAKE_CONFLICTS = Counter(
    "raytrain_wake_conflicts_total",
    "Woken passes that wrote nothing because the TrainJob changed after they read it.",
)
ATTEMPT_FAILURES = Counter(
    "raytrain_attempt_failures_total",
    "Failed attempts of a TrainJob, by their class (OOMKilled, ImagePullFailed, Unschedulable, "
    "NodeLost, UserException, CollectiveTimeout, Unknown; docs/failures.md).",
    ["namespace", "trainjob", "reason"],
)
RAYJOB_CREATION_SECONDS = Histogram(
    "raytrain_rayjob_creation_latency_seconds",
    "From the TrainJob's creationTimestamp to the creation of its first RayJob.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)

PHASES = ("Pending", "Running", "Suspended", "Succeeded", "Failed", "Stalled")
CONDITION_TYPES = (
    "Created",
    "Running",
    "Suspended",
    "Succeeded",
    "Failed",
    "Reconciling",
    "Stalled",
)

#: One TrainJob as the index holds it: its phase and the types of its True conditions.
TrainJobState = tuple[str, frozenset[str]]


class TrainJobCollector(Collector):
    """`raytrain_trainjobs{phase}` and `raytrain_trainjob_conditions{type}` at scrape time."""

    def __init__(self, states: Callable[[], Iterable[TrainJobState]]) -> None:
        self.states = states

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Names only: registering must not read the index, which may still be filling.
        yield from self._families(Tally(), Tally())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_phase: Tally[str] = Tally()
        by_condition: Tally[str] = Tally()
        for phase, true_conditions in self._snapshot():
            by_phase[phase] += 1
            by_condition.update(true_conditions)
        yield from self._families(by_phase, by_condition)

    def _snapshot(self) -> list[TrainJobState]:
        # kopf updates the index on its event loop while Prometheus scrapes in its own thread:
        # a copy taken mid-update raises, and the next try sees the updated index.
        for _ in range(5):
            try:
                return list(self.states())
            except RuntimeError:
                continue
        return list(self.states())

    @staticmethod
    def _families(by_phase: Tally[str], by_condition: Tally[str]) -> Iterator[GaugeMetricFamily]:
        phases = GaugeMetricFamily("raytrain_trainjobs", "TrainJobs, by phase.", labels=["phase"])
        for phase in sorted(set(PHASES) | set(by_phase)):
            phases.add_metric([phase], by_phase[phase])
        yield phases
        conditions = GaugeMetricFamily(
            "raytrain_trainjob_conditions",
            "TrainJobs with a condition True, by condition type.",
            labels=["type"],
        )
        for kind in sorted(set(CONDITION_TYPES) | set(by_condition)):
            conditions.add_metric([kind], by_condition[kind])
        yield conditions


#: id(registry) -> (registry, its collector). The registry is kept too: an id alone can be
#: reused by a new registry once the old one is gone, which then has no such collector.
_collectors: dict[int, tuple[CollectorRegistry, TrainJobCollector]] = {}


def watch_trainjobs(
    states: Callable[[], Iterable[TrainJobState]], registry: CollectorRegistry = REGISTRY
) -> TrainJobCollector:
    """Serve the TrainJob gauges from `states`; a second call (an operator restarted in the
    same process, as in tests) replaces the first."""
    old = _collectors.pop(id(registry), None)
    if old is not None and old[0] is registry:
        registry.unregister(old[1])
    collector = TrainJobCollector(states)
    registry.register(collector)
    _collectors[id(registry)] = (registry, collector)
    return collector


def serve(port: int, addr: str = "0.0.0.0") -> None:
    start_http_server(port, addr=addr)
