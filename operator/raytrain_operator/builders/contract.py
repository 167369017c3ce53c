"""The runtime contract for one attempt of a TrainJob (docs/runtime-contract.md).

`build_contract` maps the TrainJob onto the `raytrain_contract` model that the runtime parses
with; `render_contract` is its JSON document. Both are public and pure: the operator renders
the document into the `<name>-contract` ConfigMap, and the CLI's local mode renders the same
document without a cluster.
"""

from __future__ import annotations

import posixpath
from typing import Any

from raytrain_contract import (
    CONTRACT_DIR,
    CONTRACT_KEY,
    CONTRACT_PATH,
    CONTRACT_VERSION,
    DEFAULT_TORCH_TIMEOUT_SECONDS,
    CheckpointSettings,
    CodeSnapshot,
    Contract,
    Dataset,
    FailureSettings,
    PvcStorage,
    S3Storage,
    Scaling,
    Storage,
    TorchSettings,
    TrainJobRef,
    TuneScheduler,
    TuneSettings,
    dump_contract,
    to_json,
)
from raytrain_contract.api.v1alpha1 import (
    API_VERSION,
    GPU_RESOURCE_NAME,
    NVIDIA_GPU,
    RAY_ACCELERATOR_RESOURCES,
    CheckpointVerify,
    FailureSpec,
    TrainJob,
    TrainJobSpec,
)
from raytrain_contract.meta import Meta, child_metadata
from raytrain_contract.pods import run_name
from raytrain_operator.builders import quantities
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.builders.names import contract_configmap_name

__all__ = [
    "CONTRACT_DIR",
    "CONTRACT_KEY",
    "CONTRACT_PATH",
    "CONTRACT_VERSION",
    "build_contract",
    "build_contract_configmap",
    "gpu_resource_name",
    "gpus_per_worker",
    "ray_resources_per_worker",
    "render_contract",
    "storage_of",
    "torch_backend",
]


def _gpu_by_name(spec: TrainJobSpec) -> tuple[str, int] | None:
    """The GPU resourcesPerWorker names in Kubernetes' terms (`nvidia.com/gpu: 2`), if any."""
    res = spec.scaling.resources_per_worker
    for name, amount in (res.kubernetes if res is not None else {}).items():
        if GPU_RESOURCE_NAME.match(name):
            return name, int(amount)
    return None


def gpu_resource_name(spec: TrainJobSpec) -> str:
    """The Kubernetes resource of the workers' GPUs: nvidia.com/gpu unless another is named."""
    named = _gpu_by_name(spec)
    return named[0] if named is not None else NVIDIA_GPU


def gpus_per_worker(spec: TrainJobSpec) -> int:
    """GPUs of one worker: resourcesPerWorker.gpu (or the GPU by its Kubernetes name), else 1
    with useGpu, else 0."""
    res = spec.scaling.resources_per_worker
    if res is not None and res.gpu is not None:
        return res.gpu
    named = _gpu_by_name(spec)
    if named is not None:
        return named[1]
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
    # KubeRay offers these devices to Ray under Ray's names; each worker asks for its share.
    for name, amount in (res.kubernetes if res is not None else {}).items():
        if name in RAY_ACCELERATOR_RESOURCES and int(amount):
            out[RAY_ACCELERATOR_RESOURCES[name]] = float(amount)
    return out


def torch_backend(spec: TrainJobSpec) -> str:
    if spec.torch is not None and spec.torch.backend is not None:
        return spec.torch.backend.value
    return "nccl" if gpus_per_worker(spec) > 0 else "gloo"


#: The message of an S3 endpoint with credentials in it (the CRD's rule says the same).
ENDPOINT_CREDENTIALS = (
    "spec.storage.s3.endpoint must not hold credentials (user:password@ before the host): the "
    "endpoint is copied into the contract ConfigMap and a plain environment variable; give "
    "the scheme and host only and put the keys in the Secret named by "
    "spec.storage.s3.credentialsSecret"
)


def check_s3_endpoint(spec: TrainJobSpec) -> None:
    """Refuse an S3 endpoint with credentials in its URL (`https://KEY:SECRET@host`): it would be
    copied where whoever reads ConfigMaps or pod specs reads it. The CRD refuses it; one stored
    before that stalls the job here. The message never repeats the URL."""
    s3 = spec.storage.s3
    if s3 is not None and s3.endpoint and "@" in s3.endpoint.partition("://")[2].split("/")[0]:
        raise SpecError(ENDPOINT_CREDENTIALS)


def storage_of(spec: TrainJobSpec) -> Storage:
    """Where checkpoints go, as every pod sees it: the PVC's mount (plus subPath) or the S3 URI."""
    pvc, s3 = spec.storage.pvc, spec.storage.s3
    if pvc is not None:
        path = pvc.mount_path.rstrip("/") or "/"
        if pvc.sub_path:
            path = posixpath.join(path, pvc.sub_path.strip("/"))
        return PvcStorage(path=path)
    if s3 is not None:
        check_s3_endpoint(spec)
        return S3Storage(path=s3.uri, endpoint=s3.endpoint, region=s3.region)
    raise SpecError("spec.storage: set exactly one of storage.pvc or storage.s3")


def failure_settings(failure: FailureSpec | None) -> FailureSettings:
    """spec.failure as the runtime reads it: Ray Train's maxFailures, and the hang watch's
    timeout and onHang (the runtime dumps the ranks' stacks at that timeout)."""
    if failure is None:
        return FailureSettings()
    timeout = failure.hang_timeout_seconds
    return FailureSettings(
        max_failures=failure.max_failures,
        hang_timeout_seconds=float(timeout) if timeout is not None else None,
        on_hang=failure.on_hang.value if failure.on_hang is not None else "Restart",
    )


def _tune(spec: TrainJobSpec) -> TuneSettings | None:
    if spec.tune is None:
        return None
    sched = spec.tune.scheduler
    return TuneSettings(
        param_space=spec.tune.param_space,
        num_samples=spec.tune.num_samples,
        metric=spec.tune.metric,
        mode=spec.tune.mode.value,
        max_concurrent_trials=spec.tune.max_concurrent_trials,
        scheduler=None
        if sched is None
        else TuneScheduler(
            type=sched.type,
            max_t=sched.max_t,
            grace_period=sched.grace_period,
            reduction_factor=sched.reduction_factor,
        ),
    )


def build_contract(
    trainjob: TrainJob, meta: Meta, attempt: int, resume_from: str | None = None
) -> Contract:
    """The contract model for one attempt of a TrainJob; ``resume_from`` is the checkpoint
    spec.resumeFrom resolved to (status.resumedFrom)."""
    spec = trainjob.spec
    scaling = spec.scaling
    checkpoint = spec.checkpoint
    return Contract(
        train_job=TrainJobRef(
            api_version=API_VERSION, namespace=meta.namespace, name=meta.name, uid=meta.uid
        ),
        run_name=run_name(meta.name, meta.uid),
        attempt=attempt,
        entrypoint=spec.entrypoint,
        config=dict(spec.config or {}),
        scaling=Scaling(
            num_workers=scaling.num_workers,
            min_workers=scaling.min_workers,
            max_workers=scaling.max_workers,
            use_gpu=gpus_per_worker(spec) > 0,
            resources_per_worker=ray_resources_per_worker(spec),
            placement_strategy=scaling.placement_strategy.value,
            accelerator_type=scaling.accelerator_type,
        ),
        torch=TorchSettings(
            backend=torch_backend(spec),
            timeout_seconds=spec.torch.timeout_seconds
            if spec.torch is not None
            else DEFAULT_TORCH_TIMEOUT_SECONDS,
        ),
        storage=storage_of(spec),
        checkpoint=CheckpointSettings()
        if checkpoint is None
        else CheckpointSettings(
            num_to_keep=checkpoint.num_to_keep,
            score_attribute=checkpoint.score_attribute,
            score_order=checkpoint.score_order.value if checkpoint.score_order else None,
            verify="sizes" if checkpoint.verify == CheckpointVerify.SIZES else "checksums",
        ),
        failure=failure_settings(spec.failure),
        datasets={
            name: Dataset(uri=ds.uri, format=ds.format.value, split=ds.split)
            for name, ds in (spec.datasets or {}).items()
        },
        tune=_tune(spec),
        resume_from=resume_from,
        code=None
        if spec.code is None
        else CodeSnapshot(uri=spec.code.uri, sha256=spec.code.sha256),
    )


def render_contract(
    trainjob: TrainJob, meta: Meta, attempt: int, resume_from: str | None = None
) -> dict[str, Any]:
    """The contract document (JSON-ready) for one attempt of a TrainJob."""
    return dump_contract(build_contract(trainjob, meta, attempt, resume_from))


def build_contract_configmap(
    trainjob: TrainJob, meta: Meta, attempt: int, resume_from: str | None = None
) -> dict[str, Any]:
    """The ConfigMap `<name>-contract` holding the document as `contract.json`."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(meta, contract_configmap_name(meta.name), attempt),
        "data": {CONTRACT_KEY: to_json(build_contract(trainjob, meta, attempt, resume_from))},
    }
