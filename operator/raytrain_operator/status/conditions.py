"""metav1.Condition bookkeeping: which conditions exist, when they transitioned, what changed.

`Created`, `Running`, `Suspended`, `Succeeded` and `Failed` are always present (True or False).
`Reconciling` and `Stalled` follow kstatus' abnormal-true convention: present only while true, and
so do `Hung` (no training report for the hang timeout) and `Straggling` (a rank the others wait
for).
Every condition carries the generation it was computed from, refreshed on every pass, because
`kubectl wait` ignores a condition whose observedGeneration is older than the object's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CREATED = "Created"
RUNNING = "Running"
SUSPENDED = "Suspended"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
RECONCILING = "Reconciling"
STALLED = "Stalled"
HUNG = "Hung"
STRAGGLING = "Straggling"

ALWAYS_PRESENT = (CREATED, RUNNING, SUSPENDED, SUCCEEDED, FAILED)
ONLY_WHILE_TRUE = (RECONCILING, STALLED, HUNG, STRAGGLING)
ORDER = ALWAYS_PRESENT + ONLY_WHILE_TRUE
#: Messages quote Ray and the runtime (a traceback can be long); keep objects and Events small.
MAX_MESSAGE = 4096


@dataclass(frozen=True)
class Desired:
    status: bool
    reason: str
    message: str = ""

    def __post_init__(self) -> None:
        if len(self.message) > MAX_MESSAGE:
            cut = self.message[: MAX_MESSAGE - 20] + " ... (truncated)"
            object.__setattr__(self, "message", cut)


#: Conditions whose end is news of its own: a job resumed, a problem resolved, training that
#: makes progress again, a straggler caught up. Any other condition that turns False does so
#: because another one turned True (Running ends with Succeeded, Failed or Suspended), and that
#: one's Event says why.
ANNOUNCED_WHEN_CLEARED = (SUSPENDED, STALLED, HUNG, STRAGGLING)


@dataclass(frozen=True)
class Transition:
    """A condition whose status or reason changed."""

    type: str
    status: str
    reason: str
    message: str
    #: Its status before the change ("" when it had none).
    previous: str = ""

    @property
    def is_warning(self) -> bool:
        return self.status == "True" and self.type in (FAILED, STALLED, HUNG, STRAGGLING)

    @property
    def announced(self) -> bool:
        """Whether it becomes a Kubernetes Event: a condition that is True (new, or with a new
        reason), and one of ANNOUNCED_WHEN_CLEARED once cleared. A False condition whose
        reason changes (Failed is False because the training succeeded) and a condition
        cleared because another turned True are in the status only: an Event each would be a
        write per condition per transition, and noise in `kubectl describe`."""
        if self.status == "True":
            return True
        return self.type in ANNOUNCED_WHEN_CLEARED and self.previous == "True"


def _status(value: bool) -> str:
    return "True" if value else "False"


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions or [])


def find(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for c in conditions or []:
        if c.get("type") == type_:
            return c
    return None


def merge(
    old: Sequence[Mapping[str, Any]] | None,
    desired: Mapping[str, Desired],
    generation: int,
    now: str,
) -> tuple[list[dict[str, Any]], list[Transition]]:
    """New condition list and the transitions from `old` to it.

    An always-present type missing from `desired` keeps its old value (with a refreshed
    observedGeneration), or starts False with reason `Pending`; a missing Reconciling/Stalled
    is removed.
    """
    previous = {str(c.get("type")): dict(c) for c in old or []}
    result: list[dict[str, Any]] = []
    transitions: list[Transition] = []
    for type_ in ORDER:
        before = previous.get(type_)
        want = desired.get(type_)
        if want is None and type_ in ONLY_WHILE_TRUE:
            want = Desired(False, "Resolved", "")
        if want is None:
            if before is None:
                want = Desired(False, "Pending", "")
            else:
                want = Desired(
                    before.get("status") == "True",
                    str(before.get("reason") or "Pending"),
                    str(before.get("message") or ""),
                )
        status = _status(want.status)
        if type_ in ONLY_WHILE_TRUE and not want.status:
            if before is not None and before.get("status") == "True":
                transitions.append(Transition(type_, "False", want.reason, want.message, "True"))
            continue
        changed = before is None or before.get("status") != status
        reason_changed = before is not None and before.get("reason") != want.reason
        if (changed or reason_changed) and not (before is None and status == "False"):
            was = str(before.get("status") or "") if before is not None else ""
            transitions.append(Transition(type_, status, want.reason, want.message, was))
        last = now if changed or before is None else str(before.get("lastTransitionTime") or now)
        result.append(
            {
                "type": type_,
                "status": status,
                "observedGeneration": generation,
                "lastTransitionTime": last,
                "reason": want.reason,
                "message": want.message,
            }
        )
    # Conditions written by someone else (unknown types) are kept as they are.
    result += [dict(c) for t, c in previous.items() if t not in ORDER]
    return result, transitions
