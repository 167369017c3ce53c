"""The TrainJob state machine: what is observed in, what to do and what to report out.

Pure: the handlers gather an `Observation` (the TrainJob, the RayJob of the current attempt,
the result of the storage preflight, the clock) and carry out the returned `Plan` (actions on
children, a status patch, Events). Everything the operator decides lives here and is unit-tested
without a cluster.

Words from KubeRay are kept: a RayJob's `jobDeploymentStatus` (New, Initializing, Running,
Complete, Failed, Suspending, Suspended, Retrying, Waiting) and `jobStatus` (PENDING, RUNNING,
SUCCEEDED, FAILED, STOPPED). The runtime's `trainerStatus.phase` decides the training outcome;
the RayJob's status decides it only when the runtime died without reporting.

The modules, in the order a pass uses them:

- `plan_types`: the Observation, the Actions, the Plan and the constants they share.
- `observed`: reading the observed status, the current attempt and the runtime's report.
- `pass_builder`: one pass's accumulator and the ways a pass ends (finished, failed, succeeded).
- `stages`: `plan`, the ordered stages of a pass; the first that decides wins.
- `failures`: a failed attempt's classification (status/triage/), retries and preemptions.
- `suspension`: suspend with a checkpoint, Kueue's admission, resume, an earlier attempt's drain.
- `hangs`: a running attempt whose reports stopped (a due time, then spec.failure.onHang), and
  the Straggling condition.
- `spec_changes`: spec fields the running attempt does not carry.
- `rejections`: the checkpoints a resume passed over, each announced once.

Everything other code uses is imported from here, as `raytrain_operator.status.machine`.
"""

from raytrain_contract.meta import (
    ANNOTATION_CHECKPOINT_REQUESTED,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_SUSPENDED_BY_USER,
)
from raytrain_contract.timefmt import rfc3339
from raytrain_operator.builders.rayjob import spec_hash
from raytrain_operator.status.machine.failures import (
    PREEMPTION_DISRUPTIONS,
    attempt_failed,
    deadline_passed,
    head_disrupted,
    head_memory,
    max_preemptions,
    preemption,
    retry_policy,
    worker_memory,
)
from raytrain_operator.status.machine.observed import (
    attempt_of,
    current_attempt,
    is_terminal,
    needs_operator,
    needs_preflight,
)
from raytrain_operator.status.machine.pass_builder import how_to_continue
from raytrain_operator.status.machine.plan_types import (
    ANNOTATION_CLEANED_UP,
    CHECKPOINT_GRACE_SECONDS,
    FAILED,
    OPERATOR_FIELDS,
    PENDING,
    REQUEST_REUSE_MARGIN_SECONDS,
    RUNNING,
    SPEC_CHANGE_PENDING,
    STALLED,
    SUCCEEDED,
    SUSPENDED,
    Action,
    Annotate,
    DeleteChildren,
    DeleteRayJob,
    EnsureChildren,
    Observation,
    Plan,
    SetRayJobSuspend,
    now_utc,
)
from raytrain_operator.status.machine.rejections import REASON as CHECKPOINT_REJECTED
from raytrain_operator.status.machine.stages import STAGES, plan

__all__ = [
    "ANNOTATION_CHECKPOINT_REQUESTED",
    "ANNOTATION_CLEANED_UP",
    "ANNOTATION_SPEC_HASH",
    "ANNOTATION_SUSPENDED_BY_USER",
    "CHECKPOINT_GRACE_SECONDS",
    "CHECKPOINT_REJECTED",
    "FAILED",
    "OPERATOR_FIELDS",
    "PENDING",
    "PREEMPTION_DISRUPTIONS",
    "REQUEST_REUSE_MARGIN_SECONDS",
    "RUNNING",
    "SPEC_CHANGE_PENDING",
    "STAGES",
    "STALLED",
    "SUCCEEDED",
    "SUSPENDED",
    "Action",
    "Annotate",
    "DeleteChildren",
    "DeleteRayJob",
    "EnsureChildren",
    "Observation",
    "Plan",
    "SetRayJobSuspend",
    "attempt_failed",
    "attempt_of",
    "current_attempt",
    "deadline_passed",
    "head_disrupted",
    "head_memory",
    "how_to_continue",
    "is_terminal",
    "max_preemptions",
    "needs_operator",
    "needs_preflight",
    "now_utc",
    "plan",
    "preemption",
    "retry_policy",
    "rfc3339",
    "spec_hash",
    "worker_memory",
]
