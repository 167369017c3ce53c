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
from raytrain_operator.handlers.state import PassState
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

    # The fence's reads: the TrainJob as the pass saw it, none of another attempt's RayJobs or
    # pods. They are not in `calls`, which lists the children's requests.
    def get_trainjob(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace, "uid": UID}, "status": {}}

    def list_rayjobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()
    monkeypatch.setattr(k8s, "create", fake.create)
    monkeypatch.setattr(k8s, "get", fake.get)
    monkeypatch.setattr(k8s, "apply", fake.apply)
    monkeypatch.setattr(k8s, "get_trainjob", fake.get_trainjob)
    monkeypatch.setattr(k8s, "list_rayjobs", fake.list_rayjobs)
    monkeypatch.setattr(k8s, "list_pods", fake.list_pods)
    return fake


def ensure(attempt: int = 0, **spec: Any) -> None:
    apply.ensure_children(
        PassState(), trainjob(**spec), meta(), EnsureChildren(attempt, False), None, LOG
    )


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


#: The rounds of a new attempt's requests (apply.py): what goes out together, in order.
ROUNDS = [
    {"TrainJob?", "RayJobs?", "pods?", "Role", "ServiceAccount"},
    {"ConfigMap", "RoleBinding", "PodDisruptionBudget", "NetworkPolicy"},
    {"RayJob"},
]


#: A new TrainJob's first pass, from its creation event: no fence, so every child but the
#: RoleBinding (after its Role) and the RayJob (after all) goes out at once.
UNFENCED_ROUNDS = [
    {"Role", "ServiceAccount", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy"},
    {"RoleBinding"},
    {"RayJob"},
]


@pytest.mark.parametrize(
    ("fenced", "rounds"), [(True, ROUNDS), (False, UNFENCED_ROUNDS)], ids=["fenced", "first-pass"]
)
def test_the_requests_go_out_in_three_rounds(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch, fenced: bool, rounds: list[set[str]]
) -> None:
    """Each request waits (up to 5 s) until every other request of its round is in flight with
    it, and records what was in flight: a round whose requests went out one after another, or
    a request that started before the round in front of it returned, shows up in the record.
    A first pass sends none of the fence's reads."""
    gate = threading.Condition()
    in_flight: set[str] = set()
    seen: dict[str, set[str]] = {}

    def gathered(what: str, call: Any) -> Any:
        round_ = next(r for r in rounds if what in r)
        with gate:
            in_flight.add(what)
            gate.notify_all()
            gate.wait_for(lambda: round_ <= in_flight, timeout=5)
            seen[what] = set(in_flight)
        try:
            return call()
        finally:
            with gate:
                # Leave once the whole round has looked, so each sees all of its round.
                gate.wait_for(lambda: all(w in seen for w in round_), timeout=5)
                in_flight.discard(what)
                gate.notify_all()

    create = server.create
    monkeypatch.setattr(k8s, "create", lambda body: gathered(body["kind"], lambda: create(body)))
    for name, what in (
        ("get_trainjob", "TrainJob?"),
        ("list_rayjobs", "RayJobs?"),
        ("list_pods", "pods?"),
    ):
        read = getattr(server, name)
        monkeypatch.setattr(
            k8s, name, lambda ns, arg, read=read, what=what: gathered(what, lambda: read(ns, arg))
        )
    apply.ensure_children(
        PassState(), trainjob(), meta(), EnsureChildren(0, False), None, LOG, fenced=fenced
    )
    assert set(seen) == set().union(*rounds)
    for round_ in rounds:
        for what in round_:
            assert seen[what] == round_, what
    assert_calls(server.calls, [("create", kind, name) for kind, name in CHILDREN])


def test_only_attempt_0_goes_without_the_fence(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later attempt is always fenced, whatever the caller says: the server at attempt 2
    stops attempt 1 before anything that names it is written."""
    monkeypatch.setattr(
        k8s,
        "get_trainjob",
        lambda ns, name: {"metadata": {"uid": UID}, "status": {"attempt": 2}},
    )
    with pytest.raises(apply.Fenced, match="attempt 2"):
        apply.ensure_children(
            PassState(), trainjob(), meta(), EnsureChildren(1, False), None, LOG, fenced=False
        )
    assert {kind for _, kind, _ in server.calls} <= {"Role", "ServiceAccount"}


def test_a_fenced_pass_writes_nothing_that_names_an_attempt(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence fails (the server is at attempt 1): the Role and the ServiceAccount, which
    went out beside its reads, may exist; nothing else was sent, and Fenced is what the pass
    sees even when a child beside it failed too."""
    monkeypatch.setattr(
        k8s,
        "get_trainjob",
        lambda ns, name: {"metadata": {"uid": UID}, "status": {"attempt": 1}},
    )
    with pytest.raises(apply.Fenced, match="attempt 1"):
        ensure()
    assert {kind for _, kind, _ in server.calls} <= {"Role", "ServiceAccount"}

    def refuse(body: dict[str, Any]) -> Any:
        raise apply.Conflict(f"{body['kind']} taken")

    monkeypatch.setattr(k8s, "create", refuse)
    with pytest.raises(apply.Fenced):
        ensure()


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
        apply.together(PassState().pool(), [slow_ok, fails("first"), fails("second")])
    assert done == ["slow"]
    assert apply.together(PassState().pool(), [lambda: 1, lambda: 2, slow_ok]) == [1, 2, "slow"]


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
