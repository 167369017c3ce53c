"""Say so when tasks wait for resources the cluster does not free (Ray Data's reads, most often).

Ray Data reads a TrainJob's ``datasets`` in Ray tasks, each asking for a CPU by default. When
the training workers hold every CPU, the first read task waits for one forever, the training
loop waits for its first batch, and neither Ray Train nor the driver prints anything. The driver
asks Ray's GCS what tasks wait for (the "Demands" that ``ray status`` shows) and logs a warning
naming the resources once the same wait has lasted ``warn_after`` seconds, then again every
``warn_after`` seconds while it lasts.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger("trainer_runtime")

#: Seconds tasks may wait for resources before the driver says so.
WARN_ENV = "RAYTRAIN_DATA_WAIT_WARN_SECONDS"
DEFAULT_WARN_S = 60.0

#: One waiting shape: the resources one task asks for, and how many tasks ask for it.
Demand = list[tuple[dict[str, float], int]]


def warn_after_seconds() -> float:
    raw = os.environ.get(WARN_ENV)
    if not raw:
        return DEFAULT_WARN_S
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g", WARN_ENV, raw, DEFAULT_WARN_S)
        return DEFAULT_WARN_S
    return value if value > 0 else DEFAULT_WARN_S


def pending_task_demand() -> Demand:
    """Resources that tasks and actors wait for on this Ray cluster, as ``ray status`` shows."""
    import ray
    from ray.autoscaler.v2.sdk import get_cluster_status

    status = get_cluster_status(ray.get_runtime_context().gcs_address)
    out: Demand = []
    for demand in status.resource_demands.ray_task_actor_demand:
        for shape in demand.bundles_by_count:
            out.append(({k: float(v) for k, v in shape.bundle.items()}, int(shape.count)))
    return out


def cpu_totals() -> tuple[float, float]:
    """(CPUs of the cluster, CPUs free now)."""
    import ray

    return (
        float(ray.cluster_resources().get("CPU", 0.0)),  # type: ignore[no-untyped-call]
        float(ray.available_resources().get("CPU", 0.0)),  # type: ignore[no-untyped-call]
    )


def _shape(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(bundle.items())) + "}"


def describe_wait(
    demand: Demand,
    waited: float,
    datasets: Sequence[str],
    training_cpus: float,
    cpus: tuple[float, float],
) -> str:
    total, free = cpus
    tasks = sum(count for _, count in demand)
    shapes = ", ".join(f"{count} x {_shape(bundle)}" for bundle, count in demand)
    names = ", ".join(repr(n) for n in datasets)
    return (
        f"{tasks} Ray task{'s' if tasks != 1 else ''} waited {waited:.0f} s for resources the "
        f"cluster does not free: {shapes}; the cluster has {free:g} of {total:g} CPUs free and the "
        f"training workers hold {training_cpus:g}. The input pipeline of dataset(s) {names} "
        "cannot run until a CPU beyond the training workers' frees up: give the cluster more CPUs "
        "or lower spec.scaling.resourcesPerWorker.cpu (docs/data.md)"
    )


class WaitWatch:
    """Tracks how long a non-empty task demand has lasted; ``check`` returns a warning when due."""

    def __init__(
        self,
        datasets: Sequence[str],
        training_cpus: float,
        *,
        warn_after: float,
        demand: Callable[[], Demand] = pending_task_demand,
        cpus: Callable[[], tuple[float, float]] = cpu_totals,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.datasets = list(datasets)
        self.training_cpus = training_cpus
        self.warn_after = warn_after
        self._demand = demand
        self._cpus = cpus
        self._clock = clock
        self._since: float | None = None
        self._warned: float | None = None

    def check(self) -> str | None:
        demand = self._demand()
        now = self._clock()
        if not demand:
            self._since = self._warned = None
            return None
        if self._since is None:
            self._since = now
        waited = now - self._since
        if waited < self.warn_after:
            return None
        if self._warned is not None and now - self._warned < self.warn_after:
            return None
        self._warned = now
        return describe_wait(demand, waited, self.datasets, self.training_cpus, self._cpus())

    def run(self, stop: threading.Event) -> None:
        poll = min(5.0, max(self.warn_after / 4, 0.5))
        failures = 0
        while not stop.wait(poll):
            try:
                message = self.check()
            except Exception as exc:  # watching must never break training
                failures += 1
                if failures == 1:
                    log.debug("cannot read the cluster's pending demand: %s", exc)
                continue
            if message:
                log.warning("%s", message)


def start_watch(
    datasets: Sequence[str], training_cpus: float
) -> tuple[threading.Event, threading.Thread]:
    """Start a daemon thread watching for waiting tasks; set the returned event to stop it."""
    stop = threading.Event()
    watch = WaitWatch(datasets, training_cpus, warn_after=warn_after_seconds())
    thread = threading.Thread(
        target=watch.run, args=(stop,), name="raytrain-data-wait", daemon=True
    )
    thread.start()
    return stop, thread
