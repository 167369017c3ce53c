"""What a plan is made of: the Observation a pass reads, the Actions and the Plan it returns.

Also the constants the stages share: the phases, the annotations the machine writes and the
grace periods it waits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.status import triage
from raytrain_operator.status.conditions import Transition

#: Annotation on the TrainJob once its children were removed after the TTL.
ANNOTATION_CLEANED_UP = "raytrain.dev/children-deleted"
CHECKPOINT_GRACE_SECONDS = 120.0
#: A checkpoint request older than the grace period plus this is from an earlier suspend.
REQUEST_REUSE_MARGIN_SECONDS = 30.0
#: Spec fields the operator reads for its own decisions and applies to a running attempt at
#: once. The builders hash every field a RayJob is made from (their IMMEDIATE_FIELDS aside); a
#: field here may be in that hash but a change to it alone is never a pending spec change and
#: never starts a new attempt.
OPERATOR_FIELDS = frozenset({"spec.retryPolicy"})
#: Reconciling's reason while a spec change waits for the next attempt.
SPEC_CHANGE_PENDING = "SpecChangePending"

PENDING, RUNNING, SUSPENDED = "Pending", "Running", "Suspended"
SUCCEEDED, FAILED, STALLED = "Succeeded", "Failed", "Stalled"


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


# ----------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class EnsureChildren:
    """Create (or find) the ConfigMap, RBAC and the RayJob of `attempt`."""

    attempt: int
    suspend: bool
    #: The checkpoint spec.resumeFrom resolved to (status.resumedFrom), for the contract.
    resume_from: str | None = None
    #: Nodes the workers avoid when another can take them: each held up the ranks in two
    #: hangs (status.hangs).
    avoid_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SetRayJobSuspend:
    name: str
    suspend: bool
    by_user: bool


@dataclass(frozen=True)
class DeleteRayJob:
    name: str


@dataclass(frozen=True)
class DeleteChildren:
    """Every child of the TrainJob (all attempts' RayJobs, ConfigMap, RBAC): the TTL ran out."""


@dataclass(frozen=True)
class Annotate:
    """Set (or with value None remove) an annotation on the TrainJob itself."""

    key: str
    value: str | None


Action = EnsureChildren | SetRayJobSuspend | DeleteRayJob | DeleteChildren | Annotate


@dataclass(frozen=True)
class Observation:
    meta: Meta
    trainjob: TrainJob | None
    status: Mapping[str, Any]
    now: datetime
    #: The RayJob `<name>-<attempt>` of the current attempt, as read from the API (or None).
    rayjob: Mapping[str, Any] | None = None
    #: Owned RayJobs of earlier attempts that still exist: name -> True once being deleted.
    older_rayjobs: Mapping[str, bool] = field(default_factory=dict)
    #: The highest `raytrain.dev/attempt` among the owned RayJobs (None when there is none).
    highest_attempt: int | None = None
    #: Why the RayJob cannot be created yet (missing PVC, Secret...), or None.
    preflight_problem: tuple[str, str] | None = None
    #: Why the spec can never be built (invalid quantity...), or None.
    spec_problem: str | None = None
    #: The Stalled condition's reason for spec_problem.
    spec_problem_reason: str = "InvalidSpec"
    #: A child's name is taken by an object this TrainJob does not own (the message), or None.
    conflict: str | None = None
    #: The API server refused a child (reason, message with the API's own words), or None.
    rejected: tuple[str, str] | None = None
    #: Why the Ray cluster lacks pods (KubeRay's ReplicaFailure, Unschedulable pods), or None.
    cluster_problem: tuple[str, str] | None = None
    #: The Ray pods of the current attempt, read when it failed (`attempt_failed`), else ().
    attempt_pods: Sequence[Mapping[str, Any]] = ()
    #: Events about the attempt's children (a RayCluster's ReplicaFailure among them), or ().
    attempt_events: Sequence[Mapping[str, Any]] = ()
    checkpoint_grace_seconds: float = CHECKPOINT_GRACE_SECONDS
    #: The checkpoint spec.resumeFrom names (status.resumedFrom once recorded), or None.
    resume_from: str | None = None


@dataclass
class Plan:
    status: dict[str, Any] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    #: Seconds after which something is due (a grace period, a deadline, the TTL), or None.
    #: The resync interval bounds how late it is acted on; handlers log it.
    recheck_after: float | None = None
    #: Why the current attempt failed, when this pass found it failed (one Event and one count
    #: of raytrain_attempt_failures_total each), else None.
    attempt_failure: triage.Triage | None = None
    #: The new entries of status.checkpoint.rejected, one Event message each (reason
    #: CheckpointRejected, a Warning), oldest first.
    checkpoint_rejections: list[str] = field(default_factory=list)

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or PENDING)
