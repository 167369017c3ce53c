"""TrainJobSpec: the desired state of a TrainJob, built from the other modules' parts.

Its CEL rules tie fields of different parts together (a worker's resources named twice, a
mount over the checkpoint claim, a template that must supply required fields), so they live
with the spec, not with any one part.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonValue

from raytrain_contract.api.v1alpha1.common import (
    CLUSTER_TEMPLATE_KIND,
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    MAX_SECONDS,
    NVIDIA_GPU,
    PRESERVE,
    TEMPLATE_KIND,
    Model,
    new_field,
    rule,
)
from raytrain_contract.api.v1alpha1.pods import PodOverrides
from raytrain_contract.api.v1alpha1.recovery import DisruptionSpec, FailureSpec, RetryPolicySpec
from raytrain_contract.api.v1alpha1.scaling import NetworkSpec, ScalingSpec, TorchSpec
from raytrain_contract.api.v1alpha1.storage import (
    CheckpointSpec,
    CodeSpec,
    ResumeFromSpec,
    ScoreOrder,
    StorageSpec,
)


class DatasetFormat(str, Enum):
    PARQUET = "parquet"
    CSV = "csv"
    JSON = "json"
    NUMPY = "numpy"
    TEXT = "text"


class DatasetSpec(Model):
    """A named input read with Ray Data and sharded across the workers."""

    uri: str = Field(min_length=1, max_length=2048)
    """Location: `s3://bucket/path`, or a path on the job's PVC or in the image."""
    format: DatasetFormat = DatasetFormat.PARQUET
    """File format: parquet, csv, json, numpy or text."""
    split: bool = True
    """Shard it across workers (true) or give every worker all of it (false)."""


class TuneScheduler(Model):
    """Trial scheduler for the search."""

    type: str = Field(default="ASHA", pattern="^(ASHA|FIFO)$")
    """ASHA (early-stops weak trials) or FIFO."""
    max_t: int | None = Field(default=None, ge=1, le=10**9)
    """Most training iterations a trial runs (ASHA)."""
    grace_period: int = Field(default=1, ge=1, le=10**9)
    """Iterations a trial runs before it can be stopped (ASHA)."""
    reduction_factor: float = Field(default=2.0, gt=1, le=1000)
    """Fraction of trials kept at each rung is 1/reductionFactor (ASHA)."""


class TuneSpec(Model):
    """Optional hyperparameter search with Ray Tune; each trial is a TorchTrainer run."""

    param_space: dict[str, Any] = Field(json_schema_extra=PRESERVE)
    """Search space merged into config: per key `{uniform: [lo, hi]}`, `{loguniform: [lo, hi]}`,
    `{randint: [lo, hi]}`, `{choice: [...]}`, `{grid: [...]}` or a plain value."""
    num_samples: int = Field(default=1, ge=1, le=10000)
    """Trials to run (each grid combination counts once per sample)."""
    metric: str = Field(min_length=1, max_length=256)
    """Reported metric the search optimises."""
    mode: ScoreOrder = ScoreOrder.MAX
    """max or min."""
    max_concurrent_trials: int | None = Field(default=None, ge=1, le=10000)
    """Trials running at once (default 1). The worker group has the workers of each; each
    running trial's driver runs on the head (about 0.6 GB of its memory)."""
    scheduler: TuneScheduler | None = None
    """Trial scheduler; default FIFO."""


class TemplateKind(str, Enum):
    CLUSTER = CLUSTER_TEMPLATE_KIND
    NAMESPACED = TEMPLATE_KIND


class TemplateRef(Model):
    """A ClusterTrainJobTemplate or a TrainJobTemplate (of the job's namespace) whose spec gives
    this job's defaults: a value the TrainJob sets wins, objects merge field by field (see
    docs/templates.md for lists)."""

    kind: TemplateKind = TemplateKind.CLUSTER
    """ClusterTrainJobTemplate (cluster-wide, the default) or TrainJobTemplate (this
    namespace's)."""
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """The template's name."""


#: Fields a TrainJob must have once its template is merged in; the CRD requires them of a
#: TrainJob without spec.template.
TEMPLATE_REQUIRED = ("image", "entrypoint", "scaling", "storage")


#: CEL: the mount `m` is, holds or nests in the checkpoint claim's mount.
_CLAIM_COLLISION = (
    "m.mountPath == self.storage.pvc.mountPath || "
    "m.mountPath.startsWith(self.storage.pvc.mountPath + '/') || "
    "self.storage.pvc.mountPath.startsWith(m.mountPath + '/')"
)


def _worker_resource_rules() -> list[JsonValue]:
    """CEL: spec.workerTemplate.resources must not name what resourcesPerWorker sets (the
    operator also checks the names the API server cannot see)."""
    res = "self.workerTemplate.resources"
    rules: list[JsonValue] = []
    for name, when, where in (
        ("cpu", "true", "spec.scaling.resourcesPerWorker.cpu (default 1 per worker)"),
        (
            "memory",
            "has(self.scaling) && has(self.scaling.resourcesPerWorker) && "
            "has(self.scaling.resourcesPerWorker.memory)",
            "spec.scaling.resourcesPerWorker.memory",
        ),
        (
            NVIDIA_GPU,
            "has(self.scaling) && ((has(self.scaling.useGpu) && self.scaling.useGpu) || "
            "(has(self.scaling.resourcesPerWorker) && has(self.scaling.resourcesPerWorker.gpu)))",
            "spec.scaling.resourcesPerWorker.gpu (or useGpu)",
        ),
    ):
        rules.append(
            rule(
                f"!has(self.workerTemplate) || !has({res}) || !({when}) || "
                f"((!has({res}.requests) || !('{name}' in {res}.requests)) && "
                f"(!has({res}.limits) || !('{name}' in {res}.limits)))",
                f"spec.workerTemplate.resources sets {name}, which {where} also sets; keep it "
                "in resourcesPerWorker only (the workers' requests and limits are "
                "resourcesPerWorker x workersPerPod)",
            )
        )
    return rules


SLICES_NEED_QUEUE = (
    "spec.scaling.kueueWorkloadSlices needs spec.queueName: Kueue admits and grows the "
    "workload slices of a job in one of its queues; set queueName or remove kueueWorkloadSlices"
)


class TrainJobSpec(Model):
    """Desired state of a TrainJob."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *_worker_resource_rules(),
                *(
                    rule(
                        f"!has(self.storage) || !has(self.storage.pvc) || !has(self.{pod}) || "
                        f"!has(self.{pod}.volumeMounts) || self.{pod}.volumeMounts.all(m, "
                        f"!({_CLAIM_COLLISION}))",
                        f"spec.{pod}.volumeMounts: a mountPath must not be, hold or nest in "
                        "spec.storage.pvc.mountPath (the checkpoint claim); choose another "
                        "directory",
                    )
                    for pod in ("head", "workerTemplate")
                ),
                rule(
                    "has(self.template) || !has(self.scaling) || has(self.scaling.numWorkers) || "
                    "(has(self.scaling.minWorkers) && has(self.scaling.maxWorkers))",
                    "spec.scaling: set numWorkers for a fixed-size job, or both minWorkers and "
                    "maxWorkers for an elastic one",
                ),
                rule(
                    "has(self.template) || !has(self.scaling) || "
                    "!has(self.scaling.kueueWorkloadSlices) || "
                    "!self.scaling.kueueWorkloadSlices || has(self.queueName)",
                    SLICES_NEED_QUEUE,
                ),
                *(
                    rule(
                        f"has(self.template) || has(self.{field})",
                        f"spec.{field} is required (unless spec.template names a template that "
                        "sets it)",
                    )
                    for field in TEMPLATE_REQUIRED
                ),
                rule(
                    "!has(self.resumeFrom) || !has(self.resumeFrom.checkpoint) || "
                    "!has(self.storage) || (has(self.storage.s3) ? "
                    "self.resumeFrom.checkpoint.startsWith('s3://') : "
                    "self.resumeFrom.checkpoint.startsWith(self.storage.pvc.mountPath + '/'))",
                    "spec.resumeFrom.checkpoint must be where this job's pods can read it: an "
                    "s3:// URI when spec.storage is s3, a path under spec.storage.pvc.mountPath "
                    "when it is a pvc",
                ),
                rule(
                    "!has(self.code) || !has(self.storage) || (has(self.storage.s3) ? "
                    "self.code.uri.startsWith('s3://') : "
                    "self.code.uri.startsWith(self.storage.pvc.mountPath + '/'))",
                    "spec.code.uri must be where this job's pods can read it: an s3:// URI when "
                    "spec.storage is s3, a path under spec.storage.pvc.mountPath when it is a "
                    "pvc (raytrain submit --code stores it there)",
                ),
            ]
        }
    )

    image: str = Field(min_length=1, max_length=512, pattern=r"^[^\s]+$")
    """Trainer runtime image: ours, or one built FROM ours with the user's code and packages."""
    image_pull_policy: str | None = Field(default=None, pattern="^(Always|IfNotPresent|Never)$")
    """Image pull policy of every container."""
    entrypoint: str = Field(
        max_length=512,
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
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
    ray_version: str = Field(
        default="2.60.0", max_length=32, pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?([-.+a-z0-9]*)$"
    )
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
    """Worker-group restarts inside one cluster (FailureConfig), and the hang watch
    (hangTimeoutSeconds, onHang)."""
    disruption: DisruptionSpec | None = new_field()
    """Drains, evictions and preemptions: a PodDisruptionBudget, the pods' grace period and a
    retry budget of their own (see its fields)."""
    backoff_limit: int = Field(default=0, ge=0, le=100)
    """Cluster-level retries: each is a new Ray cluster that resumes from the latest checkpoint."""
    retry_policy: RetryPolicySpec | None = new_field()
    """Which failed attempts are retried (by failure class and exit code); unset keeps the
    defaults: an OOMKilled container, an exception in the training code or a run with no
    checkpoint that passes its check fails the job at once, every other failure is retried while
    spec.backoffLimit allows. The operator applies a change to the running attempt at once: it
    is its own decision, not built into the RayJob."""
    resume_from: ResumeFromSpec | None = new_field()
    """Start the run from another TrainJob's latest checkpoint or from a checkpoint location,
    instead of from scratch (for example to continue a job that failed or ran out of time).
    Cannot change once the job has started."""
    code: CodeSpec | None = new_field()
    """The training code as a snapshot in the job's storage (`raytrain submit --code DIR`),
    put on the import path of the driver and every worker: no image build for a code change.
    Without it the entrypoint is imported from the image."""
    datasets: dict[str, DatasetSpec] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": 32,
            "x-kubernetes-validations": [
                rule(
                    "self.all(k, size(k) <= 63 && k.matches('^[A-Za-z_][A-Za-z0-9_.-]*$'))",
                    "spec.datasets: a dataset name has at most 63 letters, digits, '_', '.' or "
                    "'-' and starts with a letter or '_' (e.g. train)",
                )
            ],
        },
    )
    """Named inputs read with Ray Data and handed to the workers as shards."""
    tune: TuneSpec | None = None
    """Optional hyperparameter search (Ray Tune)."""
    head: PodOverrides | None = None
    """Overrides for the Ray head pod."""
    worker_template: PodOverrides | None = None
    """Overrides for the worker pods."""
    suspend: bool = False
    """Suspend the job: the runtime checkpoints, the Ray cluster is removed; false resumes it."""
    network: NetworkSpec | None = new_field()
    """Opt-in fast network of the workers for NCCL (InfiniBand or EFA): devices, IPC_LOCK and
    NCCL environment; see its fields."""
    queue_name: str | None = Field(default=None, min_length=1, max_length=63, pattern=LABEL_VALUE)
    """Kueue LocalQueue; becomes the `kueue.x-k8s.io/queue-name` label of the RayJob."""
    active_deadline_seconds: int | None = Field(default=None, ge=1, le=MAX_SECONDS)
    """Wall-clock limit from the first start; past it the job fails with DeadlineExceeded."""
    pre_running_deadline_seconds: int | None = new_field(ge=1, le=MAX_SECONDS)
    """Limit on the wait for an attempt's cluster to start training (pods pending for GPUs, a
    head that cannot start, images pulling), from the moment the attempt's RayJob was created
    or resumed; past it the RayJob is deleted and the job fails with
    PreRunningDeadlineExceeded. Time queued in Kueue (RayJob suspended) does not count."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=MAX_SECONDS)
    """Seconds after Succeeded/Failed before the children are deleted; the TrainJob stays."""
    template: TemplateRef | None = new_field()
    """Defaults from a ClusterTrainJobTemplate or TrainJobTemplate: what this spec leaves out
    is taken from it. Read when the job starts and kept in status.template, so a later edit of
    the template never changes this job; cannot change once the job has started (unless it is
    suspended)."""

    @model_validator(mode="after")
    def _slices_queued(self) -> TrainJobSpec:
        # The CRD says this unless spec.template is set; the operator checks the merged spec.
        if self.scaling.kueue_workload_slices and not self.queue_name:
            raise ValueError(SLICES_NEED_QUEUE)
        return self
