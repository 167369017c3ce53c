"""The operator's namespace selector on a real API server (the chart's default: namespaces
labelled `raytrain.dev/enabled: "true"`). A TrainJob in a namespace without the label gets
nothing made and a Stalled condition naming the label; labelling the namespace brings its pass
at once, and taking the label away stalls it again with its RayJob left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _wait import wait_for
from conftest import ENABLED_LABEL, KubeCluster
from test_operator import (
    T_CREATE,
    Operator,
    crds,
    create,
    get,
    running_operator,
    secret,
    trainjob,
    wait_condition,
)

pytestmark = pytest.mark.integration
__all__ = ["crds"]  # fixtures used by name

SELECTOR = '{"matchLabels":{"raytrain.dev/enabled":"true"}}'


@pytest.fixture
def selective_operator(
    kube_cluster: KubeCluster,
    namespace: str,
    crds: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Operator]:
    """The operator as the chart runs it by default: with its namespace selector. The test's
    namespace starts without the label."""
    kube_cluster.kubectl("label", "namespace", namespace, f"{ENABLED_LABEL}-")
    # KubeCluster.env copies os.environ when the operator starts.
    monkeypatch.setenv("RAYTRAIN_NAMESPACE_SELECTOR", SELECTOR)
    yield from running_operator(kube_cluster, namespace, tmp_path / "operator.log")


def test_a_namespace_is_managed_only_while_it_carries_the_label(
    kube_cluster: KubeCluster, namespace: str, selective_operator: Operator
) -> None:
    ns = namespace
    create(kube_cluster, ns, secret("digits-s3"))
    create(kube_cluster, ns, trainjob("digits"))
    stalled = wait_condition(kube_cluster, ns, "digits", "Stalled")
    assert stalled["reason"] == "NamespaceNotSelected", stalled
    assert stalled["message"].startswith(
        f"namespace '{ns}' does not match this operator's namespaceSelector "
        "(raytrain.dev/enabled=true), so it manages no TrainJob there"
    ), stalled
    assert f"kubectl label namespace {ns} raytrain.dev/enabled=true" in stalled["message"]
    assert get(kube_cluster, ns, "rayjobs.ray.io", "digits-0") is None
    assert get(kube_cluster, ns, "configmaps", "digits-contract") is None

    # The administrator opts the namespace in: the job's pass comes with the label's event.
    kube_cluster.kubectl("label", "namespace", ns, f"{ENABLED_LABEL}=true")
    wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", "digits-0"),
        timeout=T_CREATE,
        what="the RayJob once the namespace carries the label",
    )
    wait_for(
        lambda: (
            get(kube_cluster, ns, "trainjobs.raytrain.dev", "digits")["status"].get("phase")
            != "Stalled"
        ),
        timeout=T_CREATE,
        what="Stalled to clear",
    )

    # And out again: said at once, and nothing of the job is deleted.
    kube_cluster.kubectl("label", "namespace", ns, f"{ENABLED_LABEL}-")
    again = wait_condition(kube_cluster, ns, "digits", "Stalled")
    assert again["reason"] == "NamespaceNotSelected", again
    assert get(kube_cluster, ns, "rayjobs.ray.io", "digits-0") is not None
    assert "children it made earlier keep running unmanaged" in again["message"]
