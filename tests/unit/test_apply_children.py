"""Children are created once, applied server-side when they are ours, and never taken over.

`FakeServer` stands in for the API server behind `k8s.create/get/apply`; the last test checks
the requests `k8s.apply` and `k8s.create` really send, against a recording HTTP server on
loopback.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any

import _fake_api
import pytest
from _factories import UID, meta, trainjob
from _fake_api import recorder

from raytrain_operator import k8s
from raytrain_operator.handlers import apply
from raytrain_operator.status.machine import EnsureChildren

LOG = logging.getLogger("test")


class FakeServer:
    """Objects by (kind, name); applies merge the body in, as server-side apply would."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        key = (body["kind"], body["metadata"]["name"])
        self.calls.append(("create", *key))
        if key in self.objects:
            return None
        self.objects[key] = copy.deepcopy(body)
        return self.objects[key]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", kind, name))
        return copy.deepcopy(self.objects.get((kind, name)))

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        key = (body["kind"], body["metadata"]["name"])
        self.calls.append(("apply", *key))
        self.objects[key] = copy.deepcopy(body)
        return self.objects[key]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()
    monkeypatch.setattr(k8s, "create", fake.create)
    monkeypatch.setattr(k8s, "get", fake.get)
    monkeypatch.setattr(k8s, "apply", fake.apply)
    return fake


def ensure(attempt: int = 0, **spec: Any) -> None:
    apply.ensure_children(trainjob(**spec), meta(), EnsureChildren(attempt, False), None, LOG)


CHILDREN = [
    ("ConfigMap", "digits-contract"),
    ("ServiceAccount", "digits-runtime"),
    ("Role", "digits-runtime"),
    ("RoleBinding", "digits-runtime"),
    ("PodDisruptionBudget", "digits-ray"),
    ("NetworkPolicy", "digits-ray"),
    ("RayJob", "digits-0"),
]


def assert_calls(calls: list[tuple[str, str, str]], wanted: list[tuple[str, str, str]]) -> None:
    """The same calls, each child's in the wanted order; the children before the RayJob go
    out together (in any order between them), the Role before its RoleBinding, the RayJob
    last."""
    assert sorted(calls) == sorted(wanted)
    for child in CHILDREN:
        assert [c for c in calls if c[1:] == child] == [c for c in wanted if c[1:] == child]
    rayjob_calls = [i for i, c in enumerate(calls) if c[1] == "RayJob"]
    others = [i for i, c in enumerate(calls) if c[1] != "RayJob"]
    assert max(others) < min(rayjob_calls)
    role = [i for i, c in enumerate(calls) if c[1] == "Role"]
    binding = [i for i, c in enumerate(calls) if c[1] == "RoleBinding"]
    assert max(role) < min(binding)


def test_fresh_children_cost_one_create_each(server: FakeServer) -> None:
    ensure()
    assert_calls(server.calls, [("create", kind, name) for kind, name in CHILDREN])


def test_the_children_go_out_together_and_the_rayjob_after_them(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each create waits (up to 5 s) until five are in flight: only requests that go out
    together get there, and the RayJob's create starts after the others returned."""
    gate = threading.Condition()
    in_flight: list[str] = []
    peak: list[int] = [0]
    rayjob_saw: list[int] = []
    create = server.create

    def gathering_create(body: dict[str, Any]) -> dict[str, Any] | None:
        with gate:
            in_flight.append(body["kind"])
            peak[0] = max(peak[0], len(in_flight))
            if body["kind"] == "RayJob":
                rayjob_saw.append(len(in_flight))
            gate.notify_all()
            gate.wait_for(lambda: peak[0] >= 5, timeout=5)
        try:
            return create(body)
        finally:
            with gate:
                in_flight.remove(body["kind"])

    monkeypatch.setattr(k8s, "create", gathering_create)
    ensure()
    assert peak[0] == 5  # ConfigMap, ServiceAccount, Role, PodDisruptionBudget, NetworkPolicy
    assert rayjob_saw == [1]  # alone: everything else had returned
    assert_calls(server.calls, [("create", kind, name) for kind, name in CHILDREN])


def test_together_raises_the_first_error_in_order_once_all_are_done() -> None:
    done: list[str] = []

    def slow_ok() -> str:
        threading.Event().wait(0.2)
        done.append("slow")
        return "slow"

    def fails(message: str) -> Any:
        def call() -> Any:
            raise ValueError(message)

        return call

    with pytest.raises(ValueError, match="first"):
        apply.together([slow_ok, fails("first"), fails("second")])
    assert done == ["slow"]
    assert apply.together([lambda: 1, lambda: 2, slow_ok]) == [1, 2, "slow"]


def test_existing_children_we_own_are_applied_whole(server: FakeServer) -> None:
    ensure()
    wanted = copy.deepcopy(server.objects)
    # Someone edits our children by hand: every field we set comes back, not a per-kind list.
    server.objects[("ConfigMap", "digits-contract")]["data"] = {"contract.json": "{}"}
    server.objects[("RoleBinding", "digits-runtime")]["subjects"] = []
    server.objects[("Role", "digits-runtime")]["rules"] = []
    server.objects[("RayJob", "digits-0")]["spec"]["entrypoint"] = "sh -c 'echo hijacked'"
    server.calls.clear()
    ensure()
    assert_calls(
        server.calls,
        [
            call
            for kind, name in CHILDREN
            for call in [("create", kind, name), ("get", kind, name), ("apply", kind, name)]
        ],
    )
    assert server.objects == wanted


def test_a_foreign_object_is_a_conflict_and_left_alone(server: FakeServer) -> None:
    foreign = {
        "kind": "ConfigMap",
        "metadata": {"name": "digits-contract", "namespace": "team-a"},
        "data": {"mine": "yes"},
    }
    server.objects[("ConfigMap", "digits-contract")] = copy.deepcopy(foreign)
    with pytest.raises(apply.Conflict, match="ConfigMap named digits-contract") as exc:
        ensure()
    assert "delete that ConfigMap or rename the TrainJob" in str(exc.value)
    assert server.objects[("ConfigMap", "digits-contract")] == foreign
    assert not [c for c in server.calls if c[0] == "apply"]


def test_an_object_owned_by_another_trainjob_is_not_adopted(server: FakeServer) -> None:
    other = {
        "kind": "ServiceAccount",
        "metadata": {
            "name": "digits-runtime",
            "namespace": "team-a",
            "ownerReferences": [{"kind": "TrainJob", "name": "digits", "uid": "another-uid"}],
        },
    }
    server.objects[("ServiceAccount", "digits-runtime")] = copy.deepcopy(other)
    with pytest.raises(apply.Conflict):
        ensure()
    assert server.objects[("ServiceAccount", "digits-runtime")] == other


def test_an_object_that_vanished_after_the_create_is_applied(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s, "create", lambda body: None)  # "exists"... then gone on read
    ensure()
    assert [c[0] for c in server.calls] == ["get", "apply"] * len(CHILDREN)
    assert server.objects[("RayJob", "digits-0")]["metadata"]["ownerReferences"][0]["uid"] == UID


# ------------------------------------------------------------- the requests on the wire

__all__ = ["recorder"]  # the fixture


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("ConfigMap", "/api/v1/namespaces/team-a/configmaps/x"),
        ("ServiceAccount", "/api/v1/namespaces/team-a/serviceaccounts/x"),
        ("Role", "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/roles/x"),
        ("RoleBinding", "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings/x"),
        ("RayJob", "/apis/ray.io/v1/namespaces/team-a/rayjobs/x"),
    ],
)
def test_apply_is_a_forced_server_side_apply_as_our_field_manager(
    recorder: list[dict[str, Any]], kind: str, path: str
) -> None:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "team-a"},
    }
    if kind == "RoleBinding":  # the typed client refuses an answer without it
        body["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"}
    k8s.apply(body)
    (request,) = recorder
    assert request["method"] == "PATCH"
    assert request["path"] == path
    assert request["content_type"] == "application/apply-patch+yaml"
    assert request["query"]["fieldManager"] == ["raytrain-operator"]
    assert [v.lower() for v in request["query"]["force"]] == ["true"]
    assert request["body"] == body


def test_create_names_our_field_manager(recorder: list[dict[str, Any]]) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "n"}}
    assert k8s.create(body) == body
    assert recorder[0]["method"] == "POST"
    assert recorder[0]["query"]["fieldManager"] == ["raytrain-operator"]
    recorder.clear()
    _fake_api.Recorder.taken = True
    assert k8s.create(body) is None
