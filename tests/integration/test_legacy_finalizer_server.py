"""The finalizer of releases before 0.2 comes off through the real API server, and only it.

The operator drops `raytrain.dev/finalizer` with a JSON patch that first tests the entry it
removes, so that a finalizer another controller added meanwhile is never lost: against the
real API server the patch must remove that one entry and nothing else, and when the list moved
since the event was read, the server must refuse the patch and the operator leave the object
for its next event. The handler and the client are the operator's own, built from the test
cluster's kubeconfig; no operator process runs, so nothing else touches the finalizers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from conftest import KubeCluster
from test_operator import crds, create, secret, trainjob

from raytrain_operator import k8s
from raytrain_operator.handlers import legacy
from raytrain_operator.settings import FINALIZER, LEGACY_FINALIZER

pytestmark = pytest.mark.integration
__all__ = ["crds"]  # the module-scoped CRD fixture

OTHER = "example.com/other"
LOG = logging.getLogger("test")


@pytest.fixture
def upgraded(kube_cluster: KubeCluster, namespace: str, crds: None) -> Iterator[str]:
    """A TrainJob as a release before 0.2 left it, with another controller's finalizer around
    ours; its finalizers are taken off at the end so that the namespace can go."""
    name = "upgraded"
    create(kube_cluster, namespace, secret(f"{name}-s3"))
    doc = trainjob(name)
    doc["metadata"]["finalizers"] = [OTHER, LEGACY_FINALIZER, FINALIZER]
    create(kube_cluster, namespace, doc)
    try:
        yield name
    finally:
        kube_cluster.kubectl(
            "patch", "trainjobs.raytrain.dev", name, "-n", namespace, "--type=merge",
            "-p", '{"metadata": {"finalizers": null}}', check=False,
        )  # fmt: skip


def _trainjob(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = cluster.get_json("trainjobs.raytrain.dev", name, "-n", namespace)
    return got


def test_the_handler_takes_off_the_old_finalizer_and_no_other(
    kube_cluster: KubeCluster, namespace: str, upgraded: str, operator_client: None
) -> None:
    seen = _trainjob(kube_cluster, namespace, upgraded)
    meta = kopf.Meta(seen)
    assert legacy._carries_legacy_finalizer(meta=meta)
    legacy.drop_legacy_finalizer(
        type="MODIFIED", namespace=namespace, name=upgraded, meta=meta, logger=LOG
    )
    now = _trainjob(kube_cluster, namespace, upgraded)
    assert now["metadata"]["finalizers"] == [OTHER, FINALIZER]
    assert not legacy._carries_legacy_finalizer(meta=kopf.Meta(now))


def test_a_list_that_moved_since_the_event_is_left_alone(
    kube_cluster: KubeCluster, namespace: str, upgraded: str, operator_client: None
) -> None:
    seen = _trainjob(kube_cluster, namespace, upgraded)["metadata"]["finalizers"]
    # Another controller puts its finalizer first: the old one is no longer where the event
    # showed it.
    moved = ["example.com/first", *seen]
    kube_cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", upgraded, "-n", namespace, "--type=merge",
        "-p", json.dumps({"metadata": {"finalizers": moved}}),
    )  # fmt: skip
    assert not k8s.remove_trainjob_finalizer(namespace, upgraded, seen, LEGACY_FINALIZER)
    assert _trainjob(kube_cluster, namespace, upgraded)["metadata"]["finalizers"] == moved
    # Its next event shows the list as it is now, and then the old finalizer comes off.
    assert k8s.remove_trainjob_finalizer(namespace, upgraded, moved, LEGACY_FINALIZER)
    after = _trainjob(kube_cluster, namespace, upgraded)["metadata"]["finalizers"]
    assert after == ["example.com/first", OTHER, FINALIZER]


def test_a_trainjob_that_is_gone_is_left_alone(
    namespace: str, crds: None, operator_client: None
) -> None:
    assert not k8s.remove_trainjob_finalizer(
        namespace, "never-was", [LEGACY_FINALIZER], LEGACY_FINALIZER
    )
