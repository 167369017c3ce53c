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
"""

from __future__ import annotations

import logging
import threading
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
    """Watches the peering objects of this instance; calls `changed(paused)` on every change."""

    def __init__(
        self,
        name: str,
        namespaces: list[str],
        identity: str,
        priority: int,
        changed: Callable[[bool], None],
    ) -> None:
        self.name, self.identity, self.priority = name, identity, priority
        self._changed = changed
        self._stop = threading.Event()
        self._guard = threading.Lock()
        #: Per peering object (namespace, or None for the cluster's): whether it pauses us.
        self._paused: dict[str | None, bool] = {}
        self._targets: list[str | None] = list(namespaces) or [None]
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

    def _set(self, namespace: str | None, status: Mapping[str, Any]) -> float | None:
        blocking, ends_in = blocking_peers(
            status, self.identity, self.priority, datetime.now(timezone.utc)
        )
        with self._guard:
            before = any(self._paused.values())
            self._paused[namespace] = bool(blocking)
            after = any(self._paused.values())
        if before != after:
            self._changed(after)  # first: once the line is logged, the pause holds
            if after:
                LOG.info(f"Pausing: peer {', '.join(blocking)} holds the peering {self.name}.")
            else:
                LOG.info(f"Resuming: no peer holds the peering {self.name} any more.")
        return ends_in

    def _run(self, namespace: str | None) -> None:
        path = self._path(namespace)
        selector = f"metadata.name={self.name}"
        while not self._stop.is_set():
            try:
                listed = k8s.request("GET", path, query={"fieldSelector": selector})
                items = listed.get("items") or []
                status = (items[0].get("status") or {}) if items else {}
                ends_in = self._set(namespace, status)
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
                        self._set(namespace, {})
                    elif event.get("type") in ("ADDED", "MODIFIED"):
                        self._set(namespace, obj.get("status") or {})
                    elif event.get("type") == "ERROR":
                        break  # e.g. 410 Gone: list again
            except k8s.ApiException as exc:
                if exc.status == 404:  # no peering CRD: nobody to pause for
                    self._set(namespace, {})
                else:
                    LOG.warning(f"Reading the peering {self.name} failed: {exc}")
                self._stop.wait(RETRY_SECONDS if exc.status != 404 else WATCH_SECONDS)
            except Exception as exc:
                LOG.warning(f"Watching the peering {self.name} failed: {exc!r}")
                self._stop.wait(RETRY_SECONDS)
