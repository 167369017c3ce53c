"""What spec.scaling and spec.network make of a worker pod: its container resources, the Ray
custom resources of its group, and where the scheduler places it (GPU product, placement
strategy). The pod templates themselves are built in builders/pods.py.
"""

from __future__ import annotations

import copy
from typing import Any

from raytrain_contract.api.v1alpha1 import (
    NVIDIA_GPU,
    NetworkProfile,
    PlacementStrategy,
    TrainJobSpec,
)
from raytrain_contract.meta import LABEL_ROLE, LABEL_TRAINJOB, Meta
from raytrain_operator.builders import quantities
from raytrain_operator.builders.contract import gpu_resource_name, gpus_per_worker
from raytrain_operator.builders.errors import SpecError

GPU_RESOURCE = NVIDIA_GPU
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: Ray's resource for an accelerator type (`ray.util.accelerators`, ScalingConfig).
RAY_ACCELERATOR_PREFIX = "accelerator_type:"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"

#: What each network profile adds to a worker pod: its device resource and NCCL's environment
#: (raytrain_contract/api/v1alpha1/scaling.py, NetworkSpec, says why each variable is set).
NETWORK_DEVICE = {
    NetworkProfile.INFINIBAND: "rdma/ib",
    NetworkProfile.EFA: "vpc.amazonaws.com/efa",
}


def _scaled(name: str, amount: int | str, per_pod: int) -> str:
    """One resourcesPerWorker amount given by its Kubernetes name, times workersPerPod."""
    field = f"spec.scaling.resourcesPerWorker.{name}"
    value = quantities.parse(amount, field) * per_pod
    if "/" in name:
        return quantities.decimal_string(value)
    return quantities.memory_string(value)


def _scaling_resources(spec: TrainJobSpec) -> dict[str, tuple[str, str]]:
    """Worker pod amounts from scaling and network: resource -> (amount, the field it came from)."""
    res = spec.scaling.resources_per_worker
    per_pod = spec.scaling.workers_per_pod
    field = "spec.scaling.resourcesPerWorker"
    cpu = quantities.parse(
        res.cpu if res is not None and res.cpu is not None else 1, f"{field}.cpu"
    )
    amounts: dict[str, tuple[str, str]] = {
        "cpu": (quantities.cpu_string(cpu * per_pod), f"{field}.cpu")
    }
    if res is not None and res.memory is not None:
        memory = quantities.parse(res.memory, f"{field}.memory")
        amounts["memory"] = (quantities.memory_string(memory * per_pod), f"{field}.memory")
    for name, amount in (res.kubernetes if res is not None else {}).items():
        amounts[name] = (_scaled(name, amount, per_pod), f"{field}.{name}")
    gpus = gpus_per_worker(spec)
    gpu_name = gpu_resource_name(spec)
    if gpus and gpu_name not in amounts:
        source = (
            f"{field}.gpu" if res is not None and res.gpu is not None else "spec.scaling.useGpu"
        )
        amounts[gpu_name] = (str(gpus * per_pod), source)
    network = spec.network
    if network is not None:
        device = NETWORK_DEVICE[network.profile]
        if device in amounts:
            raise SpecError(
                f"spec.network.profile: {network.profile.value} adds {device} to every worker "
                f"pod, and {amounts[device][1]} sets it too; remove it from resourcesPerWorker "
                "(spec.network.devicesPerPod sets how many) or remove spec.network"
            )
        amounts[device] = (str(network.devices_per_pod), "spec.network.devicesPerPod")
    return amounts


def worker_resources(spec: TrainJobSpec) -> dict[str, Any]:
    """Container resources of one worker pod: resourcesPerWorker x workersPerPod, the network
    profile's devices, then workerTemplate.resources for any other resource (a name both set is
    refused) and its DRA claims."""
    ours = _scaling_resources(spec)
    amounts = {name: amount for name, (amount, _) in ours.items()}
    out: dict[str, Any] = {"requests": dict(amounts), "limits": dict(amounts)}
    theirs = (spec.worker_template.resources if spec.worker_template else None) or {}
    for kind in ("requests", "limits"):
        for name, amount in (theirs.get(kind) or {}).items():
            if name in ours:
                raise SpecError(
                    f"spec.workerTemplate.resources.{kind}.{name}: {amount!r} conflicts with "
                    f"{ours[name][1]}, which sets {name} of the workers; set it in one place "
                    "only (resourcesPerWorker for what each worker needs)"
                )
            out[kind][name] = amount
    if theirs.get("claims"):
        out["claims"] = copy.deepcopy(theirs["claims"])
    return out


def custom_group_resources(spec: TrainJobSpec) -> dict[str, str]:
    """Ray custom resources of one worker pod (KubeRay's group-level `resources`), exact, and the
    `accelerator_type:<acceleratorType>` resource that Ray Train asks every worker for (0.001
    each) when scaling.acceleratorType is set: Ray detects its own, different, names only on
    real GPUs (`A100`), so the group offers the one the node label and the contract use."""
    res = spec.scaling.resources_per_worker
    per_pod = spec.scaling.workers_per_pod
    custom = (res.custom if res is not None else None) or {}
    out = {
        name: quantities.decimal_string(quantities.exact(amount) * per_pod)
        for name, amount in custom.items()
    }
    if spec.scaling.accelerator_type:
        out[f"{RAY_ACCELERATOR_PREFIX}{spec.scaling.accelerator_type}"] = "1"
    return out


def placement_affinity(spec: TrainJobSpec, meta: Meta) -> dict[str, Any]:
    """Affinity derived from scaling: GPU product and the placement strategy of workers."""
    affinity: dict[str, Any] = {}
    if spec.scaling.accelerator_type:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": GPU_PRODUCT_LABEL,
                                "operator": "In",
                                "values": [spec.scaling.accelerator_type],
                            }
                        ]
                    }
                ]
            }
        }
    term = {
        "labelSelector": {"matchLabels": {LABEL_TRAINJOB: meta.name, LABEL_ROLE: "worker"}},
        "topologyKey": HOSTNAME_TOPOLOGY,
    }
    strategy = spec.scaling.placement_strategy
    if strategy is PlacementStrategy.STRICT_SPREAD:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    elif strategy is PlacementStrategy.STRICT_PACK:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    elif strategy is PlacementStrategy.PACK:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    return affinity


def spread_constraints(spec: TrainJobSpec, meta: Meta) -> list[dict[str, Any]]:
    if spec.scaling.placement_strategy is not PlacementStrategy.SPREAD:
        return []
    return [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_TOPOLOGY,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {LABEL_TRAINJOB: meta.name, LABEL_ROLE: "worker"}},
        }
    ]


def merge_affinity(ours: dict[str, Any], theirs: dict[str, Any] | None) -> dict[str, Any]:
    """Both must hold: required node terms are ANDed, every other list is concatenated."""
    merged = copy.deepcopy(theirs or {})
    for kind, part in ours.items():
        target = merged.setdefault(kind, {})
        for when, value in part.items():
            if kind == "nodeAffinity" and when == "requiredDuringSchedulingIgnoredDuringExecution":
                ours_expr = value["nodeSelectorTerms"][0]["matchExpressions"]
                terms = target.get(when, {}).get("nodeSelectorTerms") or [{}]
                for t in terms:
                    t["matchExpressions"] = list(t.get("matchExpressions") or []) + ours_expr
                target[when] = {"nodeSelectorTerms": terms}
            else:
                target[when] = list(target.get(when) or []) + list(value)
    return merged
