"""Training that stops making progress, and the rank the others wait for.

The hang watch is a due time, not a poll: a running attempt's pass is due again when its
reports would be late (the runtime's ``lastProgressTime`` plus the hang timeout,
raytrain_contract.hang); every report is a status event that brings a pass and moves the due
time on. Once the timeout has passed, the attempt is hung. The runtime's own watch (in Ray
Train's controller) fires at the same timeout and sends where every rank was
(``trainerStatus.hang``); the operator waits up to ``STACKS_WAIT_SECONDS`` more for it, then
acts on ``spec.failure.onHang`` with the stacks or without them: Restart ends the attempt as a
failure of class Hung (retried from the latest checkpoint while spec.backoffLimit allows), Fail
fails the job, Report only says so in the Hung condition. The nodes of the ranks that held the
others up are kept in ``status.hangs``; a node named twice is avoided by the next attempt's
workers.

A straggler is named by the runtime (``trainerStatus.stepTime.straggler``, the same rank the
slowest in each of the latest reports by a margin): the Straggling condition says which rank,
pod and node, and by how much.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from raytrain_contract import hang
from raytrain_contract.api.v1alpha1 import OnHang, TrainJob
from raytrain_contract.timefmt import parse_rfc3339, rfc3339
from raytrain_operator.status import conditions as c
from raytrain_operator.status import triage
from raytrain_operator.status.machine.failures import _attempt_failed, retry_policy
from raytrain_operator.status.machine.pass_builder import _Builder, _fail, _Pass
from raytrain_operator.status.machine.plan_types import FAILED, RUNNING, DeleteRayJob, Plan

#: The Hung condition's reason while the attempt is hung and runs on (waiting for the ranks'
#: stacks, or spec.failure.onHang Report); the failure's reason is the class, Hung.
NO_PROGRESS = "NoProgress"
#: The Straggling condition's reason.
SLOW_RANK = "SlowRank"
#: status.hangs keeps this many entries; a node in AVOID_AFTER of them is avoided.
HANGS_KEPT = 10
AVOID_AFTER = 2


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def on_hang(tj: TrainJob) -> OnHang:
    """spec.failure.onHang, or its default (Restart)."""
    failure = tj.spec.failure
    return failure.on_hang if failure is not None and failure.on_hang else OnHang.RESTART


def configured_timeout(tj: TrainJob) -> int | None:
    failure = tj.spec.failure
    return failure.hang_timeout_seconds if failure is not None else None


def stacks_of(report: Mapping[str, Any], since: datetime) -> Mapping[str, Any] | None:
    """trainerStatus.hang when it was taken for this stall (its since is lastProgressTime)."""
    found = report.get("hang")
    if not isinstance(found, Mapping):
        return None
    taken_for = parse_rfc3339(found.get("since"))
    return found if taken_for is not None and taken_for == since else None


def _who(entry: Mapping[str, Any]) -> str:
    where = [f"pod {entry['pod']}"] if entry.get("pod") else []
    if entry.get("node"):
        where.append(f"node {entry['node']}")
    return f"rank {entry.get('rank')}" + (f" ({', '.join(where)})" if where else "")


def where_ranks_were(stacks: Mapping[str, Any] | None, name: str, attempt: int) -> str:
    """The ranks grouped by where they were, the likely cause and where the stacks are."""
    if stacks is None:
        return (
            f"The runtime sent no stacks within {int(hang.STACKS_WAIT_SECONDS)} s of the "
            "timeout (its driver may be stuck too, or the image's runtime predates the hang "
            f"watch); the driver's log may say more: raytrain logs {name} --attempt {attempt}"
        )
    groups = [g for g in stacks.get("groups") or [] if isinstance(g, Mapping)]
    ranks = [
        {"rank": r, "where": g.get("where"), "waiting": g.get("waiting")}
        for g in groups
        for r in g.get("ranks") or []
    ]
    workers = stacks.get("workers")
    text = "Where the ranks were: " + (
        hang.describe_ranks(ranks, workers if isinstance(workers, int) else None) or "no rank"
    )
    unanswered = [r for r in stacks.get("unanswered") or [] if isinstance(r, int)]
    if unanswered:
        text += f" (no answer from rank {', '.join(map(str, unanswered))})"
    suspects = [s for s in stacks.get("suspects") or [] if isinstance(s, Mapping)]
    if suspects:
        text += ". Not waiting on the others, so the likely cause: " + ", ".join(
            _who(s) for s in suspects
        )
    return text + f". Every rank's stacks: raytrain logs {name} --attempt {attempt} --stacks"


def no_progress(
    report: Mapping[str, Any], quiet: float, timeout: float, configured: int | None
) -> str:
    """Which step and epoch were last, how long ago, what was expected."""
    step, epoch = report.get("step"), report.get("epoch")
    if report.get("attemptReports") == 0:
        last = "the start of this attempt's training (it has not reported yet)"
    else:
        last = f"step {step}" if step is not None else "its last report"
        if epoch is not None:
            last += f" (epoch {epoch})"
    interval = _number(report.get("reportIntervalSeconds"))
    expected = (
        f"reports came every {interval:.3g} s (the median), "
        if interval is not None
        else "the attempt has not made two reports yet, "
    )
    return (
        f"no training report for {quiet:.0f} s, since {last} at "
        f"{report.get('lastProgressTime')}; {expected}and the hang timeout is {timeout:g} s "
        f"({hang.describe_timeout(configured, interval)})"
    )


def hang_nodes(status: Mapping[str, Any]) -> tuple[str, ...]:
    """Nodes named in at least AVOID_AFTER of status.hangs: the next attempt avoids them."""
    counts: dict[str, int] = {}
    for entry in status.get("hangs") or []:
        for node in set((entry or {}).get("nodes") or []):
            counts[str(node)] = counts.get(str(node), 0) + 1
    return tuple(sorted(n for n, k in counts.items() if k >= AVOID_AFTER))


def _record(b: _Builder, attempt: int, stacks: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    nodes: list[str] = []
    for entry in (stacks or {}).get("suspects") or []:
        node = (entry or {}).get("node")
        if node and node not in nodes:
            nodes.append(str(node))
    kept = [dict(e) for e in b.obs.status.get("hangs") or [] if e.get("attempt") != attempt]
    kept.append({"attempt": attempt, "time": rfc3339(b.obs.now), "nodes": nodes})
    return kept[-HANGS_KEPT:]


def _avoided(nodes: Sequence[str]) -> str:
    if not nodes:
        return ""
    return (
        f"; node {', '.join(nodes)} held up the ranks in two hangs: the next attempt's workers "
        "avoid it when another node can take them"
    )


def hang_watch(b: _Builder, p: _Pass) -> Plan | None:
    """The attempt trains (the runtime of this cluster reported Running): due again when its
    reports would be late; once they are, it is hung and spec.failure.onHang decides.

    After the suspend and resume stages and the pending spec change, right before `_running`:
    only a running attempt is watched, and a hung one that runs on (Report, or waiting for
    the stacks) is still Running.
    """
    phase, _ = p.trainer
    if p.deployment != "Running" or phase != RUNNING:
        return None
    report = p.report
    since = parse_rfc3339(report.get("lastProgressTime"))
    if since is None:
        return None  # a runtime that predates the watch: its reports say nothing of progress
    tj = p.tj
    configured = configured_timeout(tj)
    timeout = hang.timeout_seconds(configured, _number(report.get("reportIntervalSeconds")))
    if timeout is None:
        return None
    quiet = (b.obs.now - since).total_seconds()
    if quiet < timeout:
        b.due_in(timeout - quiet)
        return None
    what = no_progress(report, quiet, timeout, configured)
    stacks = stacks_of(report, since)
    waited = quiet - timeout
    name = b.obs.meta.name
    if stacks is None and waited < hang.STACKS_WAIT_SECONDS:
        left = hang.STACKS_WAIT_SECONDS - waited
        b.set(
            c.HUNG,
            True,
            NO_PROGRESS,
            f"{what}. Waiting up to {left:.0f} s more for the stacks of every rank, then "
            f"spec.failure.onHang ({on_hang(tj).value}) applies",
        )
        b.due_in(left)
        return None
    message = f"{what}. {where_ranks_were(stacks, name, p.attempt)}"
    action = on_hang(tj)
    if action is OnHang.REPORT:
        b.set(
            c.HUNG,
            True,
            NO_PROGRESS,
            f"{message}. spec.failure.onHang is Report: the attempt runs on, and this condition "
            "goes once its reports come again",
        )
        return None
    b.status["hangs"] = _record(b, p.attempt, stacks)
    b.hung_since = since
    avoided = _avoided(hang_nodes({"hangs": b.status["hangs"]}))
    found = triage.Triage(triage.FailureClass.HUNG, message + avoided)
    if action is OnHang.FAIL:
        b.failure = found
        b.actions.append(DeleteRayJob(p.name))
        return _fail(
            b,
            triage.FailureClass.HUNG.value,
            f"attempt {p.attempt} failed (Hung): {message}. spec.failure.onHang is Fail: its "
            f"RayJob {p.name} was deleted and no retry is made",
        )
    if tj.spec.backoff_limit == 0 and triage.retry_decision(
        triage.FailureClass.HUNG, None, retry_policy(tj)
    ):
        b.failure = found
        b.actions.append(DeleteRayJob(p.name))
        return _fail(
            b,
            triage.FailureClass.HUNG.value,
            f"attempt {p.attempt} failed (Hung): {message}{avoided}. spec.failure.onHang is "
            "Restart, but spec.backoffLimit is 0, so no attempt is retried: its RayJob "
            f"{p.name} was deleted. Set spec.backoffLimit to restart a hung attempt from its "
            "latest checkpoint",
        )
    plan = _attempt_failed(b, tj, p.attempt, p.restarts, ("Hung", ""), found)
    if plan.phase == FAILED:
        # The attempt still holds its pods (it hangs, it did not end): end it.
        plan.actions.append(DeleteRayJob(p.name))
    return plan


def stragglers(b: _Builder, p: _Pass) -> Plan | None:
    """Decides nothing: the Straggling condition names the rank the others wait for, while
    the runtime of this running attempt names one (trainerStatus.stepTime.straggler).

    Beside the hang watch: a straggler slows an attempt that still makes progress.
    """
    phase, _ = p.trainer
    if p.deployment != "Running" or phase != RUNNING:
        return None
    step = p.report.get("stepTime")
    if not isinstance(step, Mapping) or step.get("straggler") is not True:
        return None
    slowest = step.get("slowest") or {}
    busy = _number(slowest.get("busySeconds")) or 0.0
    median = _number(step.get("medianBusySeconds")) or 0.0
    wall = _number(step.get("wallSeconds")) or 0.0
    skew = _number(step.get("skewPercent")) or 0.0
    reports = step.get("reports") or hang.STRAGGLER_REPORTS
    b.set(
        c.STRAGGLING,
        True,
        SLOW_RANK,
        f"{_who(slowest)} is the slowest rank in each of the last {reports} reports: it works "
        f"{busy:.3g} s between two reports where the median rank works {median:.3g} s, "
        f"{skew:.0f}% of the {wall:.3g} s a report takes, and the other ranks wait for it. "
        "Look at that node (a throttled CPU or GPU, a slow disk, a noisy neighbour) or at that "
        "rank's share of the data",
    )
    return None
