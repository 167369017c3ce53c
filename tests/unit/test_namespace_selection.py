"""Which namespaces the operator manages: its namespace selector (the chart's default
`raytrain.dev/enabled: "true"`). A TrainJob elsewhere gets no pass of the reconcile engine, only
a Stalled condition that names the label to set, written once; a namespace that gains or loses
the label queues its TrainJobs (handlers/namespaces.py, builders/selectors.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
from _factories import manifest

from raytrain_operator import k8s
from raytrain_operator.builders.selectors import describe, label_command, parse_selector, selects
from raytrain_operator.handlers import engine as engine_module
from raytrain_operator.handlers import events
from raytrain_operator.handlers.engine import NOT_SELECTED, Engine
from raytrain_operator.handlers.namespaces import NamespaceSelection
from raytrain_operator.settings import OperatorConfig
from raytrain_operator.status.conditions import find

ENABLED = {"matchLabels": {"raytrain.dev/enabled": "true"}}


def test_an_empty_or_missing_selector_selects_every_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for text in ("", "{}", '{"matchLabels": {}}'):
        assert parse_selector(text) is None
    assert selects(None, {})
    monkeypatch.delenv("RAYTRAIN_NAMESPACE_SELECTOR", raising=False)
    assert OperatorConfig().namespace_selector is None
    monkeypatch.setenv(
        "RAYTRAIN_NAMESPACE_SELECTOR", '{"matchLabels":{"raytrain.dev/enabled":"true"}}'
    )
    assert OperatorConfig().namespace_selector == ENABLED


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (ENABLED, {"raytrain.dev/enabled": "true"}, True),
        (ENABLED, {"raytrain.dev/enabled": "yes"}, False),
        (ENABLED, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
         {"team": "b"}, True),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}, {}, True),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]},
         {"team": "x"}, False),
        ({"matchExpressions": [{"key": "ml", "operator": "Exists"}]}, {"ml": ""}, True),
        ({"matchExpressions": [{"key": "ml", "operator": "DoesNotExist"}]}, {"ml": ""}, False),
    ],
)  # fmt: skip
def test_a_selector_matches_as_kubernetes_does(
    selector: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert selects(selector, labels) is expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("raytrain.dev/enabled=true", "not JSON"),
        ('["a"]', "is not a LabelSelector object"),
        ('{"matchLabel": {}}', "unknown key matchLabel"),
        ('{"matchLabels": {"a": 1}}', "matchLabels"),
        ('{"matchExpressions": [{"key": "a", "operator": "Equals"}]}', "operator: 'Equals'"),
        ('{"matchExpressions": [{"key": "a", "operator": "In"}]}', "In needs at least one value"),
    ],
)
def test_a_bad_selector_stops_the_operator_naming_the_value(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="RAYTRAIN_NAMESPACE_SELECTOR") as caught:
        parse_selector(text)
    assert says in str(caught.value)


def test_the_refusal_names_the_selector_and_the_command() -> None:
    assert describe(ENABLED) == "raytrain.dev/enabled=true"
    assert label_command(ENABLED, "team-b") == (
        "kubectl label namespace team-b raytrain.dev/enabled=true"
    )
    message = NamespaceSelection(ENABLED).refusal("team-b")
    assert message.startswith(
        "namespace 'team-b' does not match this operator's namespaceSelector "
        "(raytrain.dev/enabled=true), so it manages no TrainJob there"
    )
    assert "(kubectl label namespace team-b raytrain.dev/enabled=true)" in message


def test_a_namespace_not_seen_yet_is_read_once() -> None:
    reads: list[str] = []

    def read(name: str) -> dict[str, str] | None:
        reads.append(name)
        return {"raytrain.dev/enabled": "true"} if name == "team-a" else None

    selection = NamespaceSelection(ENABLED, read)
    assert selection.selects("team-a") and selection.selects("team-a")
    assert not selection.selects("gone") and not selection.selects("gone")
    assert reads == ["team-a", "gone"]
    # Its watch then says what changes; a first sighting changes nothing.
    assert selection.saw("new", {}) is None
    assert selection.saw("team-a", {}) is False
    assert not selection.selects("team-a")
    assert selection.saw("team-a", {"raytrain.dev/enabled": "true"}) is True
    assert selection.saw("team-a", {"raytrain.dev/enabled": "true", "x": "y"}) is None


@pytest.fixture
def selective(monkeypatch: pytest.MonkeyPatch) -> tuple[Engine, list[dict[str, Any]]]:
    """An engine with the chart's default selector over namespaces team-a (labelled) and
    team-b (not); the status patches it writes."""
    labels = {"team-a": {"raytrain.dev/enabled": "true"}, "team-b": {}}
    monkeypatch.setattr(k8s, "namespace_labels", lambda name: labels.get(name))
    engine = Engine(OperatorConfig(namespace_selector=ENABLED))
    writes: list[dict[str, Any]] = []

    def patch_trainjob(
        ns: str, name: str, body: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        writes.append(body)
        return {"metadata": {"uid": body["metadata"]["uid"], "resourceVersion": "9"}}

    monkeypatch.setattr(k8s, "patch_trainjob", patch_trainjob)
    return engine, writes


def test_a_job_in_a_namespace_not_selected_is_stalled_once_and_never_reconciled(
    selective: tuple[Engine, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, writes = selective
    obj: dict[str, Any] = {**manifest(), "status": {}}
    obj["metadata"] = {**obj["metadata"], "namespace": "team-b"}
    monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: obj)
    reconciled: list[str] = []
    monkeypatch.setattr(engine_module, "reconcile", lambda *a, **k: reconciled.append(a[1]))
    engine.run_pass(("team-b", "digits"), "create")
    assert reconciled == []
    (write,) = writes
    status = write["status"]
    stalled = find(status["conditions"], "Stalled")
    assert stalled is not None and stalled["reason"] == NOT_SELECTED
    assert "kubectl label namespace team-b raytrain.dev/enabled=true" in stalled["message"]
    assert status["phase"] == "Stalled"
    # Once said, the next pass writes nothing.
    obj["status"] = status
    engine.run_pass(("team-b", "digits"), "wake")
    assert len(writes) == 1 and reconciled == []
    engine.queue.stop(1)


def test_a_job_in_a_selected_namespace_is_reconciled(
    selective: tuple[Engine, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, writes = selective
    obj: dict[str, Any] = {**manifest(), "status": {}}
    obj["metadata"] = {**obj["metadata"], "namespace": "team-a"}
    monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: obj)
    reconciled: list[str] = []

    def reconcile_(*args: Any, **kwargs: Any) -> Any:
        reconciled.append(args[1])
        raise kopf.TemporaryError("stop here", delay=60)

    monkeypatch.setattr(engine_module, "reconcile", reconcile_)
    engine.run_pass(("team-a", "digits"), "create")
    assert reconciled == ["create"] and writes == []
    engine.queue.stop(1)


def test_a_namespace_that_gains_or_loses_the_label_queues_its_trainjobs(
    selective: tuple[Engine, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, _ = selective
    queued: list[tuple[Any, str]] = []
    monkeypatch.setattr(
        engine.queue, "schedule", lambda key, delay=0.0, cause="wake": queued.append((key, cause))
    )
    monkeypatch.setattr(k8s, "trainjob_names", lambda ns: ["one", "two"])

    def namespace_event(kind: str | None, labels: dict[str, str]) -> None:
        body = kopf.Body({"metadata": {"name": "team-b", "labels": labels}})  # type: ignore[arg-type]
        asyncio.run(events.namespace_changed(type=kind, name="team-b", meta=body.meta,
                                             memo=kopf.Memo(engine=engine)))  # fmt: skip

    assert not engine.namespaces.selects("team-b")
    namespace_event(None, {})  # the watch's listing: nothing changed
    assert queued == []
    namespace_event("MODIFIED", {"raytrain.dev/enabled": "true"})
    assert queued == [(("team-b", "one"), "namespace"), (("team-b", "two"), "namespace")]
    namespace_event("MODIFIED", {"raytrain.dev/enabled": "true", "owner": "ml"})
    assert len(queued) == 2
    namespace_event("MODIFIED", {})
    assert len(queued) == 4


def test_a_job_another_operator_handles_is_left_alone_unless_its_namespace_just_opted_out(
    selective: tuple[Engine, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job with a status that says nothing of this selector may be another operator's (one
    whose selector takes the namespace): no write, or the two would take turns for ever. Once
    its namespace loses the label while this operator watches, it says so once."""
    engine, writes = selective
    obj: dict[str, Any] = {**manifest(), "status": {"phase": "Running", "conditions": []}}
    obj["metadata"] = {**obj["metadata"], "namespace": "team-b"}
    monkeypatch.setattr(k8s, "get_trainjob", lambda ns, name: obj)
    monkeypatch.setattr(k8s, "trainjob_names", lambda ns: ["digits"])
    monkeypatch.setattr(engine.queue, "schedule", lambda key, delay=0.0, cause="wake": None)
    for _ in range(3):
        engine.run_pass(("team-b", "digits"), "wake")
    assert writes == []
    engine.namespace_selection_changed("team-b", False)
    engine.run_pass(("team-b", "digits"), "namespace")
    (write,) = writes
    stalled = find(write["status"]["conditions"], "Stalled")
    assert stalled is not None and stalled["reason"] == NOT_SELECTED
    assert "phase" not in write["status"]  # Running stays: its RayJob runs on, unmanaged
    engine.run_pass(("team-b", "digits"), "wake")
    assert len(writes) == 1
