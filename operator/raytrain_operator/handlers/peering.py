"""Whether another instance holds the peering: the engine's pause, read from kopf's own peering
objects.

kopf pauses only its own handlers and watches when a peer with a higher priority (or the same
priority) is alive; it tells them nothing. The engine's queue and its write path run beside
kopf, so they read the same objects and apply kopf's rule (kopf/_core/engines/peering.py): every
peer in the object's status other than this instance's identity, alive while `lastseen` plus
`lifetime` lies ahead, pauses this instance if its priority is higher or equal. One watch per
peering object (the ClusterKopfPeering of a cluster-wide operator, or the KopfPeering of each
namespace a namespaced one serves), re-evaluated at every event and when a peer's lifetime ends.
A peering object that does not exist pauses nothing (kopf's `auto` mode runs alone then).

One more rule is the engine's own: an instance writes nothing until its own heartbeat has been
in the peering object for `SETTLE_SECONDS` with no peer of higher or equal priority beside it
(the watch starts paused). Two instances that start together (the pods of a rollout, a standby
replica) each find the other registered by then, and the one that pauses never wrote; a new
instance beside a working one lets the working one see it and pause before its own first
write, so one instance's last write comes before the next one's first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator import k8s

LOG = logging.getLogger("raytrain_operator.peering")
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
#: Longest watch request; also the longest a peer's end of life goes unnoticed without events.
WATCH_SECONDS = 60
#: After a failed read or watch, the next try.
RETRY_SECONDS = 1.0
#: How long this instance's heartbeat is in the peering object, alone at the top, before it
#: writes: long enough for an instance that started at about the same time to register.
SETTLE_SECONDS = 10.0


def blocking_peers(
    status: Mapping[str, Any], identity: str, priority: int, now: datetime
) -> tuple[list[str], float | None]:
    """The live peers that pause an instance of `identity` and `priority`, and the seconds until
    the first of them is presumed dead (None: no such peer)."""
    blocking: list[str] = []
    ends: list[float] = []
    for peer_id, info in status.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        seen = parse_rfc3339(str(info.get("lastseen") or "")) or now
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=timezone.utc)
        left = (seen + timedelta(seconds=int(info.get("lifetime") or 60)) - now).total_seconds()
        if left <= 0:
            continue
        if int(info.get("priority") or 0) >= priority:
            blocking.append(peer_id)
            ends.append(left)
    return blocking, (min(ends) if ends else None)


class PeeringWatch:
    """Watches the peering objects of this instance; calls `changed(paused)` on every change.
    Paused from the start until every peering object has been read and this instance has
    settled in each that exists."""

    def __init__(
        self,
        name: str,
        namespaces: list[str],
        identity: str,
        priority: int,
        changed: Callable[[bool], None],
        settle_seconds: float = SETTLE_SECONDS,
    ) -> None:
        self.name, self.identity, self.priority = name, identity, priority
        self._changed = changed
        self._settle = settle_seconds
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self._targets: list[str | None] = list(namespaces) or [None]
        #: Per peering object (namespace, or None for the cluster's): whether it pauses us.
        #: Paused until read.
        self._paused: dict[str | None, bool] = {ns: True for ns in self._targets}
        #: When this instance's own heartbeat was first seen in each object (monotonic).
        self._own_since: dict[str | None, float] = {}
        self._said = ""
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for namespace in self._targets:
            thread = threading.Thread(
                target=self._run, args=(namespace,), name="raytrain-peering", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()

    @property
    def paused(self) -> bool:
        with self._guard:
            return any(self._paused.values())

    def _path(self, namespace: str | None) -> str:
        base = f"/apis/{PEERING_GROUP}/{PEERING_VERSION}"
        if namespace is None:
            return f"{base}/clusterkopfpeerings"
        return f"{base}/namespaces/{quote(namespace)}/kopfpeerings"

    def _set(
        self, namespace: str | None, status: Mapping[str, Any], exists: bool = True
    ) -> float | None:
        """Apply the peering object's status (`exists` False: there is no such object, and
        nothing pauses this instance). Returns the seconds until it must be looked at again
        (a peer's end of life, the end of the settling), or None."""
        blocking, ends_in = blocking_peers(
            status, self.identity, self.priority, datetime.now(timezone.utc)
        )
        settle_left: float | None = None
        if exists:
            now = time.monotonic()
            if self.identity in status:
                since = self._own_since.setdefault(namespace, now)
                settle_left = max(0.0, since + self._settle - now)
            else:
                self._own_since.pop(namespace, None)
                settle_left = self._settle
        else:
            blocking = []
        settling = bool(settle_left) and not blocking
        with self._guard:
            before = any(self._paused.values())
            self._paused[namespace] = bool(blocking) or settling
            after = any(self._paused.values())
        if before != after:
            self._changed(after)  # first: once the line is logged, the pause holds
        if blocking:
            self._say(f"Pausing: peer {', '.join(blocking)} holds the peering {self.name}.")
        elif settling:
            self._say(
                f"Waiting in the peering {self.name}: this instance writes once its heartbeat "
                f"has been there for {self._settle:g} s with no peer above it."
            )
        elif not after:
            self._say(f"Resuming: no peer holds the peering {self.name} any more.")
        waits = [w for w in (ends_in, settle_left if settling else None) if w is not None]
        return min(waits) if waits else None

    def _say(self, line: str) -> None:
        with self._guard:
            if line == self._said:
                return
            self._said = line
        LOG.info(line)

    def _run(self, namespace: str | None) -> None:
        path = self._path(namespace)
        selector = f"metadata.name={self.name}"
        while not self._stop.is_set():
            try:
                listed = k8s.request("GET", path, query={"fieldSelector": selector})
                items = listed.get("items") or []
                status = (items[0].get("status") or {}) if items else {}
                ends_in = self._set(namespace, status, exists=bool(items))
                version = (listed.get("metadata") or {}).get("resourceVersion")
                seconds = WATCH_SECONDS if ends_in is None else max(1, min(60, int(ends_in) + 1))
                query = {
                    "fieldSelector": selector,
                    "resourceVersion": version,
                    "timeoutSeconds": seconds,
                    "allowWatchBookmarks": "false",
                }
                for event in k8s.watch(path, query, timeout=seconds + 30):
                    if self._stop.is_set():
                        return
                    obj = event.get("object") or {}
                    if event.get("type") == "DELETED":
                        self._set(namespace, {}, exists=False)
                    elif event.get("type") in ("ADDED", "MODIFIED"):
                        self._set(namespace, obj.get("status") or {})
                    elif event.get("type") == "ERROR":
                        break  # e.g. 410 Gone: list again
            except k8s.ApiException as exc:
                if exc.status == 404:  # no peering CRD: nobody to pause for
                    self._set(namespace, {}, exists=False)
                else:
                    LOG.warning(f"Reading the peering {self.name} failed: {exc}")
                self._stop.wait(RETRY_SECONDS if exc.status != 404 else WATCH_SECONDS)
            except Exception as exc:
                LOG.warning(f"Watching the peering {self.name} failed: {exc!r}")
                self._stop.wait(RETRY_SECONDS)
