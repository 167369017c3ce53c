"""The children are deleted only when they are ours: an object of a child's name that carries
no ownerReference to this TrainJob (its uid) belongs to someone else and stays, both in the TTL
clean-up and when a child is turned off. The delete names the uid it checked, so an object
replaced between the read and the delete is not deleted either."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from _factories import UID, meta, trainjob
from test_apply_children import FakeServer, server  # noqa: F401  (fixture)

from raytrain_contract.meta import owner_reference
from raytrain_operator import k8s
from raytrain_operator.builders.children import CHILDREN
from raytrain_operator.handlers import apply
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status.machine import EnsureChildren

LOG = logging.getLogger("test")
#: The children found by name (every kind but the RayJob, which is found by label).
NAMED = [(c.kind, c.name("digits")) for c in CHILDREN if c.name is not None]


def obj(kind: str, name: str, owner_uid: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": f"uid-of-{name}"}
    if owner_uid is not None:
        ref = owner_reference(meta())
        ref["uid"] = owner_uid
        metadata["ownerReferences"] = [ref]
    return {"kind": kind, "metadata": metadata}


@pytest.fixture
def deleted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str | None]]:
    out: list[tuple[str, str, str | None]] = []

    def delete(kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        out.append((kind, name, uid))

    monkeypatch.setattr(k8s, "delete", delete)
    monkeypatch.setattr(k8s, "list_names", lambda kind, ns, selector: [])
    return out


@pytest.mark.parametrize("owner", [None, "another-trainjobs-uid"], ids=["no-owner", "other-owner"])
def test_the_ttl_clean_up_leaves_what_is_not_ours(
    server: FakeServer,  # noqa: F811
    deleted: list[tuple[str, str, str | None]],
    owner: str | None,
) -> None:
    assert {kind for kind, _ in NAMED} >= {
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    for kind, name in NAMED:
        server.objects[(kind, name)] = obj(kind, name, owner)
    apply.delete_children(meta())
    assert deleted == []


def test_the_ttl_clean_up_deletes_ours_by_uid(
    server: FakeServer,  # noqa: F811
    deleted: list[tuple[str, str, str | None]],
) -> None:
    for kind, name in NAMED:
        server.objects[(kind, name)] = obj(kind, name, UID)
    apply.delete_children(meta())
    assert deleted == [(kind, name, f"uid-of-{name}") for kind, name in NAMED]


def test_the_ttl_clean_up_skips_what_is_gone(
    server: FakeServer,  # noqa: F811
    deleted: list[tuple[str, str, str | None]],
) -> None:
    apply.delete_children(meta())
    assert deleted == []


def test_a_child_turned_off_is_deleted_only_when_ours(
    server: FakeServer,  # noqa: F811
    deleted: list[tuple[str, str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(apply, "fence", lambda pool, meta, attempt: None)
    server.objects[("PodDisruptionBudget", "digits-ray")] = obj(
        "PodDisruptionBudget", "digits-ray", None
    )
    off = trainjob(disruption={"podDisruptionBudget": False})
    apply.ensure_children(PassState(), off, meta(), EnsureChildren(1, False), None, LOG)
    assert deleted == []
    server.objects[("PodDisruptionBudget", "digits-ray")] = obj(
        "PodDisruptionBudget", "digits-ray", UID
    )
    apply.ensure_children(PassState(), off, meta(), EnsureChildren(2, False), None, LOG)
    assert deleted == [("PodDisruptionBudget", "digits-ray", "uid-of-digits-ray")]


def test_the_delete_sends_the_uid_it_checked_as_a_precondition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[str, str, Any]] = []

    def request(method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        sent.append((method, path, body))
        return {}

    monkeypatch.setattr(k8s, "request", request)
    k8s.delete("ConfigMap", "team-a", "digits-contract", uid="u-1")
    k8s.delete("RayJob", "team-a", "digits-0", uid="u-2")
    assert sent[0] == (
        "DELETE",
        "/api/v1/namespaces/team-a/configmaps/digits-contract",
        {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "u-1"}},
    )
    assert sent[1][2] == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u-2"},
    }
