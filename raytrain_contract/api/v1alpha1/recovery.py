"""How a TrainJob meets failures: worker-group restarts, retry policy and disruptions."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from raytrain_contract.api.v1alpha1.common import Model, new_field, rule
from raytrain_contract.hang import ON_HANG_FAIL, ON_HANG_REPORT, ON_HANG_RESTART

#: The longest hang timeout: a week without a report is not training.
MAX_HANG_TIMEOUT_SECONDS = 7 * 24 * 3600


class OnHang(str, Enum):
    RESTART = ON_HANG_RESTART
    FAIL = ON_HANG_FAIL
    REPORT = ON_HANG_REPORT


class FailureSpec(Model):
    """Worker-group restarts inside one Ray cluster (Ray Train's FailureConfig), and what a job
    that stops making progress gets."""

    max_failures: int = Field(default=0, ge=-1, le=10000)
    """Worker-group failures tolerated before the attempt fails; -1 retries forever."""
    hang_timeout_seconds: int | None = new_field(ge=0, le=MAX_HANG_TIMEOUT_SECONDS)
    """Seconds without a training report (ray.train.report) after which the attempt counts as
    hung: the stacks of every training process are stored beside the attempt's logs (raytrain
    logs NAME --attempt N --stacks), the Hung condition says where each rank was, and
    spec.failure.onHang decides what follows. Counted from the latest report, or before the
    first one from the start of the worker group. 0 turns the watch off. Unset: 10 times the
    median interval of the attempt's latest reports, at least 600 s, and 1800 s before its
    second report. Set it above the longest pause the loop makes between two reports on
    purpose (an evaluation, a checkpoint of its own, a data reload)."""
    on_hang: OnHang | None = new_field()
    """What a hung attempt gets: Restart (the default) ends it and retries from the latest
    checkpoint as a failure of class Hung (spending spec.backoffLimit, as any retry); Fail fails
    the job; Report only sets the Hung condition and lets the attempt run on (the condition goes
    once reports come again)."""


#: The classes a failed attempt is sorted into (raytrain_operator.status.triage.FailureClass),
#: the keys of spec.retryPolicy.classes.
FAILURE_CLASSES = (
    "OOMKilled",
    "ImagePullFailed",
    "Unschedulable",
    "NodeLost",
    "UserException",
    "CollectiveTimeout",
    "CheckpointUnusable",
    "Hung",
    "Unknown",
)
_CLASS_LIST = ", ".join(FAILURE_CLASSES)


class ExitCodeRetry(Model):
    """Whether a failed attempt whose container exited with `code` is retried."""

    code: int = Field(ge=0, le=255)
    """Exit code of the failed container (the one the failure was classified from), 0-255."""
    retry: bool
    """true: retried while spec.backoffLimit allows; false: the job fails at once."""


class RetryPolicySpec(Model):
    """Which failed attempts are retried. An attempt that failed is classified (see
    docs/failures.md); its exit code, if spec.retryPolicy.exitCodes names it, decides, else its
    class. A retry is always a new attempt bounded by spec.backoffLimit; an input that fails the
    same way every time (an invalid image name, a run whose checkpoints all fail their check) is
    never retried."""

    classes: dict[str, bool] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": len(FAILURE_CLASSES),
            "x-kubernetes-validations": [
                rule(
                    "self.all(k, k in [" + ", ".join(f"'{c}'" for c in FAILURE_CLASSES) + "])",
                    f"spec.retryPolicy.classes: a key must be one of {_CLASS_LIST} "
                    "(case as written); remove or rename the other keys",
                )
            ],
        },
    )
    """Failure class -> retry. Keys: OOMKilled, ImagePullFailed, Unschedulable, NodeLost,
    UserException, CollectiveTimeout, CheckpointUnusable, Hung, Unknown. A class left out keeps
    its default: OOMKilled, UserException and CheckpointUnusable are not retried, every other
    class is. CheckpointUnusable is never retried, even when set to true here: every attempt
    meets the same checkpoints. Hung: false fails a hung attempt as spec.failure.onHang: Fail
    does."""
    exit_codes: list[ExitCodeRetry] | None = Field(
        default=None,
        max_length=256,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["code"]},
    )
    """Exit code -> retry; an entry here wins over the class of the failure. Each code at most
    once."""

    @model_validator(mode="after")
    def _known_classes(self) -> RetryPolicySpec:
        unknown = sorted(set(self.classes or {}) - set(FAILURE_CLASSES))
        if unknown:
            raise ValueError(
                f"spec.retryPolicy.classes: unknown class {', '.join(unknown)}; a key must be "
                f"one of {_CLASS_LIST}"
            )
        codes = [rule.code for rule in self.exit_codes or []]
        twice = sorted({code for code in codes if codes.count(code) > 1})
        if twice:
            raise ValueError(
                f"spec.retryPolicy.exitCodes: code {', '.join(map(str, twice))} is listed more "
                "than once; keep one entry per code"
            )
        return self


class DisruptionSpec(Model):
    """How the job meets a node drain, an eviction, a Kueue preemption or a spot reclaim."""

    pod_disruption_budget: bool = True
    """Create a PodDisruptionBudget (policy/v1) over the job's Ray pods that lets one go at a
    time (minAvailable: the head and workers less one): a node drain or any other Eviction API
    caller then takes them one by one, each after the previous one's replacement is Ready, so
    the job checkpoints and restarts from one lost pod instead of losing every worker at once.
    It does not stop a spot reclaim or a Kueue preemption, which do not ask the Eviction API.
    false: no budget (a drain evicts every pod at once)."""
    max_preemptions: int = Field(default=10, ge=0, le=1000)
    """Attempts that may fail because Kubernetes took a pod away (an eviction, a drain, a
    preemption, a lost node: the pod's DisruptionTarget condition or a NodeLost failure) and
    are retried from the latest checkpoint without spending spec.backoffLimit. Counted in
    status.preemptions; past it, such a failure spends spec.backoffLimit like any other.
    Inside one cluster, Ray Train retries a drained worker against its own budget."""
    termination_grace_period_seconds: int | None = Field(default=None, ge=1, le=86400)
    """Seconds a Ray pod has between the start of its deletion (an eviction, a drain) and its
    kill, unless spec.head or spec.workerTemplate sets its own; default 120. A worker's preStop
    hook tells Ray the node is going with a deadline 10 s short of it, so a loop that calls
    ray.train.get_preemption_info() can report a checkpoint in that time."""
