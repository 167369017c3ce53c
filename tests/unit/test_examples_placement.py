"""Every example TrainJob's workers can be placed, by Kubernetes and then by Ray.

For each TrainJob in examples/*.yaml the builders render the RayJob and the contract. Then:

- Kubernetes: the worker pod template (nodeSelector, required node affinity, resource requests)
  fits one of the fake GPU nodes the test cluster creates (e2e/controlplane/cluster.sh,
  `gpu_nodes`: their labels and allocatable resources are read from that script);
- Ray: every resource Ray Train asks one worker for (its own ScalingConfig computes them from
  the contract, `accelerator_type:<type>` included), times the workers of one pod, is offered
  by that pod's Ray node, as KubeRay starts it: rayStartParams, else the container's limits
  (num-cpus, memory, num-gpus), plus the group's `resources`. A fake node has no GPU for Ray to
  detect, so nothing but what the group offers exists there.

A resource asked for and offered nowhere leaves the workers pending in Ray forever, with every
pod Running.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
from decimal import Decimal
from typing import Any

import pytest
import yaml

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders import quantities
from raytrain_operator.builders.contract import build_contract
from raytrain_operator.builders.pods import GPU_RESOURCE
from raytrain_operator.builders.rayjob import build_rayjob

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "e2e" / "controlplane" / "cluster.sh"
#: Ray counts resources in fixed point with this many units per 1 (RESOURCE_UNIT_SCALING).
RAY_UNITS = 10_000


def kwok_gpu_node() -> dict[str, Any]:
    """The fake GPU node of the test cluster, from the heredoc in cluster.sh's gpu_nodes()."""
    script = CLUSTER_SH.read_text()
    body = re.search(r"^gpu_nodes\(\) \{\n(.*?)^\}", script, re.S | re.M)
    assert body, "gpu_nodes() not found in e2e/controlplane/cluster.sh"
    heredoc = re.search(r"<<EOF\n(.*?)^EOF", body.group(1), re.S | re.M)
    assert heredoc, "no node manifest in gpu_nodes()"
    text = heredoc.group(1).replace("$name", "gpu-node-0")
    node: dict[str, Any] = next(d for d in yaml.safe_load_all(text) if d)
    assert node["kind"] == "Node"
    return node


def trainjobs() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            if doc.get("kind") == "TrainJob":
                found.append(
                    (f"{path.name}:{doc['metadata']['name']}", templates.expand(doc, docs))
                )
    return found


def _matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expression["key"], expression["operator"], expression.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled here")


def node_problems(pod: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """Why the scheduler would not put this pod on this node (labels, taints aside: none)."""
    labels = node["metadata"]["labels"]
    problems = [
        f"nodeSelector {k}={v} (node has {labels.get(k)!r})"
        for k, v in (pod.get("nodeSelector") or {}).items()
        if labels.get(k) != v
    ]
    required = (
        (pod.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required and not any(
        all(_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in required["nodeSelectorTerms"]
    ):
        problems.append(f"required node affinity {required} (node labels {labels})")
    allocatable = node["status"]["allocatable"]
    for container in pod["containers"]:
        for name, amount in (container["resources"].get("requests") or {}).items():
            have = allocatable.get(name, "0")
            if quantities.parse(amount) > quantities.parse(have):
                problems.append(f"requests {name}={amount}, node has {have}")
    return problems


def ray_node_resources(group: dict[str, Any]) -> dict[str, float]:
    """What `ray start` offers on one worker pod, as KubeRay builds its command line."""
    params = group.get("rayStartParams") or {}
    limits = group["template"]["spec"]["containers"][0]["resources"].get("limits") or {}
    requests = group["template"]["spec"]["containers"][0]["resources"].get("requests") or {}
    offered: dict[str, float] = {}
    cpu = params.get("num-cpus") or limits.get("cpu") or requests.get("cpu")
    if cpu is not None:  # KubeRay rounds a quantity up to whole CPUs (Quantity.Value)
        offered["CPU"] = float(math.ceil(quantities.parse(cpu)))
    memory = params.get("memory") or limits.get("memory")
    if memory is not None:
        offered["memory"] = float(quantities.as_bytes(quantities.parse(memory)))
    gpus = params.get("num-gpus") or limits.get(GPU_RESOURCE)
    if gpus is not None:
        offered["GPU"] = float(math.ceil(quantities.parse(gpus)))
    custom = params.get("resources")
    if custom:
        offered.update(json.loads(custom.strip("'\"")))
    for name, amount in (group.get("resources") or {}).items():
        offered[name] = float(quantities.parse(amount))
    return offered


def _units(amount: float) -> int:
    return round(Decimal(repr(amount)) * RAY_UNITS)


def ray_shortfalls(asked: dict[str, float], per_pod: int, offered: dict[str, float]) -> list[str]:
    return [
        f"{name}: {per_pod} x {amount} asked, {offered.get(name, 0)} offered"
        for name, amount in asked.items()
        if amount and per_pod * _units(amount) > _units(offered.get(name, 0.0))
    ]


def _render(doc: dict[str, Any]) -> tuple[TrainJob, dict[str, Any], Any]:
    trainjob = TrainJob.model_validate(doc)
    meta = Meta(name=doc["metadata"]["name"], namespace="default", uid="0" * 32)
    return (
        trainjob,
        build_rayjob(trainjob, meta, 0, suspend=False),
        build_contract(trainjob, meta, 0),
    )


def asked_per_worker(contract: Any) -> dict[str, float]:
    """Ray Train's own per-worker resource request for the contract's scaling section."""
    pytest.importorskip("ray.train", reason="Ray (the runtime extra) computes the request")
    from trainer_runtime.trainer import build_scaling_config

    scaling = build_scaling_config(contract)
    return dict(scaling._resources_per_worker_not_none)


EXAMPLES = trainjobs()


def test_the_examples_include_a_gpu_job_with_an_accelerator_type() -> None:
    assert any(doc["spec"]["scaling"].get("acceleratorType") for _, doc in EXAMPLES)


@pytest.mark.runtime
@pytest.mark.parametrize(("where", "doc"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_example_workers_fit_a_test_cluster_node_and_its_ray_node(
    where: str, doc: dict[str, Any]
) -> None:
    node = kwok_gpu_node()
    trainjob, rayjob, contract = _render(doc)
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert node_problems(group["template"]["spec"], node) == [], where
    asked = asked_per_worker(contract)
    offered = ray_node_resources(group)
    per_pod = trainjob.spec.scaling.workers_per_pod
    assert ray_shortfalls(asked, per_pod, offered) == [], (where, asked, offered)


@pytest.mark.runtime
def test_one_product_name_serves_the_node_label_and_ray() -> None:
    """acceleratorType is the nvidia.com/gpu.product value; the group offers Ray's resource."""
    doc = {
        "metadata": {"name": "a100"},
        "spec": {
            "image": "i",
            "entrypoint": "m:f",
            "scaling": {
                "numWorkers": 16,
                "workersPerPod": 8,
                "useGpu": True,
                "acceleratorType": "NVIDIA-A100-SXM4-80GB",
                "resourcesPerWorker": {"cpu": "3", "custom": {"fast_disk": 1234.5612}},
            },
            "storage": {"s3": {"uri": "s3://bucket/x"}},
        },
    }
    _, rayjob, contract = _render(doc)
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert group["resources"] == {
        "accelerator_type:NVIDIA-A100-SXM4-80GB": "1",
        "fast_disk": "9876.4896",
    }
    asked = asked_per_worker(contract)
    assert asked["accelerator_type:NVIDIA-A100-SXM4-80GB"] == pytest.approx(0.001)
    assert ray_shortfalls(asked, 8, ray_node_resources(group)) == []
    assert node_problems(group["template"]["spec"], kwok_gpu_node()) == []


def test_a_product_the_nodes_do_not_have_is_not_placed() -> None:
    """The checks above can fail: another product finds no node."""
    doc = {
        "metadata": {"name": "h100"},
        "spec": {
            "image": "i",
            "entrypoint": "m:f",
            "scaling": {"numWorkers": 1, "useGpu": True, "acceleratorType": "NVIDIA-H100"},
            "storage": {"s3": {"uri": "s3://bucket/x"}},
        },
    }
    _, rayjob, _ = _render(doc)
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    problems = node_problems(group["template"]["spec"], kwok_gpu_node())
    assert problems and "NVIDIA-H100" in problems[0]
