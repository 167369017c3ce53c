"""Goodput: of the time a job held a Ray cluster, how much produced training that was kept, and
how much was lost to restarts, to hangs and to recomputing work after the last checkpoint.

Pure, like the machine that calls it once a pass. The operator keeps a ledger in
`status.goodput.clusters`: one entry per Ray cluster a RayJob started (a new attempt, or a
resume after a suspend), with KubeRay's start of that cluster, its end (or the latest pass that
saw it up), the first and last runtime report the operator saw from it and the latest checkpoint
time the runtime wrote while it ran. Every total is recomputed from the ledger, so a pass seen
twice counts nothing twice. Reports are seen as the operator read them, not each one the runtime
made: a report overwritten before a pass read it is not seen, so the numbers are lower bounds
of what they name.

A number the operator cannot know is None (absent from the status), never 0: with no
`checkpoint.lastTime` from the runtime (an older runtime), the work kept by an interrupted
cluster cannot be told from the work lost, so productive and lost are absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from raytrain_contract.api.v1alpha1 import GPU_RESOURCE_NAME
from raytrain_contract.timefmt import parse_rfc3339, rfc3339

#: How a cluster's time ended. Running: up at the latest pass. Succeeded: the training finished.
#: Retried: its attempt failed and another attempt follows. Failed: its attempt failed the job.
#: Suspended: spec.suspend (or Kueue) removed it; the job resumes from its checkpoint.
RUNNING, SUCCEEDED, RETRIED, FAILED, SUSPENDED = (
    "Running",
    "Succeeded",
    "Retried",
    "Failed",
    "Suspended",
)
#: Ledger entries kept; older ones are folded into status.goodput.earlier.
MAX_CLUSTERS = 32
#: While only the clock moves the numbers (a running cluster's end, a restart gap), they are
#: rewritten at most this often: each rewrite is a status patch of every running job.
REFRESH_SECONDS = 300.0
KINDS = ("allocated", "productive", "lost")


@dataclass(frozen=True)
class Seen:
    """What one pass observed of the current attempt's cluster."""

    attempt: int
    #: KubeRay's status.startTime of the RayJob (the cluster's start; reset on a resume).
    start: datetime
    #: KubeRay's status.endTime, if it set one.
    end: datetime | None
    #: GPUs the RayJob's pods ask for (every group, times its replicas).
    gpus: float
    #: The cluster is up at this pass (not suspended, not finished, not being deleted).
    up: bool
    #: The RayJob is suspended or being suspended.
    suspended: bool
    #: This attempt's runtime report from this cluster (status.trainerStatus), or {}.
    report: Mapping[str, Any]
    #: status.checkpoint as the runtime wrote it.
    checkpoint: Mapping[str, Any]


def rayjob_gpus(rayjob: Mapping[str, Any]) -> float:
    """GPUs the RayJob's pods ask for: limits (else requests) of every GPU resource name in every
    container, times the replicas of its group (the head counts once)."""
    cluster = (rayjob.get("spec") or {}).get("rayClusterSpec") or {}
    groups: list[tuple[Mapping[str, Any], float]] = []
    head = cluster.get("headGroupSpec")
    if head:
        groups.append((head, 1.0))
    for group in cluster.get("workerGroupSpecs") or []:
        replicas = group.get("replicas")
        groups.append((group, float(replicas if isinstance(replicas, int) else 1)))
    total = 0.0
    for group, replicas in groups:
        spec = (group.get("template") or {}).get("spec") or {}
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            amounts = resources.get("limits") or resources.get("requests") or {}
            for name, value in amounts.items():
                if GPU_RESOURCE_NAME.match(str(name)):
                    try:
                        total += float(value) * replicas
                    except (TypeError, ValueError):
                        continue
    return total


def _t(value: Any) -> datetime | None:
    return parse_rfc3339(value)


def _seconds(later: datetime | None, earlier: datetime | None) -> float:
    if later is None or earlier is None:
        return 0.0
    return max((later - earlier).total_seconds(), 0.0)


def update_ledger(
    entries: Sequence[Mapping[str, Any]],
    seen: Seen | None,
    outcome: str | None,
    now: datetime,
    hung_since: datetime | None = None,
) -> list[dict[str, Any]]:
    """The ledger after this pass: the current cluster's entry added or brought up to date.

    `outcome` is what this pass decided for the cluster (Succeeded, Retried, Failed, Suspended),
    or None while it runs on; `hung_since`, the last progress of a cluster this pass ends as
    hung. A closed entry's end never moves again.
    """
    ledger = [dict(e) for e in entries]
    if seen is None:
        return ledger
    start = rfc3339(seen.start)
    entry = next(
        (e for e in ledger if e.get("attempt") == seen.attempt and e.get("start") == start), None
    )
    if entry is None:
        if not seen.up and outcome is None:
            return ledger  # a suspended or queued RayJob whose cluster this operator never saw
        entry = {"attempt": seen.attempt, "start": start, "outcome": RUNNING}
        ledger.append(entry)
    entry["gpus"] = seen.gpus
    if entry.get("outcome") == RUNNING:
        end = seen.end if seen.end is not None and seen.end >= seen.start else None
        if end is not None:
            entry["end"] = rfc3339(end)
        elif seen.up or "end" not in entry:
            entry["end"] = rfc3339(now)
        # else: a cluster seen gone without an end from KubeRay keeps the last pass that saw it
        # up (it went away somewhere after; no more is claimed)
        if outcome is not None:
            entry["outcome"] = outcome
            if hung_since is not None:
                entry["hungSince"] = rfc3339(hung_since)
    written = _t(seen.report.get("lastUpdatedTime"))
    if written is not None:
        first, last = _t(entry.get("firstReport")), _t(entry.get("lastReport"))
        if first is None or written < first:
            entry["firstReport"] = rfc3339(written)
        if last is None or written > last:
            entry["lastReport"] = rfc3339(written)
    ckpt_time = _t(seen.checkpoint.get("lastTime"))
    if ckpt_time is not None:
        if ckpt_time >= seen.start:
            entry["lastCheckpoint"] = rfc3339(ckpt_time)
            entry.pop("checkpointTimeUnknown", None)
    elif seen.checkpoint.get("count") and written is not None:
        # A runtime that reports checkpoints without their time: which work they kept is unknown.
        entry["checkpointTimeUnknown"] = True
    return ledger


@dataclass
class Totals:
    """Seconds and GPU-seconds by kind; None where the operator cannot know the number."""

    allocated: float = 0.0
    productive: float | None = 0.0
    lost_restart: float = 0.0
    lost_recompute: float | None = 0.0
    lost_hang: float = 0.0
    allocated_gpu: float = 0.0
    productive_gpu: float | None = 0.0
    lost_gpu: float | None = 0.0

    @property
    def lost(self) -> float | None:
        if self.lost_recompute is None:
            return None
        return self.lost_restart + self.lost_recompute + self.lost_hang


def _add(total: float | None, value: float | None) -> float | None:
    return None if total is None or value is None else total + value


def _last_report(entry: Mapping[str, Any]) -> datetime | None:
    """The cluster's last seen report; for one ended as hung, no later than its last progress
    (the runtime's report of the hang itself is no training)."""
    last, hung = _t(entry.get("lastReport")), _t(entry.get("hungSince"))
    if last is not None and hung is not None:
        return min(last, hung)
    return last


def _kept_until(entry: Mapping[str, Any]) -> tuple[datetime | None, bool]:
    """Until when an interrupted cluster's work was kept (its last checkpoint, if it made one),
    and whether that is known."""
    first, last = _t(entry.get("firstReport")), _last_report(entry)
    ckpt = _t(entry.get("lastCheckpoint"))
    if entry.get("checkpointTimeUnknown") and ckpt is None:
        return None, False
    if ckpt is None or first is None:
        return first, True  # no checkpoint in this cluster: nothing it did was kept
    return min(max(ckpt, first), last or ckpt), True


def totals(
    ledger: Sequence[Mapping[str, Any]], now: datetime, active: bool, earlier: Mapping[str, Any]
) -> Totals:
    """Every number from the ledger; `active`: the job has not finished (a retried attempt's
    loss then runs on until the next attempt's first report)."""
    out = Totals(
        allocated=float(earlier.get("allocatedSeconds") or 0.0),
        productive=earlier.get("productiveSeconds", 0.0),
        lost_restart=float(earlier.get("lostToRestartSeconds") or 0.0),
        lost_recompute=earlier.get("lostToRecomputeSeconds", 0.0),
        lost_hang=float(earlier.get("lostToHangSeconds") or 0.0),
        allocated_gpu=float(earlier.get("allocatedGPUSeconds") or 0.0),
        productive_gpu=earlier.get("productiveGPUSeconds", 0.0),
        lost_gpu=earlier.get("lostGPUSeconds", 0.0),
    )
    for i, entry in enumerate(ledger):
        gpus = float(entry.get("gpus") or 0.0)
        start, end = _t(entry.get("start")), _t(entry.get("end"))
        first, last = _t(entry.get("firstReport")), _last_report(entry)
        held = _seconds(end, start)
        out.allocated += held
        out.allocated_gpu += held * gpus
        outcome = entry.get("outcome")
        if outcome in (RUNNING, SUCCEEDED):
            kept: float | None = _seconds(last, first)
        else:
            until, known = _kept_until(entry)
            kept = _seconds(until, first) if known else None
        out.productive = _add(out.productive, kept)
        out.productive_gpu = _add(out.productive_gpu, None if kept is None else kept * gpus)
        hung = _t(entry.get("hungSince"))
        if hung is not None and outcome in (RETRIED, FAILED):
            # hung: from its last progress to its end the cluster held its pods for nothing
            stuck = _seconds(end, hung)
            out.lost_hang += stuck
            out.lost_gpu = _add(out.lost_gpu, stuck * gpus)
        if outcome != RETRIED:
            continue
        # recompute: the training after this cluster's last checkpoint, done again by the next
        until, known = _kept_until(entry)
        redo = _seconds(last, until) if known else None
        out.lost_recompute = _add(out.lost_recompute, redo)
        out.lost_gpu = _add(out.lost_gpu, None if redo is None else redo * gpus)
        # restart: from the failure to the next attempt's first report (or now, while none came)
        nxt = ledger[i + 1] if i + 1 < len(ledger) else None
        resumed = _t(nxt.get("firstReport")) if nxt is not None else None
        until_report = resumed or (now if active else None)
        if until_report is None:
            continue
        out.lost_restart += _seconds(until_report, end)
        if nxt is not None:
            # GPUs are held in that gap only once the next cluster started
            held_from = max(end, _t(nxt.get("start")) or end) if end is not None else None
            gap = _seconds(until_report, held_from)
            out.lost_gpu = _add(out.lost_gpu, gap * float(nxt.get("gpus") or 0.0))
    return out


def _final(entry: Mapping[str, Any], nxt: Mapping[str, Any] | None) -> bool:
    """Whether an entry's numbers can no longer change (it may be folded)."""
    if entry.get("outcome") == RUNNING:
        return False
    if entry.get("outcome") == RETRIED:
        return nxt is not None and nxt.get("firstReport") is not None
    return True


def _fold(
    ledger: list[dict[str, Any]], earlier: Mapping[str, Any], now: datetime
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Fold the oldest final entries into `earlier` while the ledger is longer than its cap."""
    folded = dict(earlier)
    while len(ledger) > MAX_CLUSTERS and _final(ledger[0], ledger[1]):
        part = totals(ledger[:2], now, True, {})
        second = totals(ledger[1:2], now, True, {})
        # the first entry's share: both minus the second alone (its restart loss needs the next)
        for key, a, b in (
            ("allocatedSeconds", part.allocated, second.allocated),
            ("productiveSeconds", part.productive, second.productive),
            ("lostToRestartSeconds", part.lost_restart, second.lost_restart),
            ("lostToRecomputeSeconds", part.lost_recompute, second.lost_recompute),
            ("lostToHangSeconds", part.lost_hang, second.lost_hang),
            ("allocatedGPUSeconds", part.allocated_gpu, second.allocated_gpu),
            ("productiveGPUSeconds", part.productive_gpu, second.productive_gpu),
            ("lostGPUSeconds", part.lost_gpu, second.lost_gpu),
        ):
            share = None if a is None or b is None else a - b
            have = folded.get(key, 0.0)
            folded[key] = None if share is None or have is None else have + share
        ledger = ledger[1:]
    return ledger, folded


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def account(
    status: Mapping[str, Any],
    seen: Seen | None,
    outcome: str | None,
    now: datetime,
    active: bool,
    *,
    hung_since: datetime | None = None,
) -> dict[str, Any]:
    """status.goodput after this pass (None for a number that is not known: the merge patch
    removes it); `hung_since` as update_ledger's."""
    before = status.get("goodput") or {}
    ledger = update_ledger(before.get("clusters") or [], seen, outcome, now, hung_since)
    ledger, earlier = _fold(ledger, before.get("earlier") or {}, now)
    if not ledger and not earlier:
        return {}
    t = totals(ledger, now, active, earlier)
    out: dict[str, Any] = {
        "allocatedSeconds": _round(t.allocated),
        "productiveSeconds": _round(t.productive),
        "lostSeconds": _round(t.lost),
        "lostToRestartSeconds": _round(t.lost_restart),
        "lostToRecomputeSeconds": _round(t.lost_recompute),
        # Absent while no attempt hung: most jobs never do, and their status stays as it was.
        "lostToHangSeconds": _round(t.lost_hang) if t.lost_hang else None,
        "allocatedGPUSeconds": _round(t.allocated_gpu),
        "productiveGPUSeconds": _round(t.productive_gpu),
        "lostGPUSeconds": _round(t.lost_gpu),
        "clusters": ledger,
        "earlier": earlier or None,
    }
    # None removes a number the status holds (the patch merges); one it never held is left out,
    # so a pass that changes nothing writes nothing.
    out = {k: v for k, v in out.items() if v is not None or k in before}
    if before and {k: v for k, v in before.items() if k != "asOf"} == out:
        return dict(before)
    if before and _clock_only(before, out):
        as_of = _t(before.get("asOf"))
        if as_of is not None and 0 <= (now - as_of).total_seconds() < REFRESH_SECONDS:
            return dict(before)
    out["asOf"] = rfc3339(now)
    return out


def _clock_only(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether two accounts differ only in what time alone moves: the end of a running
    cluster's entry and the totals computed from it (a restart gap grows the same way)."""

    def events(account: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Any]:
        clusters = []
        for entry in account.get("clusters") or []:
            entry = dict(entry)
            if entry.get("outcome") == RUNNING:
                entry.pop("end", None)
            clusters.append(entry)
        return clusters, account.get("earlier")

    return events(before) == events(after)
