"""spec.retryPolicy against the real control plane: a user exception the policy retries spends
spec.backoffLimit like any retried failure (a new RayJob per attempt), then fails the job with
BackoffLimitExceeded."""

from __future__ import annotations

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    T_KUBERAY,
    Operator,
    attempt_pods,
    crds,
    create,
    get,
    names,
    operator,
    runtime_report,
    secret,
    trainjob,
    utc_now,
    wait_condition,
)
from test_triage_server import USER_TRACEBACK

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures used by name


def test_a_user_exception_the_policy_retries_spends_the_backoff_limit(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "retried"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    policy = {"classes": {"UserException": True}}
    create(kube_cluster, ns, trainjob(name, backoffLimit=1, retryPolicy=policy))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    wait_for(
        lambda: len(attempt_pods(kube_cluster, ns, name, 0)) >= 3, T_KUBERAY, "attempt 0's pods"
    )
    report = {"phase": "Failed", "attempt": 0, "message": USER_TRACEBACK}
    runtime_report(kube_cluster, ns, name, {**report, "lastUpdatedTime": utc_now()})
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-1"), T_KUBERAY, "RayJob -1")
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert (status["attempt"], status["restarts"]) == (1, 1)
    assert get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None

    runtime_report(kube_cluster, ns, name, {**report, "attempt": 1, "lastUpdatedTime": utc_now()})
    failed = wait_condition(kube_cluster, ns, name, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded", failed
    assert "(UserException:" in failed["message"] and "KeyError" in failed["message"]
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [
        f"{name}-1"
    ]
    # The API server kept the goodput ledger the operator wrote: both clusters, as they ended.
    goodput = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]["goodput"]
    assert [c["outcome"] for c in goodput["clusters"]] == ["Retried", "Failed"], goodput
    assert goodput["allocatedSeconds"] >= 0 and goodput["allocatedGPUSeconds"] == 0
