"""The hardened pods as KubeRay really builds them, admitted under the restricted Pod Security
Standard, and the submitter pod that `raytrain logs` reads.

The namespace enforces `restricted`, so the API server refuses any pod (KubeRay's head and
workers, the autoscaler sidecar, the init container KubeRay injects, the submitter Job's pod)
that runs as root, keeps a capability, allows privilege escalation or lacks a seccomp profile:
a pod that exists here passed. Under KWOK nothing executes: what SIGTERM does to these pods is
for the real-node suite.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import T_KUBERAY, crds, create, get, operator, secret, trainjob  # noqa: F401 - fixtures, used by name

from raytrain import driverlog
from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES, shm_size_limit


def _pods(cluster: KubeCluster, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("pods", "-n", ns, "-l", selector)["items"]
    return items


def _restricted(pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    ctx = spec["securityContext"]
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == 1000, ctx
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, ctx
    assert spec["shareProcessNamespace"] is True
    assert spec["terminationGracePeriodSeconds"] == 120
    for c in spec["containers"] + spec.get("initContainers", []):
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, c["name"]
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], c["name"]


@pytest.mark.usefixtures("operator")
def test_kuberays_pods_pass_the_restricted_standard_and_logs_finds_the_submitter(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    ns, name = namespace, "hardened"
    kube_cluster.kubectl(
        "label", "namespace", ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )  # fmt: skip
    # the namespace refuses a pod without the hardening, so a pod that exists here has it
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "c", "image": "raytrain/trainer-runtime:0.1.0"}]},
    }
    refused = kube_cluster.kubectl(
        "create", "--dry-run=server", "-n", ns, "-f", "-", input=json.dumps(plain), check=False
    )
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr
    create(kube_cluster, ns, secret(f"{name}-s3"))
    # elastic, so KubeRay adds its autoscaler sidecar to the head pod
    scaling = {"minWorkers": 1, "maxWorkers": 2, "resourcesPerWorker": {"memory": "1Gi"}}
    create(kube_cluster, ns, trainjob(name, scaling=scaling))

    def ray_pods() -> list[dict[str, Any]] | None:
        pods = _pods(kube_cluster, ns, f"raytrain.dev/trainjob={name}")
        roles = sorted(p["metadata"]["labels"]["raytrain.dev/role"] for p in pods)
        running = all(p["status"].get("phase") == "Running" for p in pods)
        return pods if roles == ["head", "submitter", "worker"] and running else None

    pods = wait_for(ray_pods, T_KUBERAY, "head, worker and submitter pods admitted and Running")
    by_role = {p["metadata"]["labels"]["raytrain.dev/role"]: p for p in pods}
    for pod in pods:
        _restricted(pod)

    head = by_role["head"]
    assert "autoscaler" in [c["name"] for c in head["spec"]["containers"]]
    worker = by_role["worker"]
    assert worker["spec"].get("initContainers"), "KubeRay injects wait-gcs-ready"
    # The head's default memory and the worker's 1Gi, each sized the way the builder sizes it.
    head_shm = shm_size_limit(DEFAULT_HEAD_RESOURCES, "spec.head.resources")
    assert head_shm == "1639Mi", head_shm  # 40 % of the 4Gi default
    for pod, size in ((head, head_shm), (worker, "410Mi")):
        ray = pod["spec"]["containers"][0]
        (mount,) = [m for m in ray["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
        # ours, not KubeRay's `shared-mem` sized to the whole memory limit
        assert volume == {
            "name": "raytrain-shm",
            "emptyDir": {"medium": "Memory", "sizeLimit": size},
        }

    submitter = by_role["submitter"]
    (container,) = submitter["spec"]["containers"]
    # KubeRay wrote its command into our template's container
    assert container["name"] == "ray-job-submitter"
    assert "ray job submit" in " ".join(container["command"] + container.get("args", []))
    assert submitter["spec"]["automountServiceAccountToken"] is False

    # what `raytrain logs` selects is that pod
    rayjob = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]["rayJobName"]
    candidates = _pods(kube_cluster, ns, driverlog.submitter_selector(rayjob))
    picked = driverlog.pick_submitter_pod(candidates, rayjob)
    assert picked is not None
    assert picked["metadata"]["name"] == submitter["metadata"]["name"]
    assert driverlog.container_state(picked, container["name"]).started
