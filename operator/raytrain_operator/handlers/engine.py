"""The reconcile engine: the one place that runs passes, writes TrainJobs, and stops.

One `Engine` is built at start-up (`__main__`) and reached by kopf's handlers through kopf's
`memo`. Everything passes share lives in it: the settings and the pass state (handlers/state.py),
the work queue (handlers/queue.py), the memory of what passes read, kopf's indexes.

- kopf's handlers only queue: a TrainJob created, resumed or with a new spec, a RayJob or
  RayCluster of one that changed, a new runtime report (handlers/trainjobs.py, events.py).
- A pass reads the TrainJob from the API server (a new one: as its creation event showed it),
  runs `reconcile`, and the engine carries out what it returned: the status patch (the only
  write of a TrainJob, `write`), the Events, what was seen, and the next time the job is due.
  Nothing runs per job while nothing happens: a job is queued again only for a time its plan
  names (a deadline, a grace period, the TTL, a starting cluster's pods, a stalled check).
- A missed event is caught by the resync of the whole set: every `config.resync_seconds` the
  metadata of the TrainJobs, RayJobs and RayClusters is listed (a page per 500) and each
  object's resourceVersion compared with what the watches showed; only the TrainJob of an
  object the watch has not shown as it is, or that went without its event, is queued, and its
  pass reads the RayJobs from the API rather than from kopf's indexes (which the same watches
  fill).
- While another instance holds the peering (handlers/peering.py), and from the start until
  this instance has settled in the peering object, the queue starts no pass and this process's
  client refuses every write, passes already queued included; when the pause ends, a resync
  catches up. `stop` (kopf's clean-up, before the process ends) closes both for
  good.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf

from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_contract.meta import LABEL_TRAINJOB
from raytrain_contract.timefmt import rfc3339
from raytrain_operator import k8s, metrics
from raytrain_operator.handlers.namespaces import NamespaceSelection
from raytrain_operator.handlers.peering import PeeringWatch
from raytrain_operator.handlers.queue import Key, Seen, WorkQueue
from raytrain_operator.handlers.reconcile import (
    PassResult,
    needs_operator,
    reconcile,
    still_needs_operator,
)
from raytrain_operator.handlers.state import PassState
from raytrain_operator.k8s import RAY_GROUP, RAY_VERSION, RAYCLUSTERS, RAYJOBS
from raytrain_operator.settings import OperatorConfig
from raytrain_operator.status import conditions

LOG = logging.getLogger("raytrain_operator.engine")

#: After a write refused because the TrainJob was replaced meanwhile: queued again this later.
CONFLICT_RETRY_SECONDS = 0.5
#: How long `stop` waits for the passes that run.
STOP_SECONDS = 10.0
#: The resync reads this many objects per request and waits this long after each page: a page
#: is parsed while holding the interpreter's lock, and passes (new TrainJobs among them) must
#: not wait behind a whole set's worth of pages.
RESYNC_PAGE = 100
RESYNC_PAGE_PAUSE_SECONDS = 0.05
#: Label of a RayCluster made for a RayJob: the RayJob's name.
ORIGINATED_FROM = "ray.io/originated-from-cr-name"


class _ObjectLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Log lines of a pass, prefixed like kopf's per-object lines."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.extra['key']}] {msg}" if self.extra else msg, kwargs


def cluster_entry(status: Mapping[str, Any]) -> dict[str, Any]:
    """What of a RayCluster a pass reads (handlers/rayjobs.py keeps the same in its index)."""
    failure = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            failure = {"reason": cond.get("reason"), "message": cond.get("message")}
    return {
        "desiredWorkerReplicas": status.get("desiredWorkerReplicas"),
        "readyWorkerReplicas": status.get("readyWorkerReplicas"),
        "replicaFailure": failure,
    }


def merged(target: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386) applied to `target`: objects merge, None removes a key,
    anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def written(obj: Mapping[str, Any], patch: kopf.Patch) -> dict[str, Any]:
    """`obj` as the API server has it once a pass's status patch is written."""
    return {**obj, "status": merged(obj.get("status") or {}, dict(patch.get("status") or {}))}


#: The Stalled reason of a TrainJob in a namespace the namespace selector does not select.
NOT_SELECTED = "NamespaceNotSelected"


class Engine:
    def __init__(self, config: OperatorConfig, identity: str = "") -> None:
        self.config = config
        self.identity = identity
        self.state = PassState(config)
        self.queue = WorkQueue(self.run_pass, config.workers)
        self.seen = Seen()
        #: Which namespaces' TrainJobs this operator manages (its namespace selector).
        self.namespaces = NamespaceSelection(config.namespace_selector, k8s.namespace_labels)
        #: TrainJobs of a namespace that lost the selector's label: each says so once.
        self._opted_out: set[Key] = set()
        #: kopf's indexes (rayjobs, rayclusters), handed over at start-up.
        self.indexes: tuple[Any, Any] = (None, None)
        #: A new TrainJob as its creation event showed it: its first pass reads nothing.
        self._created: dict[Key, dict[str, Any]] = {}
        self._guard = threading.Lock()
        self._paused = False
        self._stopped = threading.Event()
        #: kopf's Event settings (component, instance): the engine's Events look like kopf's.
        self._posting = kopf.OperatorSettings().posting
        self.peering: PeeringWatch | None = None
        self._resync_thread: threading.Thread | None = None
        self._resync_now = threading.Event()

    # ------------------------------------------------------------------------ life cycle

    def start(self, indexes: tuple[Any, Any] = (None, None), peering: bool = True) -> None:
        """Called from kopf's start-up handler, before kopf's watches begin: keeps kopf's
        indexes, installs the write gate and the user agent of this process's client, and
        starts the peering watch and the resync."""
        self.indexes = indexes
        agent = f"raytrain-operator ({self.identity})" if self.identity else None
        k8s.configure(user_agent=agent, may_write=self.may_write)
        if peering and self.config.peering_mode != "off":
            # Paused until the peering watch has read the peering object and this instance has
            # settled in it (handlers/peering.py).
            self.set_paused(True)
            self.peering = PeeringWatch(
                self.config.peering_name,
                list(self.config.namespaces),
                self.identity,
                self.config.peering_priority,
                self.set_paused,
            )
            self.peering.start()
        self._resync_thread = threading.Thread(
            target=self._resync_loop, name="raytrain-resync", daemon=True
        )
        self._resync_thread.start()

    def stop(self) -> None:
        """No pass starts and nothing is written from now on; waits for running passes."""
        self._stopped.set()
        self._resync_now.set()
        if self.peering is not None:
            self.peering.stop()
        if not self.queue.stop(STOP_SECONDS):
            LOG.warning(f"Passes still running after {STOP_SECONDS:g} s: {self.queue.running()}")
        self.state.shutdown()

    def may_write(self) -> bool:
        with self._guard:
            return not self._paused and not self._stopped.is_set()

    @property
    def paused(self) -> bool:
        with self._guard:
            return self._paused

    def set_paused(self, paused: bool) -> None:
        with self._guard:
            self._paused = paused
        metrics.PAUSED.set(1 if paused else 0)
        if paused:
            self.queue.pause()
            with self._guard:
                # Another instance works meanwhile: after the pause, a pass reads the TrainJob
                # as it is then, never as its creation event showed it.
                self._created.clear()
        else:
            self.queue.resume()
            # What happened during the pause came to the other instance, not here.
            self._resync_now.set()

    # --------------------------------------------------------------------------- queuing

    def enqueue(
        self,
        key: Key,
        cause: str = "wake",
        delay: float = 0.0,
        created: Mapping[str, Any] | None = None,
    ) -> None:
        with self._guard:
            if created is not None and not self._paused:
                self._created[key] = dict(created)
            else:
                # Anything after the creation, or a creation while paused (the pass runs after
                # the pause, when another instance may have handled it): the pass reads the
                # TrainJob as it is then.
                self._created.pop(key, None)
        self.queue.schedule(key, delay, cause)

    def forget(self, namespace: str, name: str, uid: str | None) -> None:
        """The TrainJob is gone: what the engine kept of it, and its queued pass, go."""
        key = (namespace, name)
        self.queue.forget(key)
        self.seen.forget_trainjob(namespace, name)
        with self._guard:
            self._created.pop(key, None)
            self._opted_out.discard(key)
        if uid:
            self.state.forget(uid)

    # ------------------------------------------------------------------------ one pass

    def run_pass(self, key: Key, cause: str) -> None:
        """One pass over a TrainJob; writes its status, posts its Events, queues it when due.

        A job the operator has no more work on (finished, TTL clean-up done) or that is being
        deleted gets no pass."""
        namespace, name = key
        with self._guard:
            obj = self._created.pop(key, None)
        created = obj is not None
        try:
            if obj is None:
                obj = k8s.get_trainjob(namespace, name)
            if obj is None:
                return
            metadata = obj.get("metadata") or {}
            self.seen.saw_version(PLURAL, metadata, str(metadata.get("uid") or ""))
            if metadata.get("deletionTimestamp") or not needs_operator(
                obj.get("spec") or {}, obj.get("status") or {}, metadata.get("annotations") or {}
            ):
                self.seen.saw_trainjob(obj)
                return
            if not self.namespaces.selects(namespace):
                self._not_managed(key, obj)
                return
            logger = _ObjectLogger(LOG, {"key": f"{namespace}/{name}"})
            # The resync found what the watch did not show: kopf's indexes, which the same
            # watches fill, may lack it too, so this pass reads the RayJobs from the API.
            rayjobs, clusters = (None, None) if cause == "resync" else self.indexes
            result = reconcile(self.state, cause, obj, logger, rayjobs, clusters, created=created)
            self._carry_out(key, obj, result, logger)
        except kopf.TemporaryError as exc:
            # The API server did not answer (reconcile names it): soon, as kopf would.
            delay = float(exc.delay) if exc.delay is not None else 2.0
            LOG.warning(f"[{namespace}/{name}] {exc}")
            self.queue.schedule(key, delay, "retry")
        except k8s.WritesPaused:
            # Paused or stopping in the middle of the pass: it runs again after the pause.
            self.queue.schedule(key, 0.0, cause)

    def namespace_selection_changed(self, namespace: str, selected: bool) -> None:
        """A namespace was opted in or out: a pass for each of its TrainJobs (managed from now
        on, or told that it no longer is)."""
        verb = "now matches" if selected else "no longer matches"
        LOG.info(f"Namespace {namespace} {verb} the namespace selector: its TrainJobs are queued.")
        for name in k8s.trainjob_names(namespace):
            if not selected:
                with self._guard:
                    self._opted_out.add((namespace, name))
            metrics.WAKEUPS.labels(cause="namespace").inc()
            self.queue.schedule((namespace, name), 0.0, "namespace")

    def _not_managed(self, key: Key, obj: Mapping[str, Any]) -> None:
        """A TrainJob of a namespace the selector does not select: Stalled says so, once, on a
        job nobody has handled yet (no status) or right after its namespace lost the label.
        Nothing else of it is touched. A job with a status and no such news may be another
        operator's (one whose selector takes this namespace): writing to it on every one of
        that operator's writes would make the two take turns for ever."""
        namespace, name = key
        status = obj.get("status") or {}
        with self._guard:
            opted_out = key in self._opted_out
            self._opted_out.discard(key)
        if status and not opted_out:
            return
        message = self.namespaces.refusal(namespace)
        stalled = conditions.find(status.get("conditions"), conditions.STALLED) or {}
        if stalled.get("reason") == NOT_SELECTED and stalled.get("message") == message:
            return
        desired = {conditions.STALLED: conditions.Desired(True, NOT_SELECTED, message)}
        held = status.get("observedGeneration")
        observed = held if isinstance(held, int) else 0
        merged, _ = conditions.merge(
            status.get("conditions"), desired, observed, rfc3339(time.time())
        )
        patch: dict[str, Any] = {"conditions": merged}
        if not status.get("phase"):
            patch["phase"] = "Stalled"
        LOG.warning(f"[{namespace}/{name}] Stalled ({NOT_SELECTED}): {message}")
        body = kopf.Patch({"status": patch})
        if self.write(namespace, name, obj.get("metadata") or {}, body):
            self.seen.saw_trainjob(written(obj, body))

    def _carry_out(
        self, key: Key, obj: Mapping[str, Any], result: PassResult, logger: _ObjectLogger
    ) -> None:
        namespace, name = key
        for rayjob in result.seen_rayjobs:
            self.seen.saw_rayjob(namespace, rayjob)
            self.seen.saw_version(RAYJOBS, rayjob.get("metadata") or {}, name)
        # The TrainJob as it will be once this pass's status is written, recorded before the
        # write: the event of the write itself then shows nothing new.
        self.seen.saw_trainjob(written(obj, result.patch) if result.write else obj)
        if result.write:
            if not self.write(namespace, name, obj.get("metadata") or {}, result.patch):
                metrics.WAKE_CONFLICTS.inc()
                self.seen.forget_trainjob(namespace, name)
                self.queue.schedule(key, CONFLICT_RETRY_SECONDS, "wake")
                return
            metadata = obj.get("metadata") or {}
            involved = {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": metadata.get("name"),
                "uid": metadata.get("uid"),
                "namespace": metadata.get("namespace"),
            }
            for event in result.events:
                k8s.post_event(
                    involved,
                    "Warning" if event.warning else "Normal",
                    event.reason,
                    event.message,
                    self._posting.reporting_component,
                    self._posting.reporting_instance,
                )
        if result.due_in is not None and (
            not result.write or still_needs_operator(obj, result.patch)
        ):
            metrics.WAKEUPS.labels(cause=result.due_why).inc()
            self.queue.schedule(key, result.due_in, result.due_why)

    def write(
        self, namespace: str, name: str, metadata: Mapping[str, Any], patch: kopf.Patch
    ) -> bool:
        """Write a pass's patch (annotations, status) over the TrainJob it read.

        The precondition is the TrainJob's uid: a TrainJob deleted and created again under the
        same name gets nothing of the old one's pass (False). Other writers' changes in between
        (kopf's bookkeeping annotations, the runtime's report, a spec edit) each bring their own
        event and so the next pass; the operator's fields have no other writer.
        """
        uid = metadata.get("uid")
        precondition: dict[str, Any] = {"uid": uid}
        annotations = dict((patch.get("metadata") or {}).get("annotations") or {})
        status = dict(patch.get("status") or {})
        writes: list[tuple[dict[str, Any], str | None]] = []
        if annotations:
            writes.append(({"metadata": {**precondition, "annotations": annotations}}, None))
        if status:
            writes.append(({"metadata": precondition, "status": status}, "status"))
        for body, subresource in writes:
            answer = k8s.patch_trainjob(namespace, name, body, subresource=subresource)
            if answer is None:
                return False
            # The write's own watch event shows this version: the resync knows it already.
            self.seen.saw_version(PLURAL, answer.get("metadata") or {}, str(uid or ""))
        return True

    # ----------------------------------------------------------------------- the resync

    def _resync_loop(self) -> None:
        while not self._stopped.is_set():
            self._resync_now.wait(self.config.resync_seconds)
            self._resync_now.clear()
            if self._stopped.is_set():
                return
            if self.paused:
                continue
            try:
                self.resync()
            except Exception as exc:
                LOG.warning(f"The resync failed: {exc!r}; the next one is due as usual.")

    def resync(self) -> int:
        """List the metadata of the whole set and compare each object's resourceVersion with
        what the watches (and the passes' reads) showed; queue the TrainJob of each that shows
        a version never seen, or that is gone without its DELETED event. Returns how many
        were queued. Objects are compared by version only, never by content, so a resync of a
        set where nothing happened reads a page of metadata per 500 objects and queues nothing."""
        metrics.RESYNCS.inc()
        queued: set[Key] = set()
        namespaces: list[str | None] = list(self.config.namespaces) or [None]
        kinds = (
            (GROUP, VERSION, PLURAL, ""),
            (RAY_GROUP, RAY_VERSION, RAYJOBS, LABEL_TRAINJOB),
            (RAY_GROUP, RAY_VERSION, RAYCLUSTERS, f"{LABEL_TRAINJOB},{ORIGINATED_FROM}"),
        )
        for group, version, plural, selector in kinds:
            known = self.seen.versions(plural)
            listed: set[Key] = set()
            for ns in namespaces:
                listing = k8s.iter_all(
                    group, version, plural, ns, selector, metadata_only=True, page_size=RESYNC_PAGE
                )
                for count, obj in enumerate(listing, 1):
                    if count % RESYNC_PAGE == 0 and self._stopped.wait(RESYNC_PAGE_PAUSE_SECONDS):
                        return 0  # stopping
                    metadata = obj.get("metadata") or {}
                    key = (str(metadata.get("namespace")), str(metadata.get("name")))
                    listed.add(key)
                    if metadata.get("deletionTimestamp") and plural == PLURAL:
                        continue  # being deleted: its children go with it, no pass needed
                    if self.seen.version_news(plural, metadata):
                        labels = metadata.get("labels") or {}
                        owner = key[1] if plural == PLURAL else str(labels.get(LABEL_TRAINJOB))
                        queued.add((key[0], owner))
            for key, owner in known.items():
                if key in listed:
                    continue
                # Gone without our seeing its DELETED event.
                self.seen.version_gone(plural, *key)
                if plural == PLURAL:
                    self.forget(key[0], key[1], owner or None)
                else:
                    if plural == RAYJOBS:
                        self.seen.rayjob_gone(*key)
                    queued.add((key[0], owner))
        for key in sorted(queued):
            metrics.WAKEUPS.labels(cause="resync").inc()
            self.queue.schedule(key, 0.0, "resync")
        if queued:
            LOG.info(f"The resync found {len(queued)} TrainJob(s) changed without an event.")
        return len(queued)
