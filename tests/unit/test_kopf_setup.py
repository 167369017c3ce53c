"""kopf as we run it: its settings, where its bookkeeping lives, how objects from the previous
layout are carried over, and which handlers are registered."""

from __future__ import annotations

import json
import logging
from typing import Any, cast

import kopf
import pytest
from _fake_api import recorder

from raytrain_operator import handlers, k8s, settings
from raytrain_operator.handlers import legacy, trainjobs
from raytrain_operator.handlers.engine import Engine
from raytrain_operator.status import machine

__all__ = ["recorder"]  # the fixture

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


def test_finalizer_is_under_kopfs_own_prefix(configured: kopf.OperatorSettings) -> None:
    assert configured.persistence.finalizer == "kopf.raytrain.dev/finalizer"
    assert settings.FINALIZER == "kopf.raytrain.dev/finalizer"
    assert settings.LEGACY_FINALIZER == "raytrain.dev/finalizer"


def test_watch_timeouts(configured: kopf.OperatorSettings) -> None:
    watching = configured.watching
    assert (watching.server_timeout, watching.client_timeout, watching.connect_timeout) == (
        300,
        330,
        10,
    )
    # Not overridden: kopf's default fits the API server's 60 s bookmarks and 75 s event cache,
    # and it must fire before the server ends a quiet request, or it never fires at all.
    assert watching.inactivity_timeout == kopf.OperatorSettings().watching.inactivity_timeout
    assert watching.server_timeout is not None
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


def _changing(registry: Any) -> dict[str, Any]:
    return {h.id: h for h in registry._changing.get_all_handlers()}


def test_one_function_handles_create_resume_and_spec_updates() -> None:
    handlers = _changing(registered())
    mine = {hid: h for hid, h in handlers.items() if h.fn is trainjobs.on_change}
    assert sorted(mine) == ["create", "resume", "update/spec"]
    assert mine["update/spec"].field == ("spec",)
    assert [h.reason for h in mine.values()].count(None) == 1  # resume: any initial cause


def test_the_handler_only_queues_labelled_with_what_woke_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Engine(settings.OperatorConfig())
    queued: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        engine.queue, "schedule", lambda key, delay=0.0, cause="wake": queued.append((key, cause))
    )
    memo = kopf.Memo(engine=engine)
    for reason in (kopf.Reason.CREATE, kopf.Reason.RESUME, kopf.Reason.UPDATE):
        trainjobs.on_change(
            reason=reason, namespace="team-a", name="digits", body=body(), memo=memo
        )
    assert queued == [(("team-a", "digits"), c) for c in ("create", "resume", "update")]
    # Only the creation hands its body over (the pass needs no read); the update after it
    # drops it, so that the pass reads the TrainJob as it is then.
    assert engine._created == {}


# ------------------------------------------------------------------- the old finalizer


def test_the_old_finalizer_is_removed_with_a_guarded_json_patch(
    recorder: list[dict[str, Any]],
) -> None:
    finalizers = ["example.com/other", "raytrain.dev/finalizer", "kopf.raytrain.dev/finalizer"]
    assert k8s.remove_trainjob_finalizer("team-a", "digits", finalizers, "raytrain.dev/finalizer")
    (request,) = recorder
    assert request["method"] == "PATCH"
    assert request["path"] == "/apis/raytrain.dev/v1alpha1/namespaces/team-a/trainjobs/digits"
    assert request["content_type"] == "application/json-patch+json"
    assert request["body"] == [
        {"op": "test", "path": "/metadata/finalizers/1", "value": "raytrain.dev/finalizer"},
        {"op": "remove", "path": "/metadata/finalizers/1"},
    ]


def test_a_changed_object_is_left_for_its_next_event(recorder: list[dict[str, Any]]) -> None:
    import _fake_api

    _fake_api.Recorder.patch_status = 422  # the test op failed: the list moved meanwhile
    assert not k8s.remove_trainjob_finalizer(
        "team-a", "digits", ["raytrain.dev/finalizer"], "raytrain.dev/finalizer"
    )


def test_the_event_handler_drops_only_the_old_finalizer(monkeypatch: pytest.MonkeyPatch) -> None:
    removed: list[tuple[str, str, list[str], str]] = []
    monkeypatch.setattr(
        k8s,
        "remove_trainjob_finalizer",
        lambda *args: removed.append(args) or True,
    )
    finalizers = ["raytrain.dev/finalizer", "kopf.raytrain.dev/finalizer"]
    meta = body(finalizers=finalizers, deletionTimestamp="2026-11-23T10:00:00Z").meta
    assert legacy._carries_legacy_finalizer(meta=meta)
    legacy.drop_legacy_finalizer(
        type="MODIFIED", namespace="team-a", name="digits", meta=meta, logger=LOG
    )
    assert removed == [("team-a", "digits", finalizers, "raytrain.dev/finalizer")]
    current = body(finalizers=["kopf.raytrain.dev/finalizer"]).meta
    assert not legacy._carries_legacy_finalizer(meta=current)


def test_the_event_handler_is_registered_for_trainjobs() -> None:
    registry = registered()
    (handler,) = [
        h for h in registry._watching.get_all_handlers() if h.fn is legacy.drop_legacy_finalizer
    ]
    assert handler.id == "legacy-finalizer"
    assert handler.when is legacy._carries_legacy_finalizer


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
    from kopf._cogs.structs import references
    from kopf._core.intents import causes

    registry = registered()
    resource = references.Resource(
        group="raytrain.dev", version="v1alpha1", plural="trainjobs", namespaced=True
    )
    cause = causes.SpawningCause(
        resource=resource,
        indices=cast(Any, {}),
        logger=LOG,
        patch=kopf.Patch(),
        memo=kopf.Memo(),
        body=obj,
        reset=False,
    )
    changing = causes.ChangingCause(
        resource=resource,
        indices=cast(Any, {}),
        logger=LOG,
        patch=kopf.Patch(),
        memo=kopf.Memo(),
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
