"""spec.resumeFrom against the real control plane: a new TrainJob that names an older one starts
from its latest checkpoint (the contract ConfigMap carries it, status.resumedFrom records it),
and one that names a job that is not there stalls, creates nothing, and goes on once it is.

The jobs are suspended: nothing here needs a Ray cluster to run.
"""

from __future__ import annotations

import json

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    Operator,
    crds,
    create,
    get,
    names,
    operator,
    secret,
    trainjob,
    wait_condition,
)

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures used by name

LATEST = "s3://raytrain/checkpoints/old-0123456789ab/checkpoint_2026-11-20_10-00-00.000000"


def _report_checkpoint(cluster: KubeCluster, ns: str, name: str, uri: str) -> None:
    body = json.dumps({"status": {"checkpoint": {"latestURI": uri, "count": 3}}})
    cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", name, "-n", ns,
        "--subresource=status", "--type=merge", "-p", body,
    )  # fmt: skip


def _contract(cluster: KubeCluster, ns: str, name: str) -> dict[str, object]:
    configmap = get(cluster, ns, "configmaps", f"{name}-contract") or {}
    return dict(json.loads(configmap["data"]["contract.json"]))


def test_a_new_job_starts_from_the_latest_checkpoint_of_the_one_it_names(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns = namespace
    for name in ("old", "new"):
        create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob("old", suspend=True))
    wait_condition(kube_cluster, ns, "old", "Suspended")
    _report_checkpoint(kube_cluster, ns, "old", LATEST)

    create(kube_cluster, ns, trainjob("new", suspend=True, resumeFrom={"trainJob": "old"}))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", "new-0"), T_CREATE, "RayJob new-0")
    contract = _contract(kube_cluster, ns, "new")
    assert contract["resumeFrom"] == LATEST
    assert str(contract["runName"]).startswith("new-")
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", "new") or {})["status"]
    assert status["resumedFrom"] == LATEST
    # The old job's own contract does not carry the key at all.
    assert "resumeFrom" not in _contract(kube_cluster, ns, "old")

    # Recorded: the old job may go, and the source can no longer be changed.
    kube_cluster.kubectl("delete", "trainjobs.raytrain.dev", "old", "-n", ns, "--wait=false")
    change = json.dumps({"spec": {"resumeFrom": {"trainJob": "other"}}})
    refused = kube_cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", "new", "-n", ns, "--type=merge", "-p", change,
        check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "spec.resumeFrom cannot change once the job has started" in refused.stderr


def test_a_job_that_names_a_missing_trainjob_stalls_until_it_has_a_checkpoint(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns = namespace
    for name in ("orphan", "later"):
        create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob("orphan", suspend=True, resumeFrom={"trainJob": "later"}))
    stalled = wait_condition(kube_cluster, ns, "orphan", "Stalled")
    assert stalled["reason"] == "ResumeSourceNotFound", stalled
    assert "spec.resumeFrom.trainJob: TrainJob 'later' does not exist" in stalled["message"]
    assert names(kube_cluster, ns, "rayjobs.ray.io", "raytrain.dev/trainjob=orphan") == []

    create(kube_cluster, ns, trainjob("later", suspend=True))
    stalled = wait_for(
        lambda: (
            (c := wait_condition(kube_cluster, ns, "orphan", "Stalled"))["reason"]
            == "ResumeSourceNotReady"
            and c
        ),
        T_CREATE,
        "orphan waiting for later's checkpoint",
    )
    assert "has no checkpoint yet" in stalled["message"]
    assert names(kube_cluster, ns, "rayjobs.ray.io", "raytrain.dev/trainjob=orphan") == []

    _report_checkpoint(kube_cluster, ns, "later", LATEST)
    wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", "orphan-0"), T_CREATE, "RayJob orphan-0"
    )
    assert _contract(kube_cluster, ns, "orphan")["resumeFrom"] == LATEST
