"""What triage reads and what it returns: the failure classes, the `Evidence` of one failed
attempt and its `Triage`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class FailureClass(str, Enum):
    OOM_KILLED = "OOMKilled"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    UNSCHEDULABLE = "Unschedulable"
    NODE_LOST = "NodeLost"
    USER_EXCEPTION = "UserException"
    COLLECTIVE_TIMEOUT = "CollectiveTimeout"
    CHECKPOINT_UNUSABLE = "CheckpointUnusable"
    #: No training report for the hang timeout (status/machine/hangs.py), or Ray Train's NCCL
    #: hang detector.
    HUNG = "Hung"
    UNKNOWN = "Unknown"


#: The faults of the platform rather than of the user's code or sizing.
INFRASTRUCTURE = frozenset(
    {
        FailureClass.IMAGE_PULL_FAILED,
        FailureClass.UNSCHEDULABLE,
        FailureClass.NODE_LOST,
        FailureClass.COLLECTIVE_TIMEOUT,
    }
)


#: The classes that say what happened but not whose fault it was: a hang is a dead peer or a
#: deadlock in the loop alike.
UNDECIDED = frozenset({FailureClass.HUNG, FailureClass.UNKNOWN})


UNKNOWN_HINT = (
    "the operator could not tell why (no OOMKilled, image, scheduling or node problem on the "
    "attempt's pods, no exception named); the driver's log says more: kubectl raytrain logs"
)


@dataclass(frozen=True)
class Triage:
    failure_class: FailureClass
    message: str
    pod: str | None = None
    container: str | None = None
    exit_code: int | None = None
    #: The same input fails the same way (an invalid image name, a run whose checkpoints all fail
    #: their check): no retry whatever the policy.
    permanent: bool = False
    #: The exception type a user exception or collective error names, if any.
    exception: str | None = None

    @property
    def reason(self) -> str:
        return self.failure_class.value

    @property
    def infrastructure(self) -> bool:
        return self.failure_class in INFRASTRUCTURE

    @property
    def kind(self) -> str:
        """Whose fault, in a word: infrastructure, workload, or cause not known."""
        if self.infrastructure:
            return "infrastructure"
        return "cause not known" if self.failure_class in UNDECIDED else "workload"


@dataclass(frozen=True)
class Evidence:
    """What the operator observed about one failed attempt."""

    rayjob_status: Mapping[str, Any]
    pods: Sequence[Mapping[str, Any]] = ()
    #: Kubernetes Events (reason, message, involvedObject), or a RayCluster's ReplicaFailure.
    events: Sequence[Mapping[str, Any]] = ()
    #: The runtime's report (status.trainerStatus) of this attempt, or {}.
    report: Mapping[str, Any] = field(default_factory=dict)
    #: spec.scaling.resourcesPerWorker.memory as written, for the OOM advice.
    worker_memory: str | None = None
    #: The head's memory limit as its pod gets it (spec.head.resources.limits.memory, or the
    #: operator's default said as such), for the OOM advice.
    head_memory: str | None = None
