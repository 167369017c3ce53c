"""The local control plane is real: API server version, scheduler + KWOK + KubeRay, and GC."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


def test_api_server_reports_the_pinned_version(kube_cluster: KubeCluster) -> None:
    version = json.loads(kube_cluster.kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"] == kube_cluster.versions["K8S_VERSION"] == "v1.36.3"
    assert (version["major"], version["minor"]) == ("1", "36")


def test_fake_gpu_nodes_are_ready(kube_cluster: KubeCluster) -> None:
    nodes = kube_cluster.get_json("nodes", "-l", "type=kwok")["items"]
    assert nodes, "no fake nodes"
    for node in nodes:
        assert node["status"]["allocatable"][GPU] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert not node["spec"].get("taints")
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]


def _container(name: str, gpus: int) -> dict[str, Any]:
    resources: dict[str, Any] = {"cpu": "1", "memory": "2Gi"}
    if gpus:
        resources[GPU] = str(gpus)
    return {
        "name": name,
        "image": "rayproject/ray:2.58.0",
        "resources": {"requests": resources, "limits": resources},
    }


def _raycluster(name: str, workers: int, gpus_per_worker: int) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [_container("ray-head", 0)]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": {
                        "spec": {"containers": [_container("ray-worker", gpus_per_worker)]}
                    },
                }
            ],
        },
    }


def _pods(cluster: KubeCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return items


def test_raycluster_pods_run_on_fake_gpu_nodes(kube_cluster: KubeCluster, namespace: str) -> None:
    kube_cluster.apply(_raycluster("gpu", workers=2, gpus_per_worker=1), namespace)
    selector = "ray.io/cluster=gpu"

    def all_running() -> list[dict[str, Any]] | None:
        pods = _pods(kube_cluster, namespace, selector)
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 3 and len(running) == 3 else None

    pods = wait_for(all_running, 120, "1 head + 2 worker pods Running")
    gpu_nodes = {n["metadata"]["name"] for n in kube_cluster.get_json("nodes")["items"]}
    kinds = sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in pods)
    assert kinds == ["head", "worker", "worker"]
    for pod in pods:
        assert pod["spec"]["nodeName"] in gpu_nodes
        ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert ready.get("Ready") == "True", pod["metadata"]["name"]
        if pod["metadata"]["labels"]["ray.io/node-type"] == "worker":
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            assert limits[GPU] == "1"

    def cluster_ready() -> dict[str, Any] | None:
        status: dict[str, Any] = kube_cluster.get_json("raycluster", "gpu", "-n", namespace).get(
            "status", {}
        )
        return status if status.get("state") == "ready" else None

    status = wait_for(cluster_ready, 120, "RayCluster state 'ready'")
    assert status.get("readyWorkerReplicas") == 2

    # Deleting the RayCluster garbage-collects its pods (owner references).
    kube_cluster.kubectl("delete", "raycluster", "gpu", "-n", namespace, "--wait=false")
    wait_for(
        lambda: not _pods(kube_cluster, namespace, selector),
        120,
        "the RayCluster's pods to be garbage-collected",
    )


def test_scheduler_counts_gpus(kube_cluster: KubeCluster, namespace: str) -> None:
    # No fake node has 9 GPUs: the scheduler must leave the pod Pending as Unschedulable.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "too-many-gpus"},
        "spec": {"containers": [_container("main", 9)]},
    }
    kube_cluster.apply(pod, namespace)

    def unschedulable() -> bool:
        status = kube_cluster.get_json("pod", "too-many-gpus", "-n", namespace)["status"]
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in status.get("conditions", [])
        )

    wait_for(unschedulable, 60, "PodScheduled=False/Unschedulable")
    pod_now = kube_cluster.get_json("pod", "too-many-gpus", "-n", namespace)
    assert pod_now["status"]["phase"] == "Pending"
    assert not pod_now["spec"].get("nodeName")


def test_garbage_collector_deletes_dependents(kube_cluster: KubeCluster, namespace: str) -> None:
    kube_cluster.kubectl("create", "configmap", "owner", "-n", namespace)
    owner = kube_cluster.get_json("configmap", "owner", "-n", namespace)["metadata"]
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["uid"]}
            ],
        },
        "data": {"k": "v"},
    }
    kube_cluster.apply(child, namespace)
    assert kube_cluster.kubectl("get", "configmap", "child", "-n", namespace).returncode == 0

    kube_cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_for(
        lambda: (
            kube_cluster.kubectl(
                "get", "configmap", "child", "-n", namespace, "--ignore-not-found", "-o", "name"
            ).stdout.strip()
            == ""
        ),
        60,
        "the child ConfigMap to be garbage-collected",
    )
