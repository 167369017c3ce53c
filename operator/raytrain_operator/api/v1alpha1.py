"""The TrainJob API, `raytrain.dev/v1alpha1`: the one source of truth for spec and status.

These models are what the operator parses, and `raytrain_operator.api.crd` turns them into the
CRD's structural schema (descriptions come from the attribute docstrings below, so they are what
`kubectl explain trainjob.spec` prints). Field names mirror the Ray Train API that users know:
ScalingConfig, TorchConfig, RunConfig, CheckpointConfig, FailureConfig, Tune.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict, JsonValue

from raytrain_contract import DEFAULT_TORCH_TIMEOUT_SECONDS

GROUP = "raytrain.dev"
VERSION = "v1alpha1"
KIND = "TrainJob"
PLURAL = "trainjobs"
SINGULAR = "trainjob"
SHORT_NAMES = ["rtj"]
CATEGORIES = ["raytrain", "ml"]
API_VERSION = f"{GROUP}/{VERSION}"

#: Longest TrainJob name: every child name (RayJob `<name>-<attempt>`, KubeRay's RayCluster
#: `<rayjob>-<5 chars>` and its `<raycluster>-head-svc`) must stay within 63 characters.
MAX_NAME_LENGTH = 40

PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}


def _rule(rule: str, message: str, **extra: str) -> JsonValue:
    """One CEL rule; its message names the field and the fix."""
    return {"rule": rule, "message": message, **extra}


class _Model(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="forbid",
        alias_generator=to_camel,
    )


class PlacementStrategy(str, Enum):
    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_PACK = "STRICT_PACK"
    STRICT_SPREAD = "STRICT_SPREAD"


class TorchBackend(str, Enum):
    NCCL = "nccl"
    GLOO = "gloo"


class ScoreOrder(str, Enum):
    MAX = "max"
    MIN = "min"


class DatasetFormat(str, Enum):
    PARQUET = "parquet"
    CSV = "csv"
    JSON = "json"
    NUMPY = "numpy"
    TEXT = "text"


class WorkerResources(_Model):
    """Resources of one training worker (Ray Train's resources_per_worker)."""

    cpu: int | str | None = None
    """CPU per worker as a Kubernetes quantity (`2`, `500m`). Default 1."""
    memory: int | str | None = None
    """Memory per worker as a Kubernetes quantity (`8Gi`). Unset: no memory request."""
    gpu: int | None = Field(default=None, ge=0)
    """GPUs per worker (`nvidia.com/gpu`). Default 1 when scaling.useGpu is true, else 0."""
    custom: dict[str, float] | None = None
    """Extra Ray custom resources per worker, by name."""


class ScalingSpec(_Model):
    """How many training workers run and what each gets (Ray Train's ScalingConfig)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "has(self.numWorkers) || (has(self.minWorkers) && has(self.maxWorkers))",
                    "spec.scaling: set numWorkers for a fixed-size job, or both minWorkers and "
                    "maxWorkers for an elastic one",
                ),
                _rule(
                    "!has(self.numWorkers) || (!has(self.minWorkers) && !has(self.maxWorkers))",
                    "spec.scaling: numWorkers cannot be combined with minWorkers/maxWorkers; "
                    "remove numWorkers for an elastic job or min/max for a fixed one",
                ),
                _rule(
                    "!has(self.minWorkers) || !has(self.maxWorkers) || "
                    "self.minWorkers <= self.maxWorkers",
                    "spec.scaling.minWorkers must be less than or equal to spec.scaling.maxWorkers",
                ),
                _rule(
                    "!has(self.numWorkers) || !has(self.workersPerPod) || "
                    "self.numWorkers % self.workersPerPod == 0",
                    "spec.scaling.numWorkers must be a multiple of spec.scaling.workersPerPod "
                    "so that every pod runs the same number of workers",
                ),
                _rule(
                    "!has(self.maxWorkers) || !has(self.workersPerPod) || "
                    "(self.maxWorkers % self.workersPerPod == 0 && "
                    "self.minWorkers % self.workersPerPod == 0)",
                    "spec.scaling.minWorkers and maxWorkers must be multiples of "
                    "spec.scaling.workersPerPod",
                ),
                _rule(
                    "!has(self.acceleratorType) || (has(self.useGpu) && self.useGpu)",
                    "spec.scaling.acceleratorType needs spec.scaling.useGpu: true",
                ),
            ]
        }
    )

    num_workers: int | None = Field(default=None, ge=1, le=10000)
    """Number of training workers for a fixed-size job (ScalingConfig.num_workers)."""
    min_workers: int | None = Field(default=None, ge=1, le=10000)
    """Fewest workers an elastic job runs with; set together with maxWorkers."""
    max_workers: int | None = Field(default=None, ge=1, le=10000)
    """Most workers an elastic job runs with; set together with minWorkers."""
    use_gpu: bool = False
    """Give each worker GPUs (ScalingConfig.use_gpu)."""
    resources_per_worker: WorkerResources | None = None
    """Resources of each worker; they become pod requests and limits."""
    workers_per_pod: int = Field(default=1, ge=1, le=64)
    """Training workers packed into one worker pod (for example 8 on an 8-GPU node)."""
    accelerator_type: str | None = Field(default=None, max_length=128)
    """GPU product the workers need (value of the node label `nvidia.com/gpu.product`)."""
    placement_strategy: PlacementStrategy = PlacementStrategy.PACK
    """How workers are placed: PACK, SPREAD (preferred) or STRICT_PACK, STRICT_SPREAD (required)."""


class TorchSpec(_Model):
    """The torch.distributed process group (Ray Train's TorchConfig)."""

    backend: TorchBackend | None = None
    """Collective backend: nccl or gloo. Default nccl with GPUs, gloo without."""
    timeout_seconds: int = Field(default=DEFAULT_TORCH_TIMEOUT_SECONDS, ge=1, le=86400)
    """Seconds to wait for the process group to form."""


class PVCStorage(_Model):
    """A ReadWriteMany PersistentVolumeClaim mounted at the same path on head and every worker."""

    claim_name: str = Field(min_length=1, max_length=253)
    """PersistentVolumeClaim in the TrainJob's namespace; it must allow ReadWriteMany."""
    mount_path: str = Field(default="/mnt/raytrain", pattern=r"^/.*")
    """Where the claim is mounted in every pod."""
    sub_path: str | None = None
    """Directory inside the claim that holds this job's runs."""


class SecretKeys(_Model):
    """A Secret holding S3 credentials."""

    name: str = Field(min_length=1, max_length=253)
    """Name of the Secret in the TrainJob's namespace."""
    access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    """Key of the access key id in the Secret."""
    secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"
    """Key of the secret access key in the Secret."""
    session_token_key: str | None = None
    """Key of an optional session token in the Secret."""


class S3Storage(_Model):
    """An S3 (or S3-compatible) location for checkpoints and results."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!(has(self.credentialsSecret) && has(self.serviceAccountName))",
                    "spec.storage.s3: set credentialsSecret or serviceAccountName (IRSA), not both",
                )
            ]
        }
    )

    uri: str = Field(
        max_length=1024,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$')",
                    "spec.storage.s3.uri must look like s3://bucket/prefix "
                    "(lower-case bucket name, 3-63 characters)",
                )
            ]
        },
    )
    """Bucket and prefix, `s3://bucket/prefix`."""
    endpoint: str | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "self.matches('^https?://[^/]+/?$')",
                    "spec.storage.s3.endpoint must be a URL such as http://minio.storage:9000 "
                    "(scheme and host, no path)",
                )
            ]
        },
    )
    """Endpoint of an S3-compatible store (MinIO, Ceph); unset for AWS S3."""
    region: str | None = None
    """Region of the bucket."""
    credentials_secret: SecretKeys | None = None
    """Secret with an access key; its values reach the pods as env, never the status."""
    service_account_name: str | None = None
    """Service account whose cloud identity (IRSA, workload identity) reaches the bucket."""


class StorageSpec(_Model):
    """Where checkpoints live (RunConfig.storage_path). Required: no TrainJob trains on
    ephemeral storage. Set exactly one of pvc or s3."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "(has(self.pvc) ? 1 : 0) + (has(self.s3) ? 1 : 0) == 1",
                    "spec.storage: set exactly one of storage.pvc (a ReadWriteMany claim) or "
                    "storage.s3 (a bucket URI)",
                )
            ]
        }
    )

    pvc: PVCStorage | None = None
    """A ReadWriteMany claim mounted in every pod."""
    s3: S3Storage | None = None
    """An S3 or S3-compatible bucket."""


class CheckpointSpec(_Model):
    """Which checkpoints are kept (Ray Train's CheckpointConfig)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    "!has(self.scoreOrder) || has(self.scoreAttribute)",
                    "spec.checkpoint.scoreOrder needs spec.checkpoint.scoreAttribute "
                    "(the reported metric to rank checkpoints by)",
                )
            ]
        }
    )

    num_to_keep: int | None = Field(default=None, ge=1)
    """Checkpoints kept; older (or worse-scoring) ones are removed by Ray Train. Unset: keep all."""
    score_attribute: str | None = Field(default=None, min_length=1, max_length=64)
    """Reported metric that ranks checkpoints."""
    score_order: ScoreOrder | None = None
    """max or min: whether a higher or a lower score is better. Default max."""


class FailureSpec(_Model):
    """Worker-group restarts inside one Ray cluster (Ray Train's FailureConfig)."""

    max_failures: int = Field(default=0, ge=-1)
    """Worker-group failures tolerated before the attempt fails; -1 retries forever."""


class DatasetSpec(_Model):
    """A named input read with Ray Data and sharded across the workers."""

    uri: str = Field(min_length=1)
    """Location: `s3://bucket/path`, or a path on the job's PVC or in the image."""
    format: DatasetFormat = DatasetFormat.PARQUET
    """File format: parquet, csv, json, numpy or text."""
    split: bool = True
    """Shard it across workers (true) or give every worker all of it (false)."""


class TuneScheduler(_Model):
    """Trial scheduler for the search."""

    type: str = Field(default="ASHA", pattern="^(ASHA|FIFO)$")
    """ASHA (early-stops weak trials) or FIFO."""
    max_t: int | None = Field(default=None, ge=1)
    """Most training iterations a trial runs (ASHA)."""
    grace_period: int = Field(default=1, ge=1)
    """Iterations a trial runs before it can be stopped (ASHA)."""
    reduction_factor: float = Field(default=2.0, gt=1)
    """Fraction of trials kept at each rung is 1/reductionFactor (ASHA)."""


class TuneSpec(_Model):
    """Optional hyperparameter search with Ray Tune; each trial is a TorchTrainer run."""

    param_space: dict[str, Any] = Field(json_schema_extra=PRESERVE)
    """Search space merged into config: per key `{uniform: [lo, hi]}`, `{loguniform: [lo, hi]}`,
    `{randint: [lo, hi]}`, `{choice: [...]}`, `{grid: [...]}` or a plain value."""
    num_samples: int = Field(default=1, ge=1, le=10000)
    """Trials to run (each grid combination counts once per sample)."""
    metric: str = Field(min_length=1)
    """Reported metric the search optimises."""
    mode: ScoreOrder = ScoreOrder.MAX
    """max or min."""
    max_concurrent_trials: int | None = Field(default=None, ge=1)
    """Trials running at once; unset lets Ray decide from the cluster's resources."""
    scheduler: TuneScheduler | None = None
    """Trial scheduler; default FIFO."""


class PodOverrides(_Model):
    """Pod-level settings for the head or the worker pods."""

    resources: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE)
    """Container resources (requests/limits). For workers, scaling.resourcesPerWorker sets them."""
    node_selector: dict[str, str] | None = None
    """Node labels the pods must match."""
    tolerations: list[dict[str, Any]] | None = Field(default=None)
    """Pod tolerations."""
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE)
    """Pod affinity; merged with the affinity derived from scaling."""
    priority_class_name: str | None = None
    """PriorityClass of the pods."""
    env: list[dict[str, Any]] | None = None
    """Extra container environment variables (core/v1 EnvVar)."""
    env_from: list[dict[str, Any]] | None = None
    """Extra container environment sources (core/v1 EnvFromSource)."""
    service_account_name: str | None = None
    """Service account of the pods. Default: the per-job account the operator creates."""
    labels: dict[str, str] | None = None
    """Extra pod labels."""
    annotations: dict[str, str] | None = None
    """Extra pod annotations."""
    termination_grace_period_seconds: int | None = Field(default=None, ge=1, le=86400)
    """Seconds a pod has to stop after a delete, a drain or a suspend before it is killed.
    Default 120: room for a preStop hook, for example to finish a checkpoint upload; pods that
    have nothing left to do stop sooner."""


class TrainJobSpec(_Model):
    """Desired state of a TrainJob."""

    image: str = Field(min_length=1, max_length=512)
    """Trainer runtime image: ours, or one built FROM ours with the user's code and packages."""
    image_pull_policy: str | None = Field(default=None, pattern="^(Always|IfNotPresent|Never)$")
    """Image pull policy of every container."""
    entrypoint: str = Field(
        max_length=512,
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    r"self.matches('^([A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*"
                    r"|[^:]+\\.py):[A-Za-z_][A-Za-z0-9_]*$')",
                    "spec.entrypoint must be module:function (my_pkg.train:train_loop) or "
                    "path/to/script.py:function",
                )
            ]
        },
    )
    """The train_loop_per_worker: `module:function` or `path/to/script.py:function`."""
    config: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE)
    """Free-form object passed to the loop as train_loop_config. `epochs` (or `num_epochs`)
    lets the runtime report progress and an ETA."""
    ray_version: str = "2.60.0"
    """Ray version inside the image (KubeRay's rayVersion)."""
    scaling: ScalingSpec
    """Workers and their resources (ScalingConfig)."""
    torch: TorchSpec | None = None
    """Process group settings (TorchConfig)."""
    storage: StorageSpec
    """Checkpoint storage (RunConfig.storage_path): exactly one of pvc or s3."""
    checkpoint: CheckpointSpec | None = None
    """Checkpoint retention (CheckpointConfig)."""
    failure: FailureSpec | None = None
    """Worker-group restarts inside one cluster (FailureConfig)."""
    backoff_limit: int = Field(default=0, ge=0, le=100)
    """Cluster-level retries: each is a new Ray cluster that resumes from the latest checkpoint."""
    datasets: dict[str, DatasetSpec] | None = None
    """Named inputs read with Ray Data and handed to the workers as shards."""
    tune: TuneSpec | None = None
    """Optional hyperparameter search (Ray Tune)."""
    head: PodOverrides | None = None
    """Overrides for the Ray head pod."""
    worker_template: PodOverrides | None = None
    """Overrides for the worker pods."""
    suspend: bool = False
    """Suspend the job: the runtime checkpoints, the Ray cluster is removed; false resumes it."""
    queue_name: str | None = Field(default=None, max_length=63)
    """Kueue LocalQueue; becomes the `kueue.x-k8s.io/queue-name` label of the RayJob."""
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    """Wall-clock limit from the first start; past it the job fails with DeadlineExceeded."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    """Seconds after Succeeded/Failed before the children are deleted; the TrainJob stays."""


# ----------------------------------------------------------------------------------- status


class Condition(_Model):
    """A metav1.Condition."""

    type: str = Field(max_length=316)
    """Condition type: Created, Running, Suspended, Succeeded, Failed, Reconciling, Stalled."""
    status: str = Field(pattern="^(True|False|Unknown)$")
    """True, False or Unknown."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the condition was set from."""
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    """When the status last changed."""
    reason: str = Field(max_length=1024)
    """CamelCase reason."""
    message: str = Field(default="", max_length=32768)
    """Human-readable detail."""


class Metric(_Model):
    """One reported metric (name and value as strings, as in Kubeflow Trainer's KEP-2779)."""

    name: str
    """Metric name."""
    value: str
    """Metric value."""


class TrainerStatus(_Model):
    """Progress written by the trainer runtime (names shared with Kubeflow Trainer KEP-2779)."""

    progress_percentage: int | None = Field(default=None, ge=0, le=100)
    """Training progress, 0-100."""
    estimated_remaining_seconds: int | None = Field(default=None, ge=0)
    """Estimated seconds until training ends."""
    epoch: int | None = None
    """Latest reported epoch."""
    step: int | None = None
    """Reports made so far in this run."""
    metrics: list[Metric] | None = None
    """Latest reported metrics."""
    last_updated_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the runtime last wrote this."""
    phase: str | None = None
    """Running, Succeeded or Failed, as the runtime saw the training end."""
    message: str | None = None
    """The runtime's message: the error of a failed run, the result of a finished one."""
    attempt: int | None = None
    """Attempt (RayJob) the report came from."""
    checkpointing: bool | None = None
    """True while the runtime saves a checkpoint before a suspend."""


class CheckpointStatus(_Model):
    """Latest and best checkpoint."""

    latest_uri: str | None = Field(default=None, alias="latestURI")
    """Latest checkpoint."""
    best_uri: str | None = Field(default=None, alias="bestURI")
    """Best checkpoint by checkpoint.scoreAttribute."""
    best_metric: str | None = None
    """Score of the best checkpoint."""
    count: int | None = None
    """Checkpoints reported in this run."""


class WorkersStatus(_Model):
    """Worker pods."""

    desired: int | None = None
    """Worker replicas wanted."""
    ready: int | None = None
    """Worker replicas ready."""


class TrainJobStatus(_Model):
    """Observed state of a TrainJob."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = None
    """metadata.generation the operator last acted on."""
    conditions: list[Condition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Created, Running, Suspended, Succeeded, Failed; Reconciling and Stalled only while true."""
    phase: str | None = None
    """One-word summary for kubectl get: Pending, Running, Suspended, Succeeded, Failed, Stalled."""
    start_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the first attempt started."""
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the job reached Succeeded or Failed."""
    restarts: int | None = None
    """Cluster-level retries so far."""
    attempt: int | None = None
    """Current attempt number (the RayJob name suffix)."""
    ray_job_name: str | None = None
    """Current RayJob."""
    ray_cluster_name: str | None = None
    """Current RayCluster."""
    dashboard_url: str | None = Field(default=None, alias="dashboardURL")
    """Ray dashboard of the current cluster."""
    run_name: str | None = None
    """Ray Train run name; stable across retries of this TrainJob."""
    workers: WorkersStatus | None = None
    """Worker pods desired and ready."""
    trainer_status: TrainerStatus | None = None
    """Progress written by the trainer runtime."""
    checkpoint: CheckpointStatus | None = None
    """Latest and best checkpoint."""


class TrainJob(_Model):
    """A distributed training job run with Ray Train on a KubeRay cluster."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _rule(
                    f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                    f"metadata.name must be at most {MAX_NAME_LENGTH} characters so that "
                    "every child name (RayJob, RayCluster, head service) fits in 63; "
                    "choose a shorter name",
                ),
                _rule(
                    "!has(oldSelf.status) || !has(oldSelf.status.startTime) || "
                    "oldSelf.spec.suspend || (self.spec.image == oldSelf.spec.image && "
                    "self.spec.entrypoint == oldSelf.spec.entrypoint && "
                    "self.spec.storage == oldSelf.spec.storage)",
                    "spec.image, spec.entrypoint and spec.storage are immutable once the job "
                    "has started; set spec.suspend: true first, or create a new TrainJob",
                    reason="FieldValueForbidden",
                    fieldPath=".spec",
                ),
            ]
        }
    )

    api_version: str | None = None
    """APIVersion of this object."""
    kind: str | None = None
    """Kind of this object."""
    metadata: dict[str, Any] | None = None
    """Standard object metadata."""
    spec: TrainJobSpec
    """Desired state."""
    status: TrainJobStatus | None = None
    """Observed state."""
