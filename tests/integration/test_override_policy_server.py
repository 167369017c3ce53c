"""The operator with serviceAccountName and envFrom overrides forbidden, on the control plane.

The operator runs as a child process (test_operator.Operator) with
RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME=false and RAYTRAIN_ALLOW_ENV_FROM=false, what the chart's
multi-tenant profile sets. A TrainJob that uses either stalls with OverrideForbidden and nothing
of it is created (no ServiceAccount, Role, contract ConfigMap or RayJob); removing the field
lets it go on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    Operator,
    condition,
    crds,
    create,
    get,
    operator,
    running_operator,
    secret,
    trainjob,
    wait_condition,
)

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures used by name

TRAINJOBS = "trainjobs.raytrain.dev"


@pytest.fixture
def closed_operator(
    kube_cluster: KubeCluster,
    namespace: str,
    crds: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Operator]:
    # KubeCluster.env copies os.environ when the operator starts.
    monkeypatch.setenv("RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME", "false")
    monkeypatch.setenv("RAYTRAIN_ALLOW_ENV_FROM", "false")
    yield from running_operator(kube_cluster, namespace, tmp_path / "operator.log")


def nothing_created(cluster: KubeCluster, ns: str, name: str) -> None:
    for kind, child in [
        ("serviceaccounts", f"{name}-runtime"),
        ("roles.rbac.authorization.k8s.io", f"{name}-runtime"),
        ("rolebindings.rbac.authorization.k8s.io", f"{name}-runtime"),
        ("configmaps", f"{name}-contract"),
        ("rayjobs.ray.io", f"{name}-0"),
    ]:
        assert get(cluster, ns, kind, child) is None, f"{kind}/{child} was created"


def test_forbidden_overrides_stall_before_anything_is_created(
    kube_cluster: KubeCluster, namespace: str, closed_operator: Operator
) -> None:
    ns = namespace
    create(kube_cluster, ns, secret("borrow-s3"))
    create(kube_cluster, ns, secret("env-s3"))
    create(kube_cluster, ns, trainjob("borrow", head={"serviceAccountName": "default"}))
    env_from = [{"secretRef": {"name": "env-s3"}}]
    create(kube_cluster, ns, trainjob("env", workerTemplate={"envFrom": env_from}))

    stalled = wait_condition(kube_cluster, ns, "borrow", "Stalled")
    assert stalled["reason"] == "OverrideForbidden"
    message = stalled["message"]
    assert message.startswith("spec.head.serviceAccountName: 'default' is not allowed here")
    assert "podOverrides.allowServiceAccountName is false" in message
    assert "Remove spec.head.serviceAccountName" in message

    stalled = wait_condition(kube_cluster, ns, "env", "Stalled")
    assert stalled["reason"] == "OverrideForbidden"
    assert stalled["message"].startswith(
        "spec.workerTemplate.envFrom: [secretRef 'env-s3'] is not allowed here"
    )
    assert "podOverrides.allowEnvFrom is false" in stalled["message"]
    assert "sentinel" not in stalled["message"]

    for name in ("borrow", "env"):
        status = (get(kube_cluster, ns, TRAINJOBS, name) or {})["status"]
        assert status["phase"] == "Stalled"
        nothing_created(kube_cluster, ns, name)

    # Removing the field is the fix: the job goes on, as its per-job account.
    kube_cluster.kubectl(
        "patch", TRAINJOBS, "borrow", "-n", ns, "--type=json",
        "-p", json.dumps([{"op": "remove", "path": "/spec/head/serviceAccountName"}]),
    )  # fmt: skip
    rayjob = wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", "borrow-0"),
        T_CREATE,
        "RayJob after the fix",
    )
    wait_for(
        lambda: condition(kube_cluster, ns, "borrow", "Stalled") is None,
        T_CREATE,
        "Stalled removed",
    )
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == "borrow-runtime"
    # The other job stays stalled.
    assert (condition(kube_cluster, ns, "env", "Stalled") or {}).get(
        "reason"
    ) == "OverrideForbidden"
    assert get(kube_cluster, ns, "rayjobs.ray.io", "env-0") is None


def test_a_host_path_is_refused_with_the_default_settings_unless_a_cluster_template_grants_it(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    """A tenant's job mounting the node's /proc (other tenants' environment, their keys among
    it) stalls with the chart's defaults; the same volume from a ClusterTrainJobTemplate, which
    only a cluster administrator can write, is a grant the job names. A namespaced template
    grants nothing."""
    ns = namespace
    proc = {"name": "host-proc", "hostPath": {"path": "/proc"}}
    mount = {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}
    create(kube_cluster, ns, secret("peek-s3"))
    create(
        kube_cluster,
        ns,
        trainjob("peek", workerTemplate={"volumes": [proc], "volumeMounts": [mount]}),
    )
    stalled = wait_condition(kube_cluster, ns, "peek", "Stalled")
    assert stalled["reason"] == "OverrideForbidden", stalled
    message = stalled["message"]
    assert message.startswith(
        'spec.workerTemplate.volumes[0] (\'host-proc\'): a hostPath volume ({"path": "/proc"}) '
        "is not allowed here"
    ), message
    assert "podOverrides.volumeTypes" in message and "ClusterTrainJobTemplate" in message
    nothing_created(kube_cluster, ns, "peek")

    # A namespaced TrainJobTemplate with the volume: still refused.
    spec = trainjob("x")["spec"]
    namespaced = {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": "TrainJobTemplate",
        "metadata": {"name": "with-proc"},
        "spec": {**spec, "workerTemplate": {"volumes": [proc], "volumeMounts": [mount]}},
    }
    namespaced["spec"]["storage"]["s3"]["credentialsSecret"]["name"] = "peek-s3"
    create(kube_cluster, ns, namespaced)
    job = trainjob("peek-ns")
    job["spec"] = {"template": {"kind": "TrainJobTemplate", "name": "with-proc"}}
    create(kube_cluster, ns, job)
    assert wait_condition(kube_cluster, ns, "peek-ns", "Stalled")["reason"] == "OverrideForbidden"
    nothing_created(kube_cluster, ns, "peek-ns")

    # The same volume from a ClusterTrainJobTemplate: granted.
    granted = f"{ns}-with-proc"[:63].rstrip("-")
    cluster_template = {**namespaced, "kind": "ClusterTrainJobTemplate"}
    cluster_template["metadata"] = {"name": granted}
    kube_cluster.kubectl("create", "-f", "-", input=json.dumps(cluster_template))
    try:
        job = trainjob("granted")
        job["spec"] = {"template": {"name": granted}}
        create(kube_cluster, ns, job)
        rayjob = wait_for(
            lambda: get(kube_cluster, ns, "rayjobs.ray.io", "granted-0"), T_CREATE, "RayJob"
        )
        worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
        assert proc in worker["volumes"]
    finally:
        kube_cluster.kubectl("delete", "ctjt", granted, "--ignore-not-found", check=False)
