"""Wake-ups: a TrainJob's pass runs as soon as something it waits for happens, and at the latest
one resync interval after the last pass.

- One of its RayJobs changes (KubeRay writes the status, the RayJob is being deleted or is gone):
  the `wake-trainjob` event handler queues the TrainJob at once. An event that shows nothing the
  last pass has not seen (the ADDED event of a RayJob the operator has just created, a change
  of fields no pass reads) wakes nothing.
- The runtime's report (`status.trainerStatus`) changes: a MODIFIED event of the TrainJob
  whose report differs from what the last pass read queues it (kopf's change handlers react
  to the spec only).
- A plan says something falls due (a deadline, a checkpoint grace period, the TTL, an earlier
  attempt's RayJob being deleted): the TrainJob is queued for that moment.

Queued passes run on threads of their own; passes over one TrainJob never overlap (the queue
runs one key at a time, and every pass takes the TrainJob's lock). A queued pass reads the
TrainJob from the API server, not from a watch event that may predate the last status patch,
and writes with that read's resourceVersion as a precondition: if another writer came in
between, nothing is written and the TrainJob is queued again.

The resync is the same queue: every pass over a job the operator still has work on queues the
next one `CONFIG.resync_seconds` later (unless something is due sooner), the safety net for a
missed event; a pass that failed is queued again. kopf's resume handler runs a pass over every
TrainJob when the operator starts, which queues the rest. There is no kopf timer per TrainJob:
a timer makes kopf add a finalizer before it runs any handler (one more write and one more
watch event before the first RayJob) and keeps a task per object.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import kopf

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_contract.meta import LABEL_TRAINJOB
from raytrain_operator import k8s, metrics
from raytrain_operator.k8s import RAY_GROUP, RAY_VERSION, RAYJOBS
from raytrain_operator.settings import CONFIG
from raytrain_operator.status import machine

Key = tuple[str, str]
LOG = logging.getLogger("raytrain_operator.wake")

#: After a write refused because the TrainJob changed meanwhile: queued again this much later.
CONFLICT_RETRY_SECONDS = 0.5

#: What queued a pass, and the `handler` label of its reconcile metrics: the resync interval
#: (or a retry after a failed pass), or anything else (an event, a due time, a conflict).
RESYNC = "resync"
WAKE = "wake"


def fingerprint(rayjob: Mapping[str, Any]) -> str:
    """What of a RayJob a pass reads and KubeRay or the garbage collector changes."""
    metadata = rayjob.get("metadata") or {}
    spec = rayjob.get("spec") or {}
    return json.dumps(
        [
            dict(rayjob.get("status") or {}),
            bool(metadata.get("deletionTimestamp")),
            bool(spec.get("suspend", False)),
        ],
        sort_keys=True,
        default=str,
    )


def needs_operator(
    spec: Mapping[str, Any], status: Mapping[str, Any], annotations: Mapping[str, Any]
) -> bool:
    """machine.needs_operator with the TTL the job runs under (its own, or its template's)."""
    ttl = templates.effective_value(spec, status, "ttlSecondsAfterFinished")
    return machine.needs_operator(status, ttl, annotations)


class Waker:
    """A delay queue of TrainJob keys, each run by `run` when due, one pass per key at a time."""

    def __init__(self, run: Callable[[Key, str], None], workers: int = 4) -> None:
        self._run = run
        self._workers = workers
        self._cond = threading.Condition()
        self._due: dict[Key, float] = {}
        self._cause: dict[Key, str] = {}
        self._heap: list[tuple[float, int, Key]] = []
        self._seq = itertools.count()
        self._running: set[Key] = set()
        self._again: set[Key] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._context: contextvars.Context | None = None
        #: (namespace, RayJob name) -> the fingerprint the last pass saw.
        self._seen: dict[Key, str] = {}
        self._seen_guard = threading.Lock()
        #: (namespace, TrainJob name) -> its trainerStatus as the last pass read it.
        self._reports: dict[Key, str] = {}
        #: kopf's indexes (rayjobs, rayclusters), as the handlers received them.
        self.indexes: tuple[Any, Any] = (None, None)

    # ------------------------------------------------------------------ what passes saw

    def saw(self, namespace: str, rayjob: Mapping[str, Any]) -> None:
        name = str((rayjob.get("metadata") or {}).get("name"))
        with self._seen_guard:
            self._seen[(namespace, name)] = fingerprint(rayjob)

    def news(self, namespace: str, rayjob: Mapping[str, Any]) -> bool:
        """Whether a RayJob event shows something the last pass did not see."""
        name = str((rayjob.get("metadata") or {}).get("name"))
        with self._seen_guard:
            return self._seen.get((namespace, name)) != fingerprint(rayjob)

    def gone(self, namespace: str, name: str) -> None:
        with self._seen_guard:
            self._seen.pop((namespace, name), None)

    def saw_report(self, namespace: str, name: str, report: Any) -> None:
        with self._seen_guard:
            self._reports[(namespace, name)] = json.dumps(report, sort_keys=True, default=str)

    def report_news(self, namespace: str, name: str, report: Any) -> bool:
        text = json.dumps(report, sort_keys=True, default=str)
        with self._seen_guard:
            return self._reports.get((namespace, name), text) != text

    def forget_trainjob(self, namespace: str, name: str) -> None:
        """The TrainJob is gone: its last report and its queued pass (which would only read a
        404) are dropped; a pass running now ends on its own."""
        key = (namespace, name)
        with self._seen_guard:
            self._reports.pop(key, None)
        with self._cond:
            # Its heap entry stays, superseded: `_next` skips an entry whose time is not due.
            self._due.pop(key, None)
            self._cause.pop(key, None)
            self._again.discard(key)

    # ------------------------------------------------------------------------ the queue

    def capture(self, rayjobs: Any = None, rayclusters: Any = None) -> None:
        """Keep kopf's context (to post Events from our threads) and its indexes."""
        self._context = contextvars.copy_context()
        if rayjobs is not None or rayclusters is not None:
            self.indexes = (rayjobs, rayclusters)

    def schedule(self, key: Key, delay: float = 0.0, cause: str = WAKE) -> None:
        """Run a pass over `key` in `delay` seconds (or earlier, if one is due earlier)."""
        at = time.monotonic() + max(delay, 0.0)
        with self._cond:
            current = self._due.get(key)
            if current is not None and current <= at:
                return
            self._due[key] = at
            self._cause[key] = cause
            heapq.heappush(self._heap, (at, next(self._seq), key))
            if self._thread is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="raytrain-wake")
                self._thread = threading.Thread(
                    target=self._loop, name="raytrain-waker", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def pending(self) -> dict[Key, float]:
        """Seconds until each queued key is due (for tests and logs)."""
        now = time.monotonic()
        with self._cond:
            return {key: at - now for key, at in self._due.items()}

    def _next(self) -> tuple[Key, str]:
        with self._cond:
            while True:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier schedule
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    _, _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    cause = self._cause.pop(key, WAKE)
                    if key in self._running:
                        self._again.add(key)  # once the running pass is over
                        continue
                    self._running.add(key)
                    return key, cause
                self._cond.wait(self._heap[0][0] - now if self._heap else None)

    def _loop(self) -> None:
        while True:
            key, cause = self._next()
            assert self._pool is not None
            self._pool.submit(self._guarded, key, cause)

    def _guarded(self, key: Key, cause: str = WAKE) -> None:
        try:
            if self._context is not None:
                self._context.copy().run(self._run, key, cause)
            else:
                self._run(key, cause)
        except kopf.TemporaryError as exc:
            # The API server did not answer (reconcile names it): soon, as kopf would.
            delay = float(exc.delay) if exc.delay is not None else CONFIG.resync_seconds
            LOG.warning(f"[{key[0]}/{key[1]}] {exc}")
            self.schedule(key, delay, RESYNC)
        except Exception:
            LOG.exception(
                f"[{key[0]}/{key[1]}] A pass failed; it runs again in {CONFIG.resync_seconds:g} s."
            )
            self.schedule(key, CONFIG.resync_seconds, RESYNC)
        finally:
            with self._cond:
                self._running.discard(key)
                again = key in self._again
                self._again.discard(key)
            if again:
                self.schedule(key)


class _ObjectLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Log lines of a woken pass, prefixed like kopf's per-object lines."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.extra['key']}] {msg}" if self.extra else msg, kwargs


def run_pass(key: Key, cause: str = WAKE) -> None:
    """One pass over a TrainJob, read fresh from the API; writes only if it did not change.

    A job the operator has no more work on (finished, TTL clean-up done) or that is being
    deleted gets no pass, and so no next one: its resyncs end here."""
    from raytrain_operator.handlers.reconcile import reconcile

    namespace, name = key
    obj = k8s.get_trainjob(namespace, name)
    if obj is None:
        return
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if metadata.get("deletionTimestamp") or not needs_operator(
        spec, status, metadata.get("annotations") or {}
    ):
        return
    body = kopf.Body(cast(kopf.RawBody, obj))
    patch = kopf.Patch()
    logger = _ObjectLogger(LOG, {"key": f"{namespace}/{name}"})
    rayjobs, rayclusters = WAKER.indexes
    reconcile(cause, body, patch, logger, rayjobs, rayclusters)
    if not write(namespace, name, metadata, patch):
        metrics.WAKE_CONFLICTS.inc()
        WAKER.schedule(key, CONFLICT_RETRY_SECONDS)


def write(namespace: str, name: str, metadata: Mapping[str, Any], patch: kopf.Patch) -> bool:
    """Apply a pass's patch (annotations, status) if the TrainJob is still as it was read.

    False when it changed meanwhile (409): nothing of this pass's status is written.
    """
    precondition: dict[str, Any] = {
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }
    annotations = dict((patch.get("metadata") or {}).get("annotations") or {})
    status = dict(patch.get("status") or {})
    if annotations:
        body = {"metadata": {**precondition, "annotations": annotations}}
        if not k8s.patch_trainjob(namespace, name, body):
            return False
        # Our own write moved the resourceVersion; the status write follows it at once.
        precondition = {"uid": metadata.get("uid")}
    if status:
        body = {"metadata": precondition, "status": status}
        if not k8s.patch_trainjob(namespace, name, body, subresource="status"):
            return False
    return True


WAKER = Waker(run_pass)


@kopf.on.event(
    RAY_GROUP, RAY_VERSION, RAYJOBS, labels={LABEL_TRAINJOB: kopf.PRESENT}, id="wake-trainjob"
)
async def rayjob_changed(
    type: str | None,
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    body: kopf.Body,
    rayjobs: kopf.Index[Any, Any] | None = None,
    rayclusters: kopf.Index[Any, Any] | None = None,
    **_: Any,
) -> None:
    """A RayJob of a TrainJob changed: that TrainJob's pass runs now (through the queue).

    The event handlers are coroutines: what they do takes microseconds, and kopf would hand a
    plain function to its thread pool, where the passes wait for threads too."""
    if namespace is None:
        return
    WAKER.capture(rayjobs, rayclusters)
    owner = str(meta.labels[LABEL_TRAINJOB])
    if type == "DELETED":
        WAKER.gone(namespace, name)
    elif type is None or not WAKER.news(namespace, body):
        # The listing at start-up (every TrainJob is resumed anyway), or nothing new.
        return
    metrics.WAKEUPS.labels(cause="rayjob").inc()
    WAKER.schedule((namespace, owner))


@kopf.on.event(GROUP, VERSION, PLURAL, id="trainjob-event")
async def trainjob_changed(
    type: str | None,
    namespace: str | None,
    name: str,
    status: kopf.Status,
    spec: kopf.Spec,
    meta: kopf.Meta,
    logger: kopf.Logger,
    uid: str | None = None,
    **_: Any,
) -> None:
    """The runtime wrote a new report: the TrainJob's pass runs now (through the queue). The
    TrainJob is gone: what the operator kept of it is dropped."""
    if namespace is None:
        return
    if type == "DELETED":
        from raytrain_operator.handlers.reconcile import forget

        if uid:
            forget(uid)
        WAKER.forget_trainjob(namespace, name)
        logger.info("TrainJob deleted; Kubernetes garbage-collects its RayJob, ConfigMap and RBAC.")
    elif (
        type == "MODIFIED"
        and needs_operator(spec, status, meta.get("annotations") or {})
        and WAKER.report_news(namespace, name, status.get("trainerStatus"))
    ):
        metrics.WAKEUPS.labels(cause="report").inc()
        WAKER.schedule((namespace, name))
