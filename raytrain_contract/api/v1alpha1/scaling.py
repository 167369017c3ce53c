"""How many workers a TrainJob runs and what each gets: ScalingConfig, TorchConfig, the network.

WorkerResources checks the Kubernetes resource names the API server cannot see (a map's keys),
so a bad name is refused in the TrainJob's status rather than by the pods' creation.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from raytrain_contract import DEFAULT_TORCH_TIMEOUT_SECONDS
from raytrain_contract.api.v1alpha1.common import (
    GPU_RESOURCE_NAME,
    LABEL_VALUE,
    MAX_CPU,
    MAX_CUSTOM,
    MAX_GPU,
    MAX_MEMORY,
    MIN_MEMORY,
    NVIDIA_GPU,
    RESERVED_RAY_RESOURCES,
    RESOURCE_NAME,
    Model,
    new_field,
    quantity_rule,
    rule,
)


class PlacementStrategy(str, Enum):
    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_PACK = "STRICT_PACK"
    STRICT_SPREAD = "STRICT_SPREAD"


class TorchBackend(str, Enum):
    NCCL = "nccl"
    GLOO = "gloo"


class WorkerResources(Model):
    """Resources of one training worker (Ray Train's resources_per_worker), multiplied by
    workersPerPod in the worker pods' requests and limits. Besides cpu, memory, gpu and custom,
    any Kubernetes resource by its name: `nvidia.com/gpu: 1` (the same as gpu: 1; set one of
    the two), another GPU (`amd.com/gpu`, a MIG slice `nvidia.com/mig-1g.10gb`), `rdma/ib`,
    `vpc.amazonaws.com/efa`, `ephemeral-storage`, `hugepages-2Mi`. Names with a domain take
    whole numbers. Ray sees the GPU as the workers' GPUs (num-gpus), and
    aws.amazon.com/neuroncore and google.com/tpu as its neuron_cores and TPU resources; every
    other name reaches the pods only (Ray does not schedule by it). These names are checked by
    the operator, which refuses a bad one in the TrainJob's status: the API server cannot check
    keys it does not know."""

    model_config = ConfigDict(extra="allow")

    cpu: int | str | None = Field(
        default=None,
        json_schema_extra={
            "maxLength": 64,
            "x-kubernetes-validations": [
                quantity_rule(
                    "spec.scaling.resourcesPerWorker.cpu", "1m", MAX_CPU, 1, 1024, "2 or 500m"
                )
            ],
        },
    )
    """CPU per worker as a Kubernetes quantity (`2`, `500m`), 1m to 1024. Default 1."""
    memory: int | str | None = Field(
        default=None,
        json_schema_extra={
            "maxLength": 64,
            "x-kubernetes-validations": [
                quantity_rule(
                    "spec.scaling.resourcesPerWorker.memory",
                    MIN_MEMORY,
                    MAX_MEMORY,
                    2**20,
                    2**46,
                    "8Gi or 512Mi",
                )
            ],
        },
    )
    """Memory per worker as a Kubernetes quantity (`8Gi`), 1Mi to 64Ti. Unset: no memory
    request."""
    gpu: int | None = Field(default=None, ge=0, le=MAX_GPU)
    """GPUs per worker (`nvidia.com/gpu`). Default 1 when scaling.useGpu is true, else 0."""
    custom: dict[str, Annotated[float, Field(ge=0, le=MAX_CUSTOM)]] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": 16,
            "x-kubernetes-validations": [
                rule(
                    "self.all(k, size(k) <= 63 && k.matches('^[A-Za-z_][A-Za-z0-9_.-]*$'))",
                    "spec.scaling.resourcesPerWorker.custom: a resource name has at most 63 "
                    "letters, digits, '_', '.' or '-' and starts with a letter or '_' "
                    "(e.g. my_fast_disk)",
                ),
                rule(
                    "self.all(k, !(k.lowerAscii() in "
                    + repr(list(RESERVED_RAY_RESOURCES))
                    + ") && !k.lowerAscii().endsWith('gpu'))",
                    "spec.scaling.resourcesPerWorker.custom: CPU, GPU, memory, "
                    "object_store_memory, accelerator names (TPU, NPU, HPU, neuron_cores...) and "
                    "names ending in 'gpu' are not custom resources: set "
                    "resourcesPerWorker.cpu, .memory or .gpu instead",
                ),
                rule(
                    "self.all(k, double(int(self[k] * 10000.0 + 0.5)) / 10000.0 == self[k])",
                    "spec.scaling.resourcesPerWorker.custom: Ray counts resources in steps of "
                    "0.0001; round every amount to at most 4 decimal places",
                ),
            ],
        },
    )
    """Extra Ray custom resources per worker, by name: 0 to 10000, in steps of 0.0001."""

    @model_validator(mode="after")
    def _kubernetes_names(self) -> WorkerResources:
        field = "spec.scaling.resourcesPerWorker"
        gpus: list[str] = ["gpu"] if self.gpu is not None else []
        for name, amount in self.kubernetes.items():
            if not RESOURCE_NAME.match(name) or len(name) > 253:
                raise ValueError(
                    f"{field}: {name!r} is not a resource name; write cpu, memory, gpu, custom "
                    "(Ray resources) or a Kubernetes resource name such as nvidia.com/gpu, "
                    "rdma/ib, vpc.amazonaws.com/efa, ephemeral-storage"
                )
            whole = "/" in name
            if isinstance(amount, bool) or not isinstance(amount, int | str):
                raise ValueError(f"{field}.{name}: {amount!r} is not a quantity; write e.g. 1")
            text = str(amount)
            if whole and not (text.isdigit() and int(text) <= MAX_CUSTOM):
                raise ValueError(
                    f"{field}.{name}: {amount!r} must be a whole number from 0 to {MAX_CUSTOM} "
                    "(Kubernetes counts devices in whole units); write e.g. 1"
                )
            if GPU_RESOURCE_NAME.match(name):
                gpus.append(name)
        if "gpu" in gpus and NVIDIA_GPU in gpus:
            raise ValueError(
                f"{field}: gpu and {NVIDIA_GPU} are the same resource; set one of them"
            )
        if len(gpus) > 1:
            raise ValueError(
                f"{field}: one GPU resource per worker, got {', '.join(sorted(gpus))} (KubeRay "
                "gives Ray the first one only); keep one"
            )
        return self

    @property
    def kubernetes(self) -> dict[str, int | str]:
        """The Kubernetes resources written by name (`nvidia.com/gpu`, `rdma/ib`...)."""
        return dict(self.model_extra or {})


class NetworkProfile(str, Enum):
    INFINIBAND = "infiniband"
    EFA = "efa"


class NetworkSpec(Model):
    """The workers' fast network for NCCL, opt-in. For each worker pod it adds the profile's
    devices to the Ray container's requests and limits (infiniband: `rdma/ib`, the RDMA
    shared device plugin's resource; efa: `vpc.amazonaws.com/efa`, the AWS EFA device plugin's),
    the IPC_LOCK capability (RDMA pins the memory it registers with the NIC, beyond the default
    locked-memory limit; the workers keep `drop: [ALL]` otherwise), and this environment, each
    variable overridden by the same name in workerTemplate.env:
    infiniband: NCCL_IB_DISABLE=0 (use the InfiniBand/RoCE transport even if the image turns it
    off), NCCL_NET=IB (fail when the IB transport cannot start instead of falling back to TCP
    sockets, many times slower), NCCL_DEBUG=WARN (say why a transport failed);
    efa: FI_PROVIDER=efa (libfabric, which NCCL's aws-ofi-nccl plugin uses, takes the EFA
    provider and fails without it instead of using TCP), NCCL_DEBUG=WARN.
    IPC_LOCK is not allowed by the baseline or restricted Pod Security Standards: the worker
    pods then need a namespace that admits privileged pods. The head, which runs no training,
    gets none of this."""

    profile: NetworkProfile
    """infiniband (InfiniBand or RoCE through rdma/ib) or efa (AWS Elastic Fabric Adapter)."""
    devices_per_pod: int = Field(default=1, ge=1, le=32)
    """Devices each worker pod requests: 1 for a shared RDMA device (infiniband); for efa the
    node's EFA interfaces (4 on p4d.24xlarge, 32 on p5.48xlarge)."""


SLICES_NEED_ELASTIC = (
    "spec.scaling.kueueWorkloadSlices resizes an elastic job: set minWorkers and maxWorkers "
    "instead of numWorkers, or remove kueueWorkloadSlices"
)


class ScalingSpec(Model):
    """How many training workers run and what each gets (Ray Train's ScalingConfig)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "!has(self.numWorkers) || (!has(self.minWorkers) && !has(self.maxWorkers))",
                    "spec.scaling: numWorkers cannot be combined with minWorkers/maxWorkers; "
                    "remove numWorkers for an elastic job or min/max for a fixed one",
                ),
                rule(
                    "!has(self.minWorkers) || !has(self.maxWorkers) || "
                    "self.minWorkers <= self.maxWorkers",
                    "spec.scaling.minWorkers must be less than or equal to spec.scaling.maxWorkers",
                ),
                rule(
                    "!has(self.numWorkers) || !has(self.workersPerPod) || "
                    "self.numWorkers % self.workersPerPod == 0",
                    "spec.scaling.numWorkers must be a multiple of spec.scaling.workersPerPod "
                    "so that every pod runs the same number of workers",
                ),
                rule(
                    "!has(self.maxWorkers) || !has(self.workersPerPod) || "
                    "(self.maxWorkers % self.workersPerPod == 0 && "
                    "self.minWorkers % self.workersPerPod == 0)",
                    "spec.scaling.minWorkers and maxWorkers must be multiples of "
                    "spec.scaling.workersPerPod",
                ),
                rule(
                    "!has(self.kueueWorkloadSlices) || !self.kueueWorkloadSlices || "
                    "!has(self.numWorkers)",
                    SLICES_NEED_ELASTIC,
                ),
                rule(
                    "!has(self.acceleratorType) || (has(self.useGpu) && self.useGpu)",
                    "spec.scaling.acceleratorType needs spec.scaling.useGpu: true",
                ),
                rule(
                    "!has(self.acceleratorType) || !has(self.resourcesPerWorker) || "
                    "!has(self.resourcesPerWorker.gpu) || self.resourcesPerWorker.gpu > 0",
                    "spec.scaling.acceleratorType needs GPUs: set "
                    "spec.scaling.resourcesPerWorker.gpu to 1 or more, or remove acceleratorType",
                ),
            ]
        }
    )

    @model_validator(mode="after")
    def _size_set(self) -> ScalingSpec:
        # The CRD says this at spec level (a template may set the size); the operator checks the
        # spec it runs, a template's values merged in.
        if self.num_workers is None and (self.min_workers is None or self.max_workers is None):
            raise ValueError(
                "set numWorkers for a fixed-size job, or both minWorkers and maxWorkers for an "
                "elastic one"
            )
        if self.kueue_workload_slices and self.num_workers is not None:
            raise ValueError(SLICES_NEED_ELASTIC)
        return self

    num_workers: int | None = Field(default=None, ge=1, le=10000)
    """Number of training workers for a fixed-size job (ScalingConfig.num_workers)."""
    min_workers: int | None = Field(default=None, ge=1, le=10000)
    """Fewest workers an elastic job runs with; set together with maxWorkers."""
    max_workers: int | None = Field(default=None, ge=1, le=10000)
    """Most workers an elastic job runs with; set together with minWorkers."""
    kueue_workload_slices: bool | None = new_field()
    """For an elastic job in a Kueue queue (spec.queueName): let Kueue admit it at minWorkers
    and grow it a workload slice at a time, up to maxWorkers, as Ray's autoscaler asks for
    more workers (the RayJob gets `kueue.x-k8s.io/elastic-job: "true"`). Needs Kueue 0.15.2 or
    later with its ElasticJobsViaWorkloadSlices feature gate on. Without it a queued elastic
    job asks Kueue for maxWorkers and runs at that size."""
    use_gpu: bool = False
    """Give each worker GPUs (ScalingConfig.use_gpu)."""
    resources_per_worker: WorkerResources | None = None
    """Resources of each worker; they become pod requests and limits."""
    workers_per_pod: int = Field(default=1, ge=1, le=64)
    """Training workers packed into one worker pod (for example 8 on an 8-GPU node)."""
    accelerator_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE,
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "!self.lowerAscii().endsWith('gpu')",
                    "spec.scaling.acceleratorType must not end in 'gpu' (KubeRay would count "
                    "the Ray resource accelerator_type:<value> as GPUs); write the product as "
                    "the node label nvidia.com/gpu.product shows it, e.g. NVIDIA-A100-SXM4-80GB",
                )
            ]
        },
    )
    """GPU product the workers need, as the node label `nvidia.com/gpu.product` shows it (for
    example `NVIDIA-A100-SXM4-80GB`). The worker pods require nodes with that label value, and
    the worker group offers the Ray resource `accelerator_type:<value>` that Ray Train's
    ScalingConfig(accelerator_type=<value>) asks for, so one name serves both."""
    placement_strategy: PlacementStrategy = PlacementStrategy.PACK
    """How workers are placed: PACK, SPREAD (preferred) or STRICT_PACK, STRICT_SPREAD (required)."""


class TorchSpec(Model):
    """The torch.distributed process group (Ray Train's TorchConfig)."""

    backend: TorchBackend | None = None
    """Collective backend: nccl or gloo. Default nccl with GPUs, gloo without."""
    timeout_seconds: int = Field(default=DEFAULT_TORCH_TIMEOUT_SECONDS, ge=1, le=86400)
    """Seconds to wait for the process group to form."""
