"""`python -m raytrain_operator.uninstall` against the real API server: it scales the operator's
Deployment to zero (KWOK runs its pod) and waits for it before stripping the finalizer.

The chart's own hook tests (test_chart_server.py) run it with no operator at all; this one
covers the Deployment calls (the scale subresource, the status read) the unit tests fake.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import T_KUBERAY, crds, create, trainjob

pytestmark = pytest.mark.integration
__all__ = ["crds"]  # fixture

FINALIZER = "kopf.raytrain.dev/finalizer"


def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "operator", "image": "raytrain/operator:stand-in"}],
                    "tolerations": [{"operator": "Exists"}],
                    # A KWOK node runs it; the real node would try the stand-in image for real.
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "raytrain.dev/real-node",
                                                "operator": "DoesNotExist",
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                },
            },
        },
    }


def test_the_hook_stops_the_operator_then_strips_the_finalizer(
    kube_cluster: KubeCluster, namespace: str, crds: None
) -> None:
    ns = namespace
    create(kube_cluster, ns, deployment("operator"))

    def ready() -> bool:
        status = kube_cluster.get_json("deployment", "operator", "-n", ns).get("status") or {}
        return bool(status.get("readyReplicas") == 1)

    wait_for(ready, T_KUBERAY, "the stand-in operator pod to run on a KWOK node")
    doc = trainjob("kept")
    doc["metadata"]["finalizers"] = [FINALIZER]
    create(kube_cluster, ns, doc)

    env = {
        **kube_cluster.env,
        "TRAINJOBS": "removeFinalizers",
        "WATCH_NAMESPACES": ns,
        "TIMEOUT_SECONDS": "30",
        "OPERATOR_DEPLOYMENT": f"{ns}/operator",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "raytrain_operator.uninstall"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        lines[0] == f"scaled deployment {ns}/operator to 0 so the operator stops adding finalizers"
    )
    assert lines[1] == f"removed {FINALIZER} from trainjob {ns}/kept"

    dep = kube_cluster.get_json("deployment", "operator", "-n", ns)
    assert dep["spec"]["replicas"] == 0
    assert (dep.get("status") or {}).get("replicas", 0) == 0
    tj = kube_cluster.get_json("trainjobs.raytrain.dev", "kept", "-n", ns)
    assert tj["metadata"].get("finalizers") in (None, [])
