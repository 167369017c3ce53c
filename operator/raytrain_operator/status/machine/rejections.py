"""Checkpoints a resume passed over: each new entry of status.checkpoint.rejected is announced
once, as a Warning Event `CheckpointRejected` on the TrainJob.

The runtime checks a run's checkpoints against their manifests before it resumes, and writes
those that failed into status.checkpoint.rejected (newest last, at most 20, the whole list with
every write) together with the checkpoint it resumed from instead (resumedFrom, resumedAttempt).
A pass reads the TrainJob as it is now, with nothing of what earlier passes read, and the
operator may restart or hand over to another instance between two passes: so what was
announced is kept in the TrainJob itself, in status.announcedRejection, an operator-owned field
written by the same status patch as the rest of the pass. It holds the newest entry announced;
the entries after it in the list are new. When the list no longer holds it (more than 20 new
ones at once), every entry is new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The Event's reason.
REASON = "CheckpointRejected"
#: The status field the operator keeps the newest announced entry in.
ANNOUNCED = "announcedRejection"
#: What names an entry: the checkpoint, the attempt that checked it, when.
_KEY = ("uri", "attempt", "time")
NONE_USED = "no checkpoint could be used"


def _key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(entry.get(k) for k in _KEY)


def new_entries(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The entries of status.checkpoint.rejected not announced yet, oldest first."""
    rejected = (status.get("checkpoint") or {}).get("rejected")
    if not isinstance(rejected, list):
        return []
    entries: Sequence[Mapping[str, Any]] = [
        e for e in rejected if isinstance(e, Mapping) and e.get("uri")
    ]
    announced = status.get(ANNOUNCED)
    if isinstance(announced, Mapping):
        marker = _key(announced)
        for i in range(len(entries) - 1, -1, -1):
            if _key(entries[i]) == marker:
                return list(entries[i + 1 :])
    return list(entries)


def marker(entry: Mapping[str, Any]) -> dict[str, Any]:
    """status.announcedRejection for `entry`: what names it, nothing more."""
    return {k: entry[k] for k in _KEY if entry.get(k) is not None}


def used_instead(checkpoint: Mapping[str, Any], attempt: Any) -> str:
    """The checkpoint the attempt that rejected an entry resumed from, or NONE_USED."""
    resumed = checkpoint.get("resumedFrom")
    same = attempt is not None and checkpoint.get("resumedAttempt") == attempt
    return f"resumed from {resumed} instead" if resumed and same else NONE_USED


def message(entry: Mapping[str, Any], checkpoint: Mapping[str, Any]) -> str:
    """The Event's message: the checkpoint, what was wrong with it, what was used instead."""
    attempt = entry.get("attempt")
    by = f" by attempt {attempt}" if attempt is not None else ""
    problem, reason = entry.get("problem"), entry.get("reason")
    what = str(reason or problem or "it failed its check")
    if problem and reason:
        what = f"{what} ({problem})"
    return f"checkpoint {entry['uri']} rejected{by}: {what}; {used_instead(checkpoint, attempt)}"
