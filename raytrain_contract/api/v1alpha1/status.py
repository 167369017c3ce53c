"""TrainJobStatus: what the operator observed of a TrainJob, and the runtime's reports in it."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from raytrain_contract.api.v1alpha1.common import PRESERVE, Model, new_field


class Condition(Model):
    """A metav1.Condition."""

    type: str = Field(max_length=316)
    """Condition type: Created, Running, Suspended, Succeeded, Failed, Reconciling, Stalled,
    Hung, Straggling."""
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


class Metric(Model):
    """One reported metric (name and value as strings, as in Kubeflow Trainer's KEP-2779)."""

    name: str
    """Metric name."""
    value: str
    """Metric value."""


class HangGroup(Model):
    """Ranks whose training threads were found in the same place."""

    where: str = Field(max_length=1024)
    """The place, in words: the call into a library and the loop's line that made it, or the
    loop's own line and its source."""
    waiting: bool | None = None
    """true: the place waits on the other ranks (a collective, ray.train.report)."""
    ranks: list[int] = Field(max_length=4096)
    """The ranks found there."""


class HangRank(Model):
    """A rank, its pod and its node."""

    rank: int
    """World rank."""
    pod: str | None = None
    """Pod the rank's process ran in."""
    node: str | None = None
    """Node of that pod."""


class HangReport(Model):
    """What the runtime found when the attempt's reports stopped for the hang timeout: where
    every rank's training thread was, grouped, and where their stacks are stored."""

    since: str = Field(json_schema_extra={"format": "date-time"})
    """trainerStatus.lastProgressTime when the stacks were taken: the stall they belong to."""
    time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the stacks were taken."""
    timeout_seconds: float | None = None
    """The hang timeout the runtime applied."""
    workers: int | None = None
    """Training processes asked for their stacks."""
    groups: list[HangGroup] | None = Field(default=None, max_length=64)
    """The ranks grouped by where they were, the smallest group first."""
    suspects: list[HangRank] | None = Field(default=None, max_length=64)
    """The ranks not waiting on their peers while others waited for them (the likely cause),
    with their pods and nodes."""
    unanswered: list[int] | None = Field(default=None, max_length=4096)
    """Ranks whose stacks did not come back in time (a process gone, or one whose interpreter
    native code holds)."""
    stacks: str | None = None
    """The stored stack dump of every rank (stacks.txt beside the attempt's driver.log)."""


class StepRank(Model):
    """The slowest rank of the latest report, its pod, node and busy seconds."""

    rank: int
    """World rank."""
    pod: str | None = None
    """Pod of the rank's process."""
    node: str | None = None
    """Node of that pod."""
    busy_seconds: float | None = None
    """Seconds the rank spent between its last two reports not waiting on its peers."""


class StepTimeStatus(Model):
    """How long the ranks take per report, from each rank's own measure: the busy time between
    two reports (the wall time less the waits on its peers: collectives, backward(),
    ray.train.report)."""

    reports: int | None = None
    """Report rounds the numbers are over (the latest; at most 5)."""
    wall_seconds: float | None = None
    """Wall seconds between two reports (the median rank, the latest round)."""
    median_busy_seconds: float | None = None
    """The median rank's busy seconds (the latest round)."""
    slowest: StepRank | None = None
    """The rank the others waited for in the latest round."""
    skew_percent: float | None = None
    """The slowest rank's busy time less the median's, in percent of the wall time."""
    straggler: bool | None = None
    """true: the same rank was the slowest in each of the last 5 rounds, every time at least
    20 percent of the wall time above the median: it is named a straggler."""


class TrainerStatus(Model):
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
    last_progress_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the latest training report of this attempt reached the driver (or, before the
    first, when its training started): the hang watch counts from here. The driver pod's
    clock."""
    attempt_reports: int | None = None
    """Reports this attempt made (step counts the run's, earlier attempts' included)."""
    report_interval_seconds: float | None = None
    """Median seconds between this attempt's latest reports (at most 20); absent before two."""
    hang: HangReport | None = None
    """Where every rank was when the reports stopped for the hang timeout; removed by the next
    report."""
    step_time: StepTimeStatus | None = None
    """The ranks' step times and the slowest rank (stragglers)."""


class RejectedCheckpoint(Model):
    """A checkpoint a resume did not use because it failed its check (its files are kept)."""

    uri: str
    """The checkpoint."""
    problem: str | None = None
    """no-manifest, bad-manifest, missing, size, checksum or rejected (marked earlier)."""
    reason: str | None = None
    """What was wrong: the file and what storage holds against what the manifest says."""
    attempt: int | None = None
    """The attempt that checked it."""
    time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When it was checked."""


class CheckpointStatus(Model):
    """Latest and best checkpoint."""

    latest_uri: str | None = Field(default=None, alias="latestURI")
    """Latest checkpoint."""
    best_uri: str | None = Field(default=None, alias="bestURI")
    """Best checkpoint by checkpoint.scoreAttribute."""
    best_metric: str | None = None
    """Score of the best checkpoint."""
    count: int | None = None
    """Checkpoints reported in this run."""
    last_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the runtime reported the latest checkpoint (the driver pod's clock, the moment Ray
    Train handed it over after persisting it); absent from runtimes that do not write it."""
    resumed_from: str | None = None
    """The checkpoint the current attempt resumed from, once verified against its manifest."""
    resumed_attempt: int | None = None
    """The attempt that resumed from resumedFrom."""
    rejected: list[RejectedCheckpoint] | None = Field(default=None, max_length=20)
    """Checkpoints a resume passed over, newest last (at most 20 kept here; each is also
    marked in storage, .raytrain/rejected.json in its directory)."""


class GoodputTotals(Model):
    """Seconds and GPU-seconds of ledger entries folded out of status.goodput.clusters."""

    allocated_seconds: float | None = None
    """Allocated seconds of the folded clusters."""
    productive_seconds: float | None = None
    """Productive seconds of the folded clusters (absent if unknown for one of them)."""
    lost_to_restart_seconds: float | None = None
    """Seconds lost to restarts after the folded clusters."""
    lost_to_recompute_seconds: float | None = None
    """Seconds of recomputed training of the folded clusters (absent if unknown)."""
    lost_to_hang_seconds: float | None = None
    """Seconds the folded clusters spent hung before they were ended."""
    allocated_gpu_seconds: float | None = Field(default=None, alias="allocatedGPUSeconds")
    """allocatedSeconds times each cluster's GPUs."""
    productive_gpu_seconds: float | None = Field(default=None, alias="productiveGPUSeconds")
    """productiveSeconds times each cluster's GPUs."""
    lost_gpu_seconds: float | None = Field(default=None, alias="lostGPUSeconds")
    """Lost seconds times the GPUs held meanwhile."""


class GoodputCluster(Model):
    """One Ray cluster of the job (an attempt, or a resume after a suspend), as the operator
    saw it; times from KubeRay (start, end) and from the runtime's reports (the rest)."""

    attempt: int
    """The attempt (RayJob <name>-<attempt>) the cluster belonged to."""
    start: str = Field(json_schema_extra={"format": "date-time"})
    """KubeRay's status.startTime of the RayJob: when it began creating this cluster (pods
    waiting for a node or an image count)."""
    end: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """KubeRay's status.endTime, else the operator pass that saw the cluster end, else (while
    it runs) the latest pass that saw it up."""
    outcome: str = Field(pattern="^(Running|Succeeded|Retried|Failed|Suspended)$")
    """Running (up at the latest pass), Succeeded, Retried (its attempt failed and another
    followed), Failed (its attempt failed the job) or Suspended."""
    gpus: float | None = None
    """GPUs the RayJob's pods ask for (GPU resource names in limits, else requests, times the
    replicas of each group)."""
    first_report: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """lastUpdatedTime of the first runtime report the operator saw from this cluster."""
    last_report: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """lastUpdatedTime of the latest runtime report the operator saw from this cluster."""
    last_checkpoint: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """status.checkpoint.lastTime written while this cluster ran (its latest checkpoint)."""
    checkpoint_time_unknown: bool | None = None
    """true: the runtime reported checkpoints without their time (an older runtime), so what
    this cluster kept is not known."""
    hung_since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """The cluster's attempt was ended as hung: its last progress (the runtime's
    lastProgressTime), from which on its time was lost to the hang."""


class GoodputStatus(Model):
    """Where the job's cluster time went, as the operator measured it. Times come from two
    clocks: KubeRay's (a cluster's start and end) and the driver pod's (its reports); a report
    is seen when an operator pass reads it, not every report the runtime made, so each number
    is what was observed, a lower bound of what it names. A number the operator cannot know is
    absent, never 0. allocated minus productive minus lost is the time neither covers: a
    cluster's start-up before its first report, the time after its last report, a suspended
    or finally failed cluster's training after its last checkpoint."""

    allocated_seconds: float | None = None
    """Seconds Ray clusters of this job existed: the sum over clusters of end - start, with
    start KubeRay's status.startTime of the RayJob (it includes pods waiting to be scheduled
    and pulling images) and end its status.endTime, else the pass that saw the cluster end,
    else the latest pass. Not seen: a cluster that came and went between two passes."""
    productive_seconds: float | None = None
    """Seconds of training that were kept: for a running or succeeded cluster, its first seen
    report to its last; for a failed or suspended one, its first seen report to its latest
    checkpoint (0 without a checkpoint in it). Not seen: the training before a cluster's
    first report (its first epoch or step). Absent when the runtime did not write
    checkpoint.lastTime for a cluster that ended early."""
    lost_seconds: float | None = None
    """lostToRestartSeconds + lostToRecomputeSeconds + lostToHangSeconds (absent when the
    recompute is)."""
    lost_to_restart_seconds: float | None = None
    """For each retried attempt, the seconds from its cluster's end (the failure) to the
    first report of the next attempt, or to the latest pass while none came: deleting the old
    cluster, starting the new one, restoring the checkpoint and the first step. A suspend is
    not a loss: the user asked for the pause."""
    lost_to_recompute_seconds: float | None = None
    """For each retried attempt, the training after its latest checkpoint (to its last seen
    report), which the next attempt did again; all of its training when it made no
    checkpoint. Absent when the checkpoint time is unknown."""
    lost_to_hang_seconds: float | None = None
    """For each attempt ended as hung (spec.failure.onHang Restart or Fail), the seconds from
    its last progress to its cluster's end: the time its pods held on without training."""
    allocated_gpu_seconds: float | None = Field(default=None, alias="allocatedGPUSeconds")
    """Each cluster's allocated seconds times its GPUs (see clusters[].gpus); 0 for a job
    without GPUs."""
    productive_gpu_seconds: float | None = Field(default=None, alias="productiveGPUSeconds")
    """Each cluster's productive seconds times its GPUs."""
    lost_gpu_seconds: float | None = Field(default=None, alias="lostGPUSeconds")
    """Recomputed and hung seconds times the failed cluster's GPUs, plus the part of each
    restart gap after the next cluster started times its GPUs (between the two clusters no GPU
    is held)."""
    as_of: str | None = new_field(json_schema_extra={"format": "date-time"})
    """When the operator computed these numbers. While a cluster runs and nothing else changes,
    they grow with the clock alone and are rewritten at most every 5 minutes, so a running job's
    status is not patched on every pass."""
    clusters: list[GoodputCluster] | None = Field(default=None, max_length=64)
    """The ledger every number is computed from, oldest first (at most 32 entries; older
    finished ones are folded into earlier)."""
    earlier: GoodputTotals | None = None
    """Totals of the ledger entries folded away."""


class DisruptionStatus(Model):
    """A Ray head pod Kubernetes took away, as its preStop hook read the pod's DisruptionTarget
    condition (the pod itself may be gone when the attempt's failure is seen)."""

    attempt: int | None = None
    """Attempt of the pod."""
    pod: str | None = None
    """The pod's name."""
    reason: str | None = None
    """The condition's reason: EvictionByEvictionAPI, PreemptionByScheduler, ..."""
    message: str | None = None
    """The condition's message."""


class OutOfMemoryStatus(Model):
    """Processes the kernel killed for memory inside the Ray head's container, as the watcher
    beside the driver saw them (the container keeps running, so its pod never says
    OOMKilled)."""

    attempt: int | None = None
    """Attempt of the pod."""
    pod: str | None = None
    """The head pod's name."""
    container: str | None = None
    """The container the kills were in."""
    kills: int | None = None
    """Processes the kernel has killed in the container so far."""
    process: str | None = None
    """The largest process that vanished when the count grew (Ray's title or its command)."""
    process_memory: str | None = None
    """That process' resident memory when last seen."""
    limit: str | None = None
    """The container's memory limit, as its cgroup has it."""
    peak: str | None = None
    """The container's peak memory use."""
    time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the watcher saw the count grow."""


class HangRecord(Model):
    """An attempt the operator ended as hung (onHang Restart or Fail), and the nodes of the ranks
    found holding the others up."""

    attempt: int
    """The attempt."""
    time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the operator found it hung."""
    nodes: list[str] | None = Field(default=None, max_length=64)
    """Nodes of the suspect ranks (trainerStatus.hang.suspects); empty when the stacks named
    none."""


class WorkersStatus(Model):
    """Worker pods."""

    desired: int | None = None
    """Worker replicas wanted."""
    ready: int | None = None
    """Worker replicas ready."""


class TemplateSnapshot(Model):
    """A copy of the template a TrainJob started with."""

    kind: str
    """ClusterTrainJobTemplate or TrainJobTemplate."""
    name: str
    """The template's name."""
    uid: str | None = None
    """The template object's uid (a template deleted and created again has another)."""
    resource_version: str | None = None
    """The template's resourceVersion when it was read."""
    spec: dict[str, Any] = Field(default_factory=dict, json_schema_extra=PRESERVE)
    """The template's spec as it was read: the defaults this job runs with."""


class TrainJobStatus(Model):
    """Observed state of a TrainJob."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = None
    """metadata.generation the operator last acted on."""
    conditions: list[Condition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Created, Running, Suspended, Succeeded, Failed; Reconciling, Stalled, Hung and Straggling
    only while true."""
    phase: str | None = None
    """One-word summary for kubectl get: Pending, Running, Suspended, Succeeded, Failed, Stalled."""
    start_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the first attempt started."""
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the job reached Succeeded or Failed."""
    restarts: int | None = None
    """Cluster-level retries so far."""
    preemptions: int | None = None
    """Attempts retried because Kubernetes took a pod away (spec.disruption.maxPreemptions);
    they spend no spec.backoffLimit retry."""
    disrupted: DisruptionStatus | None = None
    """The latest Ray head pod taken away by an eviction or a preemption (its preStop hook
    writes it): the attempt's failure then counts as a preemption."""
    hangs: list[HangRecord] | None = Field(default=None, max_length=10)
    """The latest hangs (at most 10): a node named in two of them is avoided by the next
    attempt's pods when another node can take them."""
    out_of_memory: OutOfMemoryStatus | None = None
    """The latest out-of-memory kill inside the Ray head's container (its watcher writes it):
    an attempt that then fails is named a head out of memory."""
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
    goodput: GoodputStatus | None = None
    """Where the cluster time went: allocated, productive and lost seconds (see its fields)."""
    resumed_from: str | None = new_field()
    """The checkpoint this run started from (spec.resumeFrom, resolved when the first RayJob
    was created); the loop gets it until the run has a checkpoint of its own."""
    template: TemplateSnapshot | None = new_field()
    """The template of spec.template as this job uses it: read before the first attempt and
    kept, so the job runs with the same defaults to the end."""
    announced_rejection: RejectedCheckpoint | None = new_field()
    """The newest entry of checkpoint.rejected the operator has posted a CheckpointRejected
    Event for (its uri, attempt and time): the entries after it are the new ones."""
