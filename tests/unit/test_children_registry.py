"""The registry of child kinds (builders/children.py): what apply.py and k8s walk.

A new child kind is a module with its builder and a line in `CHILDREN`: these tests register a
kind the operator does not have and check that it is created in its round, pruned when turned
off, deleted with the others, and reached at its own path; and that every registered kind has
its rule in the documented RBAC (test_chart.py checks the chart against that table).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from _factories import meta, ours, trainjob

from raytrain_operator import k8s
from raytrain_operator.builders import children
from raytrain_operator.builders.children import CHILDREN, ChildContext, ChildKind
from raytrain_operator.handlers import apply
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status.machine import EnsureChildren

LOG = logging.getLogger("test")
OPERATOR_DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def service(ctx: ChildContext) -> dict[str, Any] | None:
    if ctx.trainjob.spec.suspend:  # stands for a spec field that turns the child off
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{ctx.meta.name}-svc", "namespace": ctx.meta.namespace},
    }


SERVICE = ChildKind(
    "Service",
    "",
    "v1",
    "services",
    build=service,
    name=lambda name: f"{name}-svc",
    round=children.SECOND_ROUND,
    pruned=True,
)


@pytest.fixture
def with_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry with one more line, as a new child kind would add it."""
    registry = (*CHILDREN, SERVICE)
    monkeypatch.setattr(children, "CHILDREN", registry)
    monkeypatch.setattr(apply, "CHILDREN", registry)
    monkeypatch.setitem(children.BY_KIND, "Service", SERVICE)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def ensure(self, body: dict[str, Any], meta: Any) -> bool:
        self.calls.append(("ensure", body["kind"], body["metadata"]["name"]))
        return True

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        self.calls.append(("delete", kind, name))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(apply, "_ensure", rec.ensure)
    monkeypatch.setattr(apply, "fence", lambda pool, meta, attempt: None)
    monkeypatch.setattr(k8s, "delete", rec.delete)
    monkeypatch.setattr(k8s, "get", ours)
    return rec


@pytest.mark.usefixtures("with_service")
def test_a_registered_kind_is_created_before_the_rayjob(recorder: Recorder) -> None:
    apply.ensure_children(PassState(), trainjob(), meta(), EnsureChildren(0, False), None, LOG)
    kinds = [kind for _, kind, _ in recorder.calls]
    assert ("ensure", "Service", "digits-svc") in recorder.calls
    assert kinds.index("Service") < kinds.index("RayJob") and kinds[-1] == "RayJob"


@pytest.mark.usefixtures("with_service")
def test_a_registered_kind_turned_off_is_pruned(recorder: Recorder) -> None:
    apply.ensure_children(
        PassState(), trainjob(suspend=True), meta(), EnsureChildren(0, True), None, LOG
    )
    assert ("delete", "Service", "digits-svc") in recorder.calls
    assert not any(kind == "Service" for verb, kind, _ in recorder.calls if verb == "ensure")


@pytest.mark.usefixtures("with_service")
def test_a_registered_kind_is_deleted_with_the_others(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s, "list_names", lambda kind, ns, selector: [])
    apply.delete_children(meta())
    assert recorder.calls[-1] == ("delete", "Service", "digits-svc")
    deleted = {kind for _, kind, _ in recorder.calls}
    assert deleted == {c.kind for c in CHILDREN if not c.per_attempt} | {"Service"}


@pytest.mark.usefixtures("with_service")
def test_a_registered_kind_has_its_path() -> None:
    assert k8s._kind_path("Service", "team-a", "digits-svc") == (
        "services",
        "/api/v1/namespaces/team-a/services/digits-svc",
    )


def test_the_rayjob_goes_last_and_is_deleted_in_the_foreground(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[str, str, Any]] = []

    def request(method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        sent.append((method, path, body))
        return {}

    monkeypatch.setattr(k8s, "request", request)
    k8s.delete("RayJob", "team-a", "digits-0")
    k8s.delete("ConfigMap", "team-a", "digits-contract")
    assert sent[0][:2] == ("DELETE", "/apis/ray.io/v1/namespaces/team-a/rayjobs/digits-0")
    assert sent[0][2]["propagationPolicy"] == "Foreground"
    assert sent[1] == ("DELETE", "/api/v1/namespaces/team-a/configmaps/digits-contract", None)
    last = [c.kind for c in CHILDREN if c.round == children.LAST_ROUND]
    assert last == ["RayJob"]


def documented_rules() -> dict[tuple[str, str], set[str]]:
    table: dict[tuple[str, str], set[str]] = {}
    for line in OPERATOR_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`[^`]*`", cells[0]) and cells[1].startswith("`"):
            group = cells[0].strip("`").strip('"')
            verbs = {v.strip().strip("`") for v in cells[2].split(",")}
            table[(group, cells[1].strip("`"))] = verbs
    return table


@pytest.mark.parametrize("child", CHILDREN, ids=lambda c: c.kind)
def test_every_registered_kind_has_its_documented_rbac(child: ChildKind) -> None:
    verbs = documented_rules().get((child.group, child.plural), set())
    needed = {"get", "create", "patch", "delete"} | ({"list"} if child.per_attempt else set())
    assert needed <= verbs, f"docs/operator.md's RBAC for {child.kind} lacks {needed - verbs}"
