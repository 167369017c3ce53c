"""The work queue under the reconcile engine: TrainJob keys, each run when due, one at a time.

A key is queued at most once (an earlier time wins over a later one); a key queued while its
pass runs runs again once that pass is over, so passes over one TrainJob never overlap and
need no lock of their own. While paused (another instance holds the peering) no pass starts:
the queued keys keep their times and run once the pause ends. Stopped (the operator exits),
no pass starts again.

The queue knows nothing of TrainJobs, reconcile or kopf: it calls `run(key, cause)`, which
queues the key again itself when it wants to (handlers/engine.py). `Seen` is the memory of what
the last passes read, which decides whether an event or a resync brings anything new.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Key = tuple[str, str]
LOG = logging.getLogger("raytrain_operator.queue")

#: A pass that raised something its runner did not handle runs again this much later.
ERROR_RETRY_SECONDS = 60.0


class WorkQueue:
    """A delay queue of keys, each run by `run(key, cause)` when due, one pass per key at a time."""

    def __init__(self, run: Callable[[Key, str], None], workers: int = 4) -> None:
        self._run = run
        self._workers = workers
        self._cond = threading.Condition()
        self._due: dict[Key, float] = {}
        self._cause: dict[Key, str] = {}
        self._heap: list[tuple[float, int, Key]] = []
        self._seq = itertools.count()
        self._running: set[Key] = set()
        self._again: dict[Key, str] = {}
        self._paused = False
        self._stopped = False
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None

    def schedule(self, key: Key, delay: float = 0.0, cause: str = "wake") -> None:
        """Run a pass over `key` in `delay` seconds (or earlier, if one is due earlier)."""
        at = time.monotonic() + max(delay, 0.0)
        with self._cond:
            if self._stopped:
                return
            current = self._due.get(key)
            if current is not None and current <= at:
                return
            self._due[key] = at
            self._cause[key] = cause
            heapq.heappush(self._heap, (at, next(self._seq), key))
            if self._thread is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="raytrain-pass")
                self._thread = threading.Thread(
                    target=self._loop, name="raytrain-queue", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def forget(self, key: Key) -> None:
        """Drop a queued pass (its TrainJob is gone); a pass running now ends on its own."""
        with self._cond:
            # Its heap entry stays, superseded: `_next` skips an entry whose time is not due.
            self._due.pop(key, None)
            self._cause.pop(key, None)
            self._again.pop(key, None)

    def pending(self) -> dict[Key, float]:
        """Seconds until each queued key is due (for tests and logs)."""
        now = time.monotonic()
        with self._cond:
            return {key: at - now for key, at in self._due.items()}

    def running(self) -> set[Key]:
        with self._cond:
            return set(self._running)

    @property
    def paused(self) -> bool:
        with self._cond:
            return self._paused

    def pause(self) -> None:
        """No pass starts until `resume`; passes that run now finish (see `wait_idle`)."""
        with self._cond:
            self._paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def stop(self, timeout: float = 10.0) -> bool:
        """No pass starts again; waits up to `timeout` for the running ones. True if none runs."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        return self.wait_idle(timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no pass runs (at most `timeout` seconds); True if none runs."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _next(self) -> tuple[Key, str] | None:
        with self._cond:
            while True:
                if self._stopped:
                    return None
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier schedule, or forgotten
                now = time.monotonic()
                if not self._paused and self._heap and self._heap[0][0] <= now:
                    _, _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    cause = self._cause.pop(key, "wake")
                    if key in self._running:
                        self._again.setdefault(key, cause)  # once the running pass is over
                        continue
                    self._running.add(key)
                    return key, cause
                wait = None if self._paused or not self._heap else self._heap[0][0] - now
                self._cond.wait(wait)

    def _loop(self) -> None:
        while True:
            found = self._next()
            if found is None:
                return
            assert self._pool is not None
            self._pool.submit(self._guarded, *found)

    def _guarded(self, key: Key, cause: str) -> None:
        try:
            self._run(key, cause)
        except Exception:
            LOG.exception(
                f"[{key[0]}/{key[1]}] A pass failed; it runs again in {ERROR_RETRY_SECONDS:g} s."
            )
            self.schedule(key, ERROR_RETRY_SECONDS, "retry")
        finally:
            with self._cond:
                self._running.discard(key)
                again = self._again.pop(key, None)
                self._cond.notify_all()
            if again is not None:
                self.schedule(key, 0.0, again)


def fingerprint(obj: Mapping[str, Any]) -> str:
    """What of a RayJob (or a RayCluster's index entry) a pass reads and others change."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return json.dumps(
        [
            dict(obj.get("status") or {}),
            bool(metadata.get("deletionTimestamp")),
            bool(spec.get("suspend", False)),
        ],
        sort_keys=True,
        default=str,
    )


def trainjob_fingerprint(obj: Mapping[str, Any]) -> str:
    """What of a TrainJob a pass reads: its spec (generation), its deletion and its status (the
    runtime's report and the operator's own fields, as the operator last wrote them: a change
    by anyone else is news)."""
    metadata = obj.get("metadata") or {}
    return json.dumps(
        [
            metadata.get("uid"),
            metadata.get("generation"),
            bool(metadata.get("deletionTimestamp")),
            dict(obj.get("status") or {}),
        ],
        sort_keys=True,
        default=str,
    )


def newer_version(found: str, known: str | None) -> bool:
    """Whether resourceVersion `found` is later than `known` (None: none known). The API
    server's versions are etcd revisions, numbers that only grow; one that is not a number is
    later whenever it differs."""
    if known is None:
        return True
    if found.isdigit() and known.isdigit():
        return int(found) > int(known)
    return found != known


class Seen:
    """What the last passes read, by key: RayJobs and RayClusters by (namespace, name), TrainJobs
    by (namespace, name). An event that shows the same wakes nothing.

    Besides, the resourceVersion of every object of the kinds the engine follows (TrainJobs,
    RayJobs, RayClusters) as its watch event or a pass's read last showed it, with the
    TrainJob it belongs to: the resync lists their metadata only and queues the TrainJob of
    each object whose version the watch has not shown, or that is gone without its event."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._rayjobs: dict[Key, str] = {}
        self._clusters: dict[Key, str] = {}
        self._trainjobs: dict[Key, str] = {}
        #: plural -> (namespace, name) -> (resourceVersion, owner): the TrainJob's name for a
        #: child, the TrainJob's uid for a TrainJob.
        self._versions: dict[str, dict[Key, tuple[str, str]]] = {}

    def saw_version(self, plural: str, metadata: Mapping[str, Any], owner: str) -> None:
        """Record an object's resourceVersion (an older one than known is not recorded: a
        watch event can arrive after a newer read)."""
        version = str(metadata.get("resourceVersion") or "")
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        with self._guard:
            kept = self._versions.setdefault(plural, {})
            known = kept.get(key)
            if version and newer_version(version, known[0] if known else None):
                kept[key] = (version, owner)

    def version_news(self, plural: str, metadata: Mapping[str, Any]) -> bool:
        """Whether a listed object's resourceVersion is one no event or read has shown."""
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        with self._guard:
            known = self._versions.get(plural, {}).get(key)
        found = str(metadata.get("resourceVersion") or "")
        return newer_version(found, known[0] if known else None)

    def version_gone(self, plural: str, namespace: str, name: str) -> None:
        with self._guard:
            self._versions.get(plural, {}).pop((namespace, name), None)

    def versions(self, plural: str) -> dict[Key, str]:
        """Every object of a kind with a known version: its key -> its owner."""
        with self._guard:
            return {key: owner for key, (_, owner) in self._versions.get(plural, {}).items()}

    def saw_rayjob(self, namespace: str, rayjob: Mapping[str, Any]) -> None:
        name = str((rayjob.get("metadata") or {}).get("name"))
        with self._guard:
            self._rayjobs[(namespace, name)] = fingerprint(rayjob)

    def rayjob_news(self, namespace: str, rayjob: Mapping[str, Any]) -> bool:
        name = str((rayjob.get("metadata") or {}).get("name"))
        with self._guard:
            return self._rayjobs.get((namespace, name)) != fingerprint(rayjob)

    def rayjob_gone(self, namespace: str, name: str) -> None:
        with self._guard:
            self._rayjobs.pop((namespace, name), None)

    def cluster_news(self, namespace: str, name: str, entry: Mapping[str, Any] | None) -> bool:
        """Record a RayCluster's index entry (None: gone); True if it differs from the last."""
        text = None if entry is None else json.dumps(entry, sort_keys=True, default=str)
        with self._guard:
            before = self._clusters.get((namespace, name))
            if text is None:
                self._clusters.pop((namespace, name), None)
            else:
                self._clusters[(namespace, name)] = text
        return before != text

    def saw_trainjob(self, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        with self._guard:
            self._trainjobs[key] = trainjob_fingerprint(obj)

    def trainjob_news(self, obj: Mapping[str, Any]) -> bool:
        """Whether a TrainJob differs from what the last pass read and wrote: a new spec, a
        report, a status someone else changed, its deletion; True for one no pass has read."""
        metadata = obj.get("metadata") or {}
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        with self._guard:
            before = self._trainjobs.get(key)
        return before is None or before != trainjob_fingerprint(obj)

    def forget_trainjob(self, namespace: str, name: str) -> None:
        with self._guard:
            self._trainjobs.pop((namespace, name), None)
