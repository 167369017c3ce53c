"""The operator's writes on the real API server: children kept in line by server-side apply, and
TrainJobs from the pre-0.2 bookkeeping layout (kopf's keys under `raytrain.dev/`) taken over.

Same harness as test_operator.py: the operator runs as `python -m raytrain_operator`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    Operator,
    counter,
    crds,
    create,
    get,
    operator,
    secret,
    trainjob,
)

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures

FIELD_MANAGER = "raytrain-operator"


def managers(cluster: KubeCluster, ns: str, kind: str, name: str) -> set[tuple[str, str]]:
    """(manager, operation) pairs of its managedFields (kubectl hides them unless asked)."""
    obj = cluster.get_json(kind, name, "-n", ns, "--show-managed-fields")
    return {(m["manager"], m["operation"]) for m in obj["metadata"].get("managedFields") or []}


def test_owned_children_that_drifted_are_applied_back(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "drift"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name))
    rayjob = wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob"
    )
    cm = get(kube_cluster, ns, "configmap", f"{name}-contract")
    assert cm is not None
    # created by us
    assert (FIELD_MANAGER, "Update") in managers(kube_cluster, ns, "configmap", f"{name}-contract")
    contract = cm["data"]["contract.json"]
    role = get(kube_cluster, ns, "role", f"{name}-runtime")
    assert role is not None

    # Hand edits to our children, then the RayJob goes: the next pass re-ensures every child.
    kube_cluster.kubectl(
        "patch", "configmap", f"{name}-contract", "-n", ns, "--type=merge",
        "-p", json.dumps({"data": {"contract.json": "{}", "extra": "kept"}}),
    )  # fmt: skip
    kube_cluster.kubectl(
        "patch", "role", f"{name}-runtime", "-n", ns, "--type=merge", "-p", '{"rules": []}'
    )  # fmt: skip
    kube_cluster.kubectl("delete", "rayjobs.ray.io", f"{name}-0", "-n", ns, "--wait=true")

    # The RayJob is the last child a pass applies: once it is back, so are the others (the
    # Role comes after the ConfigMap; checking it as soon as the ConfigMap was back raced).
    again = wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob again"
    )
    assert again["metadata"]["uid"] != rayjob["metadata"]["uid"]
    cm = get(kube_cluster, ns, "configmap", f"{name}-contract") or {}
    assert cm["data"].get("contract.json") == contract, "the contract ConfigMap applied back"
    assert (FIELD_MANAGER, "Apply") in managers(kube_cluster, ns, "configmap", f"{name}-contract")
    # Server-side apply sets what we own and leaves a key someone else added.
    assert cm["data"]["extra"] == "kept"
    assert (get(kube_cluster, ns, "role", f"{name}-runtime") or {})["rules"] == role["rules"]


def test_a_trainjob_from_before_0_2_is_resumed_and_can_still_be_deleted(
    kube_cluster: KubeCluster, namespace: str, crds: None, tmp_path: Path
) -> None:
    ns, name = namespace, "upgraded"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    doc = trainjob(name)
    # What the previous release left on every TrainJob it had handled.
    essence = {"metadata": {"labels": doc["metadata"]["labels"]}, "spec": doc["spec"]}
    doc["metadata"]["finalizers"] = ["raytrain.dev/finalizer"]
    doc["metadata"]["annotations"] = {
        "raytrain.dev/last-handled-configuration": json.dumps(essence),
        "raytrain.dev/kopf-managed": "yes",
    }
    create(kube_cluster, ns, doc)

    op = Operator(kube_cluster, ns, tmp_path / "operator.log")
    op.start()
    try:

        def migrated() -> dict[str, Any] | None:
            tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
            return tj if not (tj.get("metadata") or {}).get("finalizers") else None

        wait_for(migrated, T_CREATE, "the old finalizer gone")
        # Resumed at the start (listed, its status empty): its first attempt is created.
        wait_for(
            lambda: counter(op.metrics(), "raytrain_reconciles_total", handler="resume"),
            T_CREATE,
            "the TrainJob to be resumed",
        )
        wait_for(
            lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "its RayJob"
        )
        assert "Removed the pre-0.2 finalizer raytrain.dev/finalizer" in op.since_start()

        kube_cluster.kubectl("delete", "trainjobs.raytrain.dev", name, "-n", ns, "--wait=false")
        wait_for(
            lambda: get(kube_cluster, ns, "trainjobs.raytrain.dev", name) is None,
            T_CREATE,
            "the upgraded TrainJob to be deleted",
        )
    finally:
        op.stop()
