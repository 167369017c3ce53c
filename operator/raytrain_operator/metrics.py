"""Prometheus metrics of the operator, served on --metrics-port at /metrics.

Counters and histograms are counted where things happen. The TrainJob gauges are not kept at
all: `TrainJobCollector` computes them when Prometheus scrapes, from the watch-fed index of
TrainJob states (handlers/trainjobs.py), so they always match what the API server holds and a
reconcile pass does no bookkeeping for them. The per-job gauges carry `trainjob_namespace` and
`trainjob` (not `namespace`, which Prometheus gives the operator's own target): one series per
job and gauge (per kind for goodput), none for a value the status does not hold, and none once
the job is deleted.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from raytrain_contract.timefmt import parse_rfc3339

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
    "Reads of a TrainJob's current RayJob, by source: the watch-fed index, the API server, or "
    "none at a new TrainJob's first pass (first-pass).",
    ["source"],
)
FENCED_PASSES = Counter(
    "raytrain_fenced_passes_total",
    "Passes that created no contract and no RayJob: the API server showed another attempt "
    "than the pass saw, or a RayJob or pod of another attempt still existed.",
)
WAKEUPS = Counter(
    "raytrain_wakeups_total",
    "TrainJob passes queued, by cause: a RayJob event (rayjob), a RayCluster event (raycluster), "
    "a new runtime report (report), a time a plan named (due), a pass that found its picture "
    "out of date (fenced), a stalled job re-checked (stalled), a difference the resync of the "
    "whole set found (resync).",
    ["cause"],
)
RESYNCS = Counter(
    "raytrain_resyncs_total",
    "Resyncs of the whole set: TrainJobs, RayJobs and RayClusters listed and compared with "
    "what the passes read; a difference queues that TrainJob (raytrain_wakeups_total{cause="
    '"resync"}).',
)
PAUSED = Gauge(
    "raytrain_paused",
    "1 while another instance holds the peering and this one starts no pass and writes "
    "nothing, else 0.",
)
WAKE_CONFLICTS = Counter(
    "raytrain_wake_conflicts_total",
    "Woken passes that wrote nothing because the TrainJob changed after they read it.",
)
ATTEMPT_FAILURES = Counter(
    "raytrain_attempt_failures_total",
    "Failed attempts of a TrainJob, by their class (OOMKilled, ImagePullFailed, Unschedulable, "
    "NodeLost, UserException, CollectiveTimeout, CheckpointUnusable, Unknown; "
    "docs/failures.md).",
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
    "Hung",
    "Straggling",
)

#: Per-job gauges: name -> (help, the status value it shows).
JOB_GAUGES: dict[str, str] = {
    "raytrain_trainjob_progress_percent": "Training progress the runtime reported, 0-100 "
    "(status.trainerStatus.progressPercentage).",
    "raytrain_trainjob_epoch": "Latest epoch the runtime reported (status.trainerStatus.epoch).",
    "raytrain_trainjob_restarts": "Cluster-level retries so far (status.restarts).",
    "raytrain_trainjob_checkpoints": "Checkpoints the runtime reported in this run "
    "(status.checkpoint.count).",
    "raytrain_trainjob_last_report_timestamp_seconds": "When the runtime last reported, Unix "
    "seconds (status.trainerStatus.lastUpdatedTime).",
    "raytrain_trainjob_last_checkpoint_timestamp_seconds": "When the runtime reported its "
    "latest checkpoint, Unix seconds (status.checkpoint.lastTime); the age is time() minus it.",
    "raytrain_trainjob_last_progress_timestamp_seconds": "When the latest training report of "
    "the current attempt came, or its training started, Unix seconds "
    "(status.trainerStatus.lastProgressTime): the hang watch counts from it.",
    "raytrain_trainjob_step_skew_percent": "The slowest rank's busy time between two reports "
    "less the median rank's, in percent of the wall time (status.trainerStatus.stepTime)",
}
STRAGGLER = "raytrain_trainjob_straggler"
#: The label values of a family with more labels than the job's are one `kind`, joined so.
LABEL_SEP = "\x1f"
#: The labels of raytrain_trainjob_straggler besides the job's: from stepTime.slowest.
STRAGGLER_KEYS = ("rank", "pod", "node")
GOODPUT_SECONDS = "raytrain_trainjob_goodput_seconds"
GOODPUT_GPU_SECONDS = "raytrain_trainjob_goodput_gpu_seconds"
#: kind label -> status.goodput field, for seconds and GPU-seconds.
GOODPUT_KINDS = {
    "allocated": ("allocatedSeconds", "allocatedGPUSeconds"),
    "productive": ("productiveSeconds", "productiveGPUSeconds"),
    "lost": ("lostSeconds", "lostGPUSeconds"),
}
JOB_LABELS = ["trainjob_namespace", "trainjob"]


class TrainJobState(NamedTuple):
    """One TrainJob as the index holds it: its phase, the types of its True conditions, and
    the numbers of its per-job gauges (metric name, or (metric name, kind), -> value)."""

    phase: str
    true_conditions: frozenset[str]
    namespace: str = ""
    name: str = ""
    values: tuple[tuple[str, str, float], ...] = ()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _timestamp(value: Any) -> float | None:
    moment = parse_rfc3339(value)
    return moment.timestamp() if moment is not None else None


def job_values(status: Mapping[str, Any]) -> tuple[tuple[str, str, float], ...]:
    """(metric, kind or "", value) of every per-job gauge the status has a value for."""
    trainer = status.get("trainerStatus") or {}
    checkpoint = status.get("checkpoint") or {}
    goodput = status.get("goodput") or {}
    found: list[tuple[str, str, float | None]] = [
        ("raytrain_trainjob_progress_percent", "", _number(trainer.get("progressPercentage"))),
        ("raytrain_trainjob_epoch", "", _number(trainer.get("epoch"))),
        ("raytrain_trainjob_restarts", "", _number(status.get("restarts"))),
        ("raytrain_trainjob_checkpoints", "", _number(checkpoint.get("count"))),
        (
            "raytrain_trainjob_last_report_timestamp_seconds",
            "",
            _timestamp(trainer.get("lastUpdatedTime")),
        ),
        (
            "raytrain_trainjob_last_checkpoint_timestamp_seconds",
            "",
            _timestamp(checkpoint.get("lastTime")),
        ),
        (
            "raytrain_trainjob_last_progress_timestamp_seconds",
            "",
            _timestamp(trainer.get("lastProgressTime")),
        ),
    ]
    step = _mapping(trainer.get("stepTime"))
    skew = _number(step.get("skewPercent"))
    found.append(("raytrain_trainjob_step_skew_percent", "", skew))
    slowest = _mapping(step.get("slowest"))
    if step.get("straggler") is True and skew is not None:
        who = (str(slowest.get(k) if slowest.get(k) is not None else "") for k in STRAGGLER_KEYS)
        found.append((STRAGGLER, LABEL_SEP.join(who), skew))
    for kind, (seconds, gpu_seconds) in GOODPUT_KINDS.items():
        found.append((GOODPUT_SECONDS, kind, _number(goodput.get(seconds))))
        found.append((GOODPUT_GPU_SECONDS, kind, _number(goodput.get(gpu_seconds))))
    return tuple((name, kind, value) for name, kind, value in found if value is not None)


class TrainJobCollector(Collector):
    """`raytrain_trainjobs{phase}`, `raytrain_trainjob_conditions{type}` and the per-job gauges
    at scrape time."""

    def __init__(self, states: Callable[[], Iterable[TrainJobState]]) -> None:
        self.states = states

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Names only: registering must not read the index, which may still be filling.
        yield from self._families(Tally(), Tally())
        yield from self._job_families([])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_phase: Tally[str] = Tally()
        by_condition: Tally[str] = Tally()
        states = self._snapshot()
        for state in states:
            by_phase[state.phase] += 1
            by_condition.update(state.true_conditions)
        yield from self._families(by_phase, by_condition)
        yield from self._job_families(states)

    @staticmethod
    def _job_families(states: list[TrainJobState]) -> Iterator[GaugeMetricFamily]:
        families = {
            name: GaugeMetricFamily(name, doc, labels=JOB_LABELS)
            for name, doc in JOB_GAUGES.items()
        }
        families[GOODPUT_SECONDS] = GaugeMetricFamily(
            GOODPUT_SECONDS,
            "Seconds of the job's Ray clusters by kind: allocated (clusters up), productive "
            "(training kept), lost (restarts and recomputed training); status.goodput. Absent "
            "when the operator cannot know the number.",
            labels=[*JOB_LABELS, "kind"],
        )
        families[GOODPUT_GPU_SECONDS] = GaugeMetricFamily(
            GOODPUT_GPU_SECONDS,
            "raytrain_trainjob_goodput_seconds times the GPUs of the clusters, by kind.",
            labels=[*JOB_LABELS, "kind"],
        )
        families[STRAGGLER] = GaugeMetricFamily(
            STRAGGLER,
            "The rank the runtime names a straggler (the slowest in each of the last 5 reports "
            "by at least 20 percent of the step), its pod and node; the value is its skew in "
            "percent (status.trainerStatus.stepTime). No series while there is none.",
            labels=[*JOB_LABELS, *STRAGGLER_KEYS],
        )
        for state in sorted(states, key=lambda s: (s.namespace, s.name)):
            for name, kind, value in state.values:
                labels = [state.namespace, state.name] + (kind.split(LABEL_SEP) if kind else [])
                family = families.get(name)
                if family is not None:
                    family.add_metric(labels, value)
        yield from families.values()

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
