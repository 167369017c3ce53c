"""The operator-scope admission policy of the chart against a real API server.

The policy as the chart renders it, RBAC as broad as the operator's, and requests sent as the
operator's account by impersonation (`kubectl --as=system:serviceaccount:raytrain-system:
raytrain-operator`). The account may create, change and delete what carries a TrainJob child's
labels and ownerReference; someone else's NetworkPolicy, ConfigMap or RoleBinding it may not
touch, and labels it adds to one do not make it its own. Any other account is not matched.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from _wait import wait_for
from conftest import ENABLED_LABEL
from test_operator import crds
from test_status_policy_server import as_user, helm, make_trainjob, policy_docs

from raytrain_contract.meta import Meta, child_metadata

pytestmark = pytest.mark.integration
__all__ = ["crds", "helm"]  # fixtures

TEMPLATE = "templates/operator-scope-policy.yaml"
OPERATOR = "system:serviceaccount:raytrain-system:raytrain-operator"
RBAC_NAME = "raytrain-test-operator-scope"
JOB = "job-a"


@pytest.fixture(scope="module")
def scope_policy(kube_cluster: Any, helm: str) -> Iterator[list[dict[str, Any]]]:
    """The chart's policy, and RBAC that lets the operator's account write the kinds it
    writes (the chart's ClusterRole holds the same verbs)."""
    docs = policy_docs(helm, "raytrain-operator", TEMPLATE)
    assert [d["kind"] for d in docs] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": RBAC_NAME},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get", "create", "patch", "delete"],
            },
            {
                "apiGroups": ["networking.k8s.io"],
                "resources": ["networkpolicies"],
                "verbs": ["get", "create", "patch", "delete"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": RBAC_NAME},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": RBAC_NAME,
        },
        "subjects": [{"kind": "User", "name": OPERATOR, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    for doc in [role, binding, *docs]:
        kube_cluster.apply(doc)
    yield docs
    for doc in reversed([role, binding, *docs]):
        kube_cluster.kubectl(
            "delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found"
        )


def ours(namespace: str, name: str, uid: str) -> dict[str, Any]:
    """A ConfigMap as the builders make a child of TrainJob JOB (of ``uid``: an owner that
    does not exist would have the garbage collector delete the child at once)."""
    meta = Meta(name=JOB, namespace=namespace, uid=uid)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(meta, name),
        "data": {"a": "1"},
    }


def theirs_policy(namespace: str) -> dict[str, Any]:
    """An application's default-deny NetworkPolicy."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny", "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


def create_as_operator(kube_cluster: Any, namespace: str, doc: dict[str, Any]) -> Any:
    return kube_cluster.kubectl(
        f"--as={OPERATOR}", "--as-group=system:serviceaccounts", "-n", namespace,
        "create", "-f", "-", input=json.dumps(doc), check=False,
    )  # fmt: skip


def test_the_operators_account_writes_its_children_and_nothing_else(
    kube_cluster: Any, namespace: str, crds: None, scope_policy: list[dict[str, Any]]
) -> None:
    ns = namespace
    uid = make_trainjob(kube_cluster, ns, JOB)["metadata"]["uid"]
    kube_cluster.apply(theirs_policy(ns), namespace=ns)
    theirs_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-settings"}}
    kube_cluster.apply(theirs_map, namespace=ns)

    # A new policy reaches admission within seconds: wait for the first refusal.
    def refused() -> Any:
        probe = as_user(kube_cluster, OPERATOR, ns, "delete", "networkpolicy", "default-deny")
        if probe.returncode == 0:
            kube_cluster.apply(theirs_policy(ns), namespace=ns)
            return None
        return probe

    probe = wait_for(refused, timeout=60, what="the operator-scope policy to be enforced")
    assert "ValidatingAdmissionPolicy" in probe.stderr, probe.stderr
    assert "the raytrain-operator account may DELETE only the children of TrainJobs" in probe.stderr
    assert f"networkpolicies {ns}/default-deny is not one" in probe.stderr
    assert kube_cluster.get_json("networkpolicy", "default-deny", "-n", ns)

    # Its own child: created, changed and deleted.
    made = create_as_operator(kube_cluster, ns, ours(ns, f"{JOB}-contract", uid))
    assert made.returncode == 0, made.stderr
    changed = as_user(
        kube_cluster, OPERATOR, ns, "patch", "configmap", f"{JOB}-contract", "--type=merge",
        "-p", json.dumps({"data": {"a": "2"}}),
    )  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    gone = as_user(kube_cluster, OPERATOR, ns, "delete", "configmap", f"{JOB}-contract")
    assert gone.returncode == 0, gone.stderr

    # Without the ownerReference it is not a child.
    orphan = ours(ns, "orphan", uid)
    del orphan["metadata"]["ownerReferences"]
    refused_orphan = create_as_operator(kube_cluster, ns, orphan)
    assert refused_orphan.returncode != 0
    assert "configmaps " + f"{ns}/orphan is not one" in refused_orphan.stderr

    # Labels the operator's account adds to someone else's ConfigMap do not make it its own.
    claim = copy.deepcopy(ours(ns, "app-settings", uid))["metadata"]
    taken = as_user(
        kube_cluster, OPERATOR, ns, "patch", "configmap", "app-settings", "--type=merge",
        "-p", json.dumps({"metadata": {"labels": claim["labels"],
                                        "ownerReferences": claim["ownerReferences"]}}),
    )  # fmt: skip
    assert taken.returncode != 0
    assert f"configmaps {ns}/app-settings was not one before this update" in taken.stderr
    assert "labels" not in kube_cluster.get_json("configmap", "app-settings", "-n", ns)["metadata"]

    # In a namespace the operator's namespaceSelector does not select, not even its own child
    # (the namespace fixture carries the chart's default label; here it is taken away).
    kube_cluster.kubectl("label", "namespace", ns, f"{ENABLED_LABEL}-")

    def refused_outside() -> Any:
        made = create_as_operator(kube_cluster, ns, ours(ns, f"{JOB}-outside", uid))
        if made.returncode == 0:
            as_user(kube_cluster, OPERATOR, ns, "delete", "configmap", f"{JOB}-outside")
            return None
        return made

    outside = wait_for(refused_outside, timeout=60, what="a refusal in an unselected namespace")
    assert (
        f"the raytrain-operator account may CREATE nothing in namespace {ns}: it does not match "
        "the operator's namespaceSelector (chart value namespaceSelector; "
        "raytrain.dev/enabled=true)"
    ) in outside.stderr, outside.stderr
    kube_cluster.kubectl("label", "namespace", ns, f"{ENABLED_LABEL}=true")

    # Any other account is not matched: the admin deletes the application's policy.
    kube_cluster.kubectl("delete", "networkpolicy", "default-deny", "-n", ns)
