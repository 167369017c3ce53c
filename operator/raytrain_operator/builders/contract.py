"""The runtime contract: the JSON document the trainer runtime reads (docs/runtime-contract.md).

`render_contract` is public and pure: the operator renders it into the `<name>-contract`
ConfigMap, and the CLI's local mode renders the same document without a cluster.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from raytrain_operator.api.v1alpha1 import API_VERSION, TrainJob, TrainJobSpec
from raytrain_operator.builders import quantities
from raytrain_operator.builders.meta import Meta, child_metadata
from raytrain_operator.builders.names import contract_configmap_name, run_name

CONTRACT_VERSION = 1
CONTRACT_DIR = "/etc/raytrain"
CONTRACT_KEY = "contract.json"
CONTRACT_PATH = f"{CONTRACT_DIR}/{CONTRACT_KEY}"
REPORT_MIN_INTERVAL_SECONDS = 5.0


def gpus_per_worker(spec: TrainJobSpec) -> int:
    """GPUs of one worker: resourcesPerWorker.gpu, else 1 with useGpu, else 0."""
    res = spec.scaling.resources_per_worker
    if res is not None and res.gpu is not None:
        return res.gpu
    return 1 if spec.scaling.use_gpu else 0


def ray_resources_per_worker(spec: TrainJobSpec) -> dict[str, float | int]:
    """resourcesPerWorker in Ray's terms: CPU (float), GPU, memory (bytes), custom names."""
    res = spec.scaling.resources_per_worker
    cpu = quantities.parse(
        res.cpu if res is not None and res.cpu is not None else 1,
        "spec.scaling.resourcesPerWorker.cpu",
    )
    out: dict[str, float | int] = {"CPU": quantities.as_float(cpu)}
    gpu = gpus_per_worker(spec)
    if gpu:
        out["GPU"] = float(gpu)
    if res is not None and res.memory is not None:
        memory = quantities.parse(res.memory, "spec.scaling.resourcesPerWorker.memory")
        out["memory"] = quantities.as_bytes(memory)
    if res is not None and res.custom:
        out.update({name: float(amount) for name, amount in res.custom.items()})
    return out


def torch_backend(spec: TrainJobSpec) -> str:
    if spec.torch is not None and spec.torch.backend is not None:
        return spec.torch.backend.value
    return "nccl" if gpus_per_worker(spec) > 0 else "gloo"


def storage_section(spec: TrainJobSpec) -> dict[str, Any]:
    pvc, s3 = spec.storage.pvc, spec.storage.s3
    if pvc is not None:
        path = pvc.mount_path.rstrip("/") or "/"
        if pvc.sub_path:
            path = posixpath.join(path, pvc.sub_path.strip("/"))
        return {"type": "pvc", "path": path}
    if s3 is not None:
        return {"type": "s3", "path": s3.uri, "endpoint": s3.endpoint, "region": s3.region}
    raise ValueError("spec.storage: set exactly one of storage.pvc or storage.s3")


def render_contract(trainjob: TrainJob, meta: Meta, attempt: int) -> dict[str, Any]:
    """The contract document (version 1) for one attempt of a TrainJob."""
    spec = trainjob.spec
    scaling = spec.scaling
    checkpoint = spec.checkpoint
    tune: dict[str, Any] | None = None
    if spec.tune is not None:
        sched = spec.tune.scheduler
        tune = {
            "paramSpace": spec.tune.param_space,
            "numSamples": spec.tune.num_samples,
            "metric": spec.tune.metric,
            "mode": spec.tune.mode.value,
            "maxConcurrentTrials": spec.tune.max_concurrent_trials,
            "scheduler": None
            if sched is None
            else {
                "type": sched.type,
                "maxT": sched.max_t,
                "gracePeriod": sched.grace_period,
                "reductionFactor": sched.reduction_factor,
            },
        }
    return {
        "contractVersion": CONTRACT_VERSION,
        "trainJob": {
            "apiVersion": API_VERSION,
            "namespace": meta.namespace,
            "name": meta.name,
            "uid": meta.uid,
        },
        "runName": run_name(meta.name, meta.uid),
        "attempt": attempt,
        "entrypoint": spec.entrypoint,
        "config": dict(spec.config or {}),
        "scaling": {
            "numWorkers": scaling.num_workers,
            "minWorkers": scaling.min_workers,
            "maxWorkers": scaling.max_workers,
            "useGpu": gpus_per_worker(spec) > 0,
            "resourcesPerWorker": ray_resources_per_worker(spec),
            "placementStrategy": scaling.placement_strategy.value,
            "acceleratorType": scaling.accelerator_type,
        },
        "torch": {
            "backend": torch_backend(spec),
            "timeoutSeconds": spec.torch.timeout_seconds if spec.torch is not None else 1800,
        },
        "storage": storage_section(spec),
        "checkpoint": {
            "numToKeep": checkpoint.num_to_keep if checkpoint else None,
            "scoreAttribute": checkpoint.score_attribute if checkpoint else None,
            "scoreOrder": checkpoint.score_order.value
            if checkpoint and checkpoint.score_order
            else None,
        },
        "failure": {"maxFailures": spec.failure.max_failures if spec.failure else 0},
        "datasets": {
            name: {"uri": ds.uri, "format": ds.format.value, "split": ds.split}
            for name, ds in (spec.datasets or {}).items()
        },
        "tune": tune,
        "report": {"enabled": True, "minIntervalSeconds": REPORT_MIN_INTERVAL_SECONDS},
    }


def build_contract_configmap(trainjob: TrainJob, meta: Meta, attempt: int) -> dict[str, Any]:
    """The ConfigMap `<name>-contract` holding the document as `contract.json`."""
    document = render_contract(trainjob, meta, attempt)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(meta, contract_configmap_name(meta.name), attempt),
        "data": {CONTRACT_KEY: json.dumps(document, indent=2, sort_keys=True)},
    }
