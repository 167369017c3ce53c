"""Two operator instances on the real API server share one KopfPeering: one works, one waits.

The chart's peering CRDs (charts/raytrain-operator/crds/kopf-peering.yaml) and a KopfPeering in
the test's namespace, as the chart creates them for a namespaced install; both instances run
with `--peering-mode=required`, as the chart's Deployment runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _wait import wait_for
from conftest import REPO, KubeCluster
from test_operator import T_CREATE, Operator, crds, create, get, secret, trainjob

pytestmark = pytest.mark.integration

PEERING_CRDS = REPO / "charts" / "raytrain-operator" / "crds" / "kopf-peering.yaml"
PEERING = ("--peering-mode=required", "--peering-name=raytrain-operator")

__all__ = ["crds"]  # the fixture, used by name


def rayjobs(cluster: KubeCluster, ns: str) -> list[str]:
    return sorted(
        i["metadata"]["name"] for i in cluster.get_json("rayjobs.ray.io", "-n", ns)["items"]
    )


def peer(cluster: KubeCluster, namespace: str, log: Path) -> Operator:
    return Operator(cluster, namespace, log, extra_args=PEERING)


def test_a_second_instance_waits_and_takes_over_when_the_first_leaves(
    kube_cluster: KubeCluster, namespace: str, crds: None, tmp_path: Path
) -> None:
    ns = namespace
    kube_cluster.kubectl("apply", "--server-side", "-f", str(PEERING_CRDS))
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev", "--timeout=60s"
    )
    kube_cluster.apply(
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
         "metadata": {"name": "raytrain-operator"}},
        namespace=ns,
    )  # fmt: skip
    older = peer(kube_cluster, ns, tmp_path / "older.log")
    newer = peer(kube_cluster, ns, tmp_path / "newer.log")
    older.start()
    try:
        newer.start()
        try:
            # The newer start has the higher priority: the older instance pauses.
            wait_for(lambda: "Pausing operations in favour of" in older.since_start(), T_CREATE,
                     "the older instance to pause")  # fmt: skip
            create(kube_cluster, ns, secret("first-s3"))
            create(kube_cluster, ns, trainjob("first"))
            wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", "first-0"), T_CREATE,
                     "the working instance to create the RayJob")  # fmt: skip
            assert rayjobs(kube_cluster, ns) == ["first-0"]
            # Every line about an object (kopf's and the engine's) starts with its
            # "[namespace/name]": the working instance wrote some, the paused one none.
            assert f"[{ns}/first] Created RayJob first-0" in newer.since_start()
            paused = older.since_start().split("Pausing operations in favour of", 1)[1]
            assert f"[{ns}/" not in paused, paused
        finally:
            newer.stop()  # a clean exit takes it out of the peering object
        wait_for(lambda: "Resuming operations after the pause" in older.since_start(), T_CREATE,
                 "the older instance to resume")  # fmt: skip
        create(kube_cluster, ns, secret("second-s3"))
        create(kube_cluster, ns, trainjob("second"))
        wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", "second-0"), T_CREATE,
                 "the remaining instance to take over")  # fmt: skip
        assert rayjobs(kube_cluster, ns) == ["first-0", "second-0"]
    finally:
        older.stop()
        print(f"--- older ---\n{older.tail(120)}\n--- newer ---\n{newer.tail(120)}")
