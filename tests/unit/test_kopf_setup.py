"""kopf as we run it: its settings, where its bookkeeping lives, how objects from the previous
layout are carried over, and which handlers are registered."""

from __future__ import annotations

import json
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
    assert not [h for h in default._changing.get_all_handlers() if h.fn is trainjobs.on_change]
    assert [h.id for h in registered()._changing.get_all_handlers()]


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
    essence = persistence.diffbase_storage.build(body=obj)
    persistence.diffbase_storage.store(body=obj, patch=patch, essence=essence)
    keys = set(patch["metadata"]["annotations"])
    assert keys == {
        "kopf.raytrain.dev/create",
        "kopf.raytrain.dev/touch-dummy",
        "kopf.raytrain.dev/last-handled-configuration",
    }


def test_diff_base_keeps_the_spec_and_leaves_annotations_out(
    configured: kopf.OperatorSettings,
) -> None:
    obj = body({"raytrain.dev/checkpoint-requested": "2026-11-23T10:00:00Z"}, labels={"a": "b"})
    essence = configured.persistence.diffbase_storage.build(body=obj)
    assert essence == {"metadata": {"labels": {"a": "b"}}, "spec": dict(obj["spec"])}


def test_an_object_from_the_old_layout_is_read_and_cleaned(
    configured: kopf.OperatorSettings,
) -> None:
    old_essence = {"spec": {"image": "img", "scaling": {"numWorkers": 2}}}
    obj = body(
        {
            "raytrain.dev/last-handled-configuration": json.dumps(old_essence),
            "raytrain.dev/kopf-managed": "yes",
            "raytrain.dev/create": '{"retries": 2}',
            "raytrain.dev/checkpoint-requested": "2026-11-23T10:00:00Z",
        }
    )
    diffbase = configured.persistence.diffbase_storage
    # Read through the old key: the upgraded operator resumes the object, it does not re-create.
    assert diffbase.fetch(body=obj) == old_essence
    patch = kopf.Patch()
    diffbase.store(body=obj, patch=patch, essence=diffbase.build(body=obj))
    annotations = patch["metadata"]["annotations"]
    assert annotations["raytrain.dev/last-handled-configuration"] is None
    assert annotations["raytrain.dev/kopf-managed"] is None
    assert annotations["raytrain.dev/create"] is None
    # Our own vocabulary is left alone.
    assert "raytrain.dev/checkpoint-requested" not in annotations
    assert json.loads(annotations["kopf.raytrain.dev/last-handled-configuration"]) == {
        "spec": old_essence["spec"]
    }


def test_the_new_key_wins_over_the_old(configured: kopf.OperatorSettings) -> None:
    obj = body(
        {
            "raytrain.dev/last-handled-configuration": json.dumps({"spec": {"old": 1}}),
            "kopf.raytrain.dev/last-handled-configuration": json.dumps({"spec": {"new": 1}}),
        }
    )
    assert configured.persistence.diffbase_storage.fetch(body=obj) == {"spec": {"new": 1}}


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


def _handlers_called(
    configured: kopf.OperatorSettings, obj: kopf.Body, *, initial: bool = False
) -> dict[str, Any]:
    """What kopf calls for an event that brings `obj`: its own cause detection, on the diff
    between our diff base stored in `obj` and `obj` itself, then its own handler matching."""
    from kopf._cogs.structs import diffs
    from kopf._core.intents import causes

    storage = configured.persistence.diffbase_storage
    old, new = storage.fetch(body=obj), storage.build(body=obj)
    cause = causes.detect_changing_cause(
        finalizer=configured.persistence.finalizer,
        raw_event={"type": "MODIFIED", "object": dict(obj)},
        body=obj,
        old=old,
        new=new,
        diff=diffs.diff(old, new) if old is not None else None,
        initial=initial,
        **_cause_fields(),
    )
    return {h.id: h.fn for h in registered()._changing.iter_handlers(cause)}


def _handled_before(
    obj: kopf.Body,
    configured: kopf.OperatorSettings,
    *,
    spec: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> kopf.Body:
    """`obj` with our diff base of it stored, then changed as given."""
    essence = configured.persistence.diffbase_storage.build(body=obj)
    stored = {f"{settings.KOPF_PREFIX}/{settings.DIFFBASE_KEY}": json.dumps(essence)}
    metadata = {**dict(obj["metadata"]), "annotations": {**stored, **(annotations or {})}}
    if labels is not None:
        metadata["labels"] = labels
    changed = {**dict(obj), "metadata": metadata, "spec": spec or dict(obj["spec"])}
    if status is not None:
        changed["status"] = status
    return kopf.Body(changed)


def test_one_function_handles_creation_the_operators_start_and_spec_changes(
    configured: kopf.OperatorSettings,
) -> None:
    new = body()
    assert _handlers_called(configured, new) == {"create": trainjobs.on_change}
    # A TrainJob created while no operator ran is created at its start, not resumed.
    assert _handlers_called(configured, new, initial=True) == {"create": trainjobs.on_change}
    # A TrainJob handled before, seen again at the operator's start.
    known = _handled_before(new, configured)
    assert _handlers_called(configured, known, initial=True) == {"resume": trainjobs.on_change}
    spec = {**dict(new["spec"]), "image": "img:2"}
    changed = _handled_before(new, configured, spec=spec)
    assert _handlers_called(configured, changed) == {"update/spec": trainjobs.on_change}
    # Changed while no operator ran: at its start kopf resumes it as well as updating it.
    assert _handlers_called(configured, changed, initial=True) == {
        "resume": trainjobs.on_change,
        "update/spec": trainjobs.on_change,
    }


@pytest.mark.parametrize(
    "changes",
    [
        {"labels": {"team": "vision"}},
        {"annotations": {"raytrain.dev/checkpoint-requested": "2026-11-23T10:00:00Z"}},
        {"status": {"phase": "Running"}},
    ],
    ids=["labels", "annotation", "status"],
)
def test_a_change_outside_the_spec_calls_no_handler(
    configured: kopf.OperatorSettings, changes: dict[str, Any]
) -> None:
    """Labels, our annotations and the status (which each pass writes) wake nothing through
    kopf's handlers: a pass would otherwise follow every status write of the pass before."""
    obj = _handled_before(body(), configured, **changes)
    assert _handlers_called(configured, obj) == {}


def test_the_handler_queues_a_pass_labelled_with_what_woke_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the engine's real queue to the pass, which records what it was given instead of
    reading and writing the TrainJob: its cause, and the body it would start from."""
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

    def woken(*reasons: kopf.Reason) -> tuple[Any, str, Any]:
        engine.queue.pause()
        for reason in reasons:
            trainjobs.on_change(
                reason=reason, namespace="team-a", name="digits", body=body(), memo=memo
            )
        engine.queue.resume()
        assert ran.acquire(timeout=10), "no pass ran"
        assert engine.queue.wait_idle(10)
        return passes[-1]

    try:
        # Only the creation hands its body over: its pass needs no read.
        assert woken(kopf.Reason.CREATE) == (key, "create", dict(body()))
        assert woken(kopf.Reason.RESUME) == (key, "resume", None)
        assert woken(kopf.Reason.UPDATE) == (key, "update", None)
        # An update queued before the creation's pass ran: one pass, which reads the TrainJob
        # as it is then instead of starting from the older body.
        assert woken(kopf.Reason.CREATE, kopf.Reason.UPDATE) == (key, "create", None)
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
