"""kopf as we run it: its settings, where its bookkeeping lives, how objects from the previous
layout are carried over, and which handlers are registered."""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import kopf
import pytest

from raytrain_operator import handlers, settings
from raytrain_operator.handlers import legacy, trainjobs
from raytrain_operator.handlers.engine import Engine
from raytrain_operator.status import machine

LOG = logging.getLogger("test")


def registered() -> kopf.OperatorRegistry:
    """The handlers as __main__ registers them, on a registry of the test's own."""
    registry = kopf.OperatorRegistry()
    handlers.register(registry)
    return registry


def test_importing_the_handlers_registers_nothing() -> None:
    """Registration is explicit (__main__): importing the package has no side effect."""
    default = kopf.get_default_registry()
    fn = trainjobs.trainjob_changed
    assert not [h for h in default._watching.get_all_handlers() if h.fn is fn]
    assert [h for h in registered()._watching.get_all_handlers() if h.fn is fn]


@pytest.fixture
def configured() -> kopf.OperatorSettings:
    ours = kopf.OperatorSettings()
    settings.configure_kopf(ours, settings.OperatorConfig())
    return ours


def body(annotations: dict[str, str] | None = None, **metadata: Any) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "raytrain.dev/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "digits",
                "namespace": "team-a",
                "annotations": annotations or {},
                **metadata,
            },
            "spec": {"image": "img", "scaling": {"numWorkers": 2}},
        }
    )


def test_watch_timeouts(configured: kopf.OperatorSettings) -> None:
    watching = configured.watching
    # The server ends each watch request (a stuck stream lives at most that long); the client's
    # own limit fires only when that end never arrives, so it must come later.
    assert watching.server_timeout is not None and watching.client_timeout is not None
    assert watching.server_timeout < watching.client_timeout
    assert watching.connect_timeout is not None
    # Not overridden: kopf's default fits the API server's 60 s bookmarks and 75 s event cache,
    # and it must fire before the server ends a quiet request, or it never fires at all.
    assert watching.inactivity_timeout == kopf.OperatorSettings().watching.inactivity_timeout
    assert watching.inactivity_timeout < 75 < watching.server_timeout


def test_only_explicit_events_are_posted() -> None:
    ours = kopf.OperatorSettings()
    ours.posting.loggers = True  # whatever the installed kopf's default, ours is explicit
    settings.configure_kopf(ours, settings.OperatorConfig())
    assert ours.posting.enabled is True
    assert ours.posting.loggers is False


def test_kopf_writes_nothing_under_the_api_prefix(configured: kopf.OperatorSettings) -> None:
    patch = kopf.Patch()
    obj = body()
    persistence = configured.persistence
    persistence.progress_storage.store(
        key=kopf.HandlerId("create"), record={"started": "now", "retries": 1}, body=obj, patch=patch
    )
    persistence.progress_storage.touch(body=obj, patch=patch, value="x")
    keys = set(patch["metadata"]["annotations"])
    assert keys == {"kopf.raytrain.dev/create", "kopf.raytrain.dev/touch-dummy"}


def test_kopf_keeps_no_diff_base_since_no_handler_reads_one(
    configured: kopf.OperatorSettings,
) -> None:
    """kopf builds a diff base of every event for change handlers, daemons and timers; there
    are none, so it is not built (a deep copy per event) nor stored (a write per job)."""
    registry = registered()
    assert registry._changing.get_all_handlers() == []
    assert registry._spawning.get_all_handlers() == []
    diffbase, patch = configured.persistence.diffbase_storage, kopf.Patch()
    assert diffbase.build(body=body()) == {}
    diffbase.store(body=body(), patch=patch, essence=diffbase.build(body=body()))
    assert not patch


# -------------------------------------------------------------------------- registrations


def _cause_fields() -> dict[str, Any]:
    """What each kopf cause below carries besides the object: our resource and empty extras."""
    from kopf._cogs.structs import references

    return {
        "resource": references.Resource(
            group="raytrain.dev", version="v1alpha1", plural="trainjobs", namespaced=True
        ),
        "indices": cast(Any, {}),
        "logger": LOG,
        "patch": kopf.Patch(),
        "memo": kopf.Memo(),
    }


def _trainjob_handlers(kind: str | None, obj: kopf.Body) -> list[Any]:
    """What kopf calls, of our TrainJob handlers, for an event of `kind` that brings `obj`:
    its own handler matching of watching handlers, and whether any changing handler (those
    keep a diff base and progress in annotations) would run for a new object or a new spec."""
    from kopf._core.intents import causes

    registry = registered()
    event = causes.WatchingCause(
        **_cause_fields(), body=obj, type=kind, event={"type": kind, "object": dict(obj)}
    )
    found = [h.fn for h in registry._watching.iter_handlers(event)]
    for reason in (kopf.Reason.CREATE, kopf.Reason.UPDATE, kopf.Reason.RESUME):
        changing = causes.ChangingCause(**_cause_fields(), body=obj, initial=False, reason=reason)
        found += [h.fn for h in registry._changing.iter_handlers(changing)]
    return found


@pytest.mark.parametrize("kind", [None, "ADDED", "MODIFIED", "DELETED"])
def test_every_trainjob_event_reaches_the_one_handler_and_no_change_handler_runs(
    kind: str | None,
) -> None:
    """One handler sees every event (the listing at the watch's start too); no change handler
    is registered, so kopf keeps no diff base on a TrainJob: no annotation write per job."""
    assert _trainjob_handlers(kind, body()) == [trainjobs.trainjob_changed]
    assert registered()._changing.get_all_handlers() == []


def test_the_handler_queues_a_pass_labelled_with_what_woke_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the engine's real queue to the pass, which records what it was given instead of
    reading and writing the TrainJob: its cause, and the body it would start from."""
    import asyncio

    passes: list[tuple[Any, str, Any]] = []
    ran = threading.Semaphore(0)

    def run_pass(self: Engine, key: Any, cause: str) -> None:
        with self._guard:
            passes.append((key, cause, self._created.pop(key, None)))
        ran.release()

    monkeypatch.setattr(Engine, "run_pass", run_pass)
    engine = Engine(settings.OperatorConfig())
    memo = kopf.Memo(engine=engine)
    key = ("team-a", "digits")
    new_spec = body(generation=2)
    new_spec = kopf.Body({**dict(new_spec), "status": {"observedGeneration": 1}})

    def woken(*events: tuple[str | None, kopf.Body]) -> tuple[Any, str, Any]:
        engine.queue.pause()
        for kind, obj in events:
            engine.seen.forget_trainjob(*key)
            asyncio.run(
                trainjobs.trainjob_changed(
                    type=kind,
                    namespace="team-a",
                    name="digits",
                    body=obj,
                    status=obj.status,
                    spec=obj.spec,
                    meta=obj.meta,
                    logger=LOG,
                    memo=memo,
                )
            )
        engine.queue.resume()
        assert ran.acquire(timeout=10), "no pass ran"
        assert engine.queue.wait_idle(10)
        return passes[-1]

    try:
        # Only the creation hands its body over: its pass needs no read.
        assert woken(("ADDED", body())) == (key, "create", dict(body()))
        assert woken((None, body())) == (key, "resume", None)
        assert woken(("MODIFIED", new_spec)) == (key, "update", None)
        # An update queued before the creation's pass ran: one pass, which reads the TrainJob
        # as it is then instead of starting from the older body.
        assert woken(("ADDED", body()), ("MODIFIED", new_spec)) == (key, "create", None)
        assert not ran.acquire(timeout=0.5), "a second pass ran"
    finally:
        engine.queue.stop()
    assert len(passes) == 4


# ------------------------------------------------------------------- the old finalizer


def _event_handlers(finalizers: list[str], deleting: bool = False) -> list[Any]:
    """What kopf calls, of our event handlers, for an event of a TrainJob with `finalizers`."""
    from kopf._core.intents import causes

    extra = {"deletionTimestamp": "2026-11-23T10:00:00Z"} if deleting else {}
    obj = body(finalizers=finalizers, **extra)
    cause = causes.WatchingCause(
        **_cause_fields(),
        body=obj,
        type="MODIFIED",
        event={"type": "MODIFIED", "object": dict(obj)},
    )
    return [h.fn for h in registered()._watching.iter_handlers(cause)]


def test_kopf_calls_the_old_finalizers_handler_only_where_the_old_finalizer_is() -> None:
    """What the handler does on the API server is test_legacy_finalizer_server.py's."""
    old = settings.LEGACY_FINALIZER
    assert legacy.drop_legacy_finalizer in _event_handlers([old, settings.FINALIZER])
    assert legacy.drop_legacy_finalizer in _event_handlers([old], deleting=True)
    assert legacy.drop_legacy_finalizer not in _event_handlers([settings.FINALIZER])
    assert legacy.drop_legacy_finalizer not in _event_handlers([])


# ------------------------------------------------------------- the finalizer and the timer


def _trainjob_body(status: dict[str, Any], ttl: int | None = None, **annotations: str) -> Any:
    obj = body(annotations or None)
    spec = dict(obj["spec"])
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return kopf.Body({**dict(obj), "spec": spec, "status": status})


FINISHED = {"conditions": [{"type": "Succeeded", "status": "True"}]}


def _finalizer_wanted(obj: Any) -> bool:
    """kopf's own answer: does any handler of ours need its finalizer on this object?"""
    from kopf._core.intents import causes

    registry = registered()
    cause = causes.SpawningCause(
        **_cause_fields(),
        body=obj,
        reset=False,
    )
    changing = causes.ChangingCause(
        **_cause_fields(),
        body=obj,
        initial=False,
        reason=kopf.Reason.UPDATE,
    )
    return registry._spawning.requires_finalizer(cause) or registry._changing.requires_finalizer(
        changing
    )


def test_no_timer_or_daemon_runs_per_trainjob() -> None:
    """The resync goes through the wake-up queue: a kopf timer would cost a task per job and
    a finalizer written before the first handler runs."""
    registry = registered()
    assert [h.id for h in registry._spawning.get_all_handlers()] == []


@pytest.mark.parametrize(
    ("status", "ttl", "annotations", "wanted"),
    [
        ({}, None, {}, True),  # new
        ({"phase": "Running", "conditions": []}, None, {}, True),
        (FINISHED, None, {}, False),  # finished, nothing left to do
        (FINISHED, 60, {}, True),  # the TTL clean-up is still to come
        (FINISHED, 60, {"raytrain.dev/children-deleted": "2026-11-23T10:00:00Z"}, False),
        ({"conditions": [{"type": "Failed", "status": "True"}]}, None, {}, False),
    ],
)
def test_no_trainjob_carries_a_finalizer_whether_or_not_the_operator_has_work_on_it(
    status: dict[str, Any], ttl: int | None, annotations: dict[str, str], wanted: bool
) -> None:
    obj = _trainjob_body(status, ttl, **annotations)
    assert machine.needs_operator(obj.status, ttl, obj.meta.annotations) is wanted
    assert _finalizer_wanted(obj) is False


def test_peering_is_on_by_default_under_our_name() -> None:
    ours = kopf.OperatorSettings()
    settings.configure_kopf(ours, settings.OperatorConfig(peering_priority=7))
    assert (ours.peering.name, ours.peering.standalone, ours.peering.mandatory) == (
        "raytrain-operator",
        False,
        False,
    )
    assert ours.peering.priority == 7
    required = kopf.OperatorSettings()
    settings.configure_kopf(required, settings.OperatorConfig(peering_mode="required"))
    assert required.peering.mandatory is True
    off = kopf.OperatorSettings()
    settings.configure_kopf(off, settings.OperatorConfig(peering_mode="off"))
    assert off.peering.standalone is True


def test_the_command_line_sets_peering_and_a_priority_that_grows_with_start_time() -> None:
    from raytrain_operator import __main__

    args = __main__.parse_args(["--peering-mode", "required", "--peering-priority", "3"])
    assert (args.peering_mode, args.peering_priority) == ("required", 3)
    assert __main__.parse_args([]).peering_priority is None  # main() uses the start time
    with pytest.raises(SystemExit):
        __main__.parse_args(["--peering-mode", "sometimes"])


def test_event_handlers_log_no_success_line_per_event_unless_verbose(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kopf writes "Handler 'x' succeeded." at INFO for each event each handler took; for our
    handlers, which only queue work, the lines are dropped (they are every handler we have)."""
    ids = {str(h.id) for h in registered()._watching.get_all_handlers()}
    assert ids == set(settings.EVENT_HANDLER_IDS)
    objects = logging.getLogger(settings.KOPF_OBJECTS_LOGGER)
    try:
        settings.install_log_filters(verbose=False)
        with caplog.at_level(logging.DEBUG, logger=settings.KOPF_OBJECTS_LOGGER):
            objects.info("Handler 'trainjob-event' succeeded.")
            objects.info("Handler 'someone-elses' succeeded.")
            objects.error("Handler 'trainjob-event' failed with an exception. Will retry.")
        assert [r.getMessage() for r in caplog.records] == [
            "Handler 'someone-elses' succeeded.",
            "Handler 'trainjob-event' failed with an exception. Will retry.",
        ]
        caplog.clear()
        settings.install_log_filters(verbose=True)
        with caplog.at_level(logging.DEBUG, logger=settings.KOPF_OBJECTS_LOGGER):
            objects.info("Handler 'trainjob-event' succeeded.")
        assert len(caplog.records) == 1
    finally:
        settings.install_log_filters()
