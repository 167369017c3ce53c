"""Suspend and resume: the checkpoint asked for before a Ray cluster is removed, a Kueue queue's
admission, resuming a suspended RayJob, and waiting for an earlier attempt's RayJob to drain."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import ANNOTATION_CHECKPOINT_REQUESTED, ANNOTATION_SUSPENDED_BY_USER
from raytrain_contract.timefmt import parse_rfc3339, rfc3339
from raytrain_operator.status import conditions as c
from raytrain_operator.status.machine.observed import _cluster_start, _report, current_attempt
from raytrain_operator.status.machine.pass_builder import _advance, _Builder
from raytrain_operator.status.machine.plan_types import (
    PENDING,
    REQUEST_REUSE_MARGIN_SECONDS,
    RUNNING,
    SUSPENDED,
    Annotate,
    DeleteRayJob,
    Observation,
    Plan,
    SetRayJobSuspend,
)
from raytrain_operator.status.machine.spec_changes import _built_changes


def _queued(b: _Builder, queue: str) -> Plan:
    msg = f"waiting for Kueue to admit the RayJob from LocalQueue {queue}"
    b.set(c.SUSPENDED, True, "Queued", msg)
    b.set(c.RUNNING, False, "Queued", msg)
    b.set(c.RECONCILING, True, "Queued", msg)
    return b.finish(PENDING)


def _suspend(
    b: _Builder,
    name: str,
    rj_suspended: bool,
    deployment: str,
    job_status: str,
    phase: str | None,
    rj_status: Mapping[str, Any],
) -> Plan:
    obs = b.obs
    if rj_suspended:
        b.set(c.SUSPENDED, True, "Suspended", f"RayJob {name} is suspended; no Ray cluster runs")
        b.set(c.RUNNING, False, "Suspended", "")
        return b.finish(SUSPENDED)
    # The runtime can only checkpoint if it runs: the Ray job started and reports as Running.
    runtime_up = deployment == "Running" and (job_status == "RUNNING" or phase == RUNNING)
    requested = parse_rfc3339(obs.meta.annotations.get(ANNOTATION_CHECKPOINT_REQUESTED))
    if requested is not None and _stale_request(obs, requested, rj_status):
        requested = None
    if requested is None:
        # The request always precedes the suspend (the contract); it is waited on only when
        # a runtime is there to answer it. A request is never reused from an earlier suspend.
        b.actions.append(Annotate(ANNOTATION_CHECKPOINT_REQUESTED, rfc3339(obs.now)))
        if runtime_up:
            return _checkpointing(b, obs.checkpoint_grace_seconds)
    elif runtime_up:
        trainer = _report(
            obs.status, current_attempt(obs.status, obs.highest_attempt), _cluster_start(rj_status)
        )
        written = parse_rfc3339(trainer.get("lastUpdatedTime"))
        done = (
            trainer.get("checkpointing") is False and written is not None and written >= requested
        )
        waited = (obs.now - requested).total_seconds()
        if not done and waited < obs.checkpoint_grace_seconds:
            return _checkpointing(b, obs.checkpoint_grace_seconds - waited)
    b.actions.append(SetRayJobSuspend(name, True, by_user=True))
    b.set(c.SUSPENDED, True, "Suspended", f"suspending RayJob {name}; its Ray cluster is removed")
    b.set(c.RUNNING, False, "Suspended", "")
    return b.finish(SUSPENDED)


def _stale_request(obs: Observation, requested: datetime, rj_status: Mapping[str, Any]) -> bool:
    """A checkpoint request left from an earlier suspend: older than the running cluster, or
    older than one grace period and a resync (this suspend would have gone ahead by then)."""
    started = _cluster_start(rj_status)
    if started is not None and requested < started:
        return True
    age = (obs.now - requested).total_seconds()
    return age > obs.checkpoint_grace_seconds + REQUEST_REUSE_MARGIN_SECONDS


def _checkpointing(b: _Builder, left: float) -> Plan:
    msg = (
        "spec.suspend is true: waiting for the runtime to save a checkpoint "
        f"(at most {int(left)} s more) before the Ray cluster is removed"
    )
    b.set(c.RECONCILING, True, "Checkpointing", msg)
    b.due_in(left)
    return b.finish(RUNNING)


#: The end of a Retrying message, after the failure it names (failures.py, `_attempt_failure`).
_RETRY_CLAUSE = re.compile(r"; retry \d+ of \d+: once RayJob \S+ and its pods are gone, ")
_WHY = ". Why: "


def _why_retried(status: Mapping[str, Any]) -> str | None:
    """What the Retrying condition said of the failed attempt ("attempt N failed (...)"),
    kept while its RayJob goes: Retrying lasts one pass, the wait for the old RayJob longer,
    and an Event of the failure is gone after an hour."""
    before = c.find(status.get("conditions"), c.RECONCILING) or {}
    message = str(before.get("message") or "")
    if before.get("reason") == "Retrying":
        found = _RETRY_CLAUSE.search(message)
        return message[: found.start()] if found else None
    if before.get("reason") == "StoppingPreviousAttempt" and _WHY in message:
        return message.split(_WHY, 1)[1]
    return None


def _await_previous(b: _Builder, name: str) -> Plan:
    """Attempts never overlap: the next RayJob waits until the earlier ones and their pods are
    gone (they are deleted in the foreground, so a RayJob disappears after its pods)."""
    older = b.obs.older_rayjobs
    b.actions += [DeleteRayJob(n) for n, deleting in sorted(older.items()) if not deleting]
    msg = (
        f"waiting for RayJob {', '.join(sorted(older))} of an earlier attempt and its pods to be "
        f"deleted before RayJob {name} starts (two attempts never run at once)"
    )
    why = _why_retried(b.obs.status)
    if why:
        msg += f". Why: {why}"
    b.set(c.RUNNING, False, "StoppingPreviousAttempt", msg)
    b.set(c.RECONCILING, True, "StoppingPreviousAttempt", msg)
    b.due_in(2)
    return b.finish(PENDING)


def _resume(
    b: _Builder,
    tj: TrainJob,
    name: str,
    attempt: int,
    restarts: int,
    rj_annotations: Mapping[str, Any],
) -> Plan:
    """spec.suspend is false but the RayJob is suspended: resume it, or move to a new attempt
    when the spec changed meanwhile, or leave it to Kueue when Kueue (not the user) suspended
    it."""
    spec = tj.spec
    by_user = rj_annotations.get(ANNOTATION_SUSPENDED_BY_USER) == "true"
    if _built_changes(tj, rj_annotations) != []:
        # The spec changed while no cluster ran: a new attempt carries it (same run name).
        msg = (
            f"the spec changed while RayJob {name} was suspended; attempt {attempt + 1} "
            "carries it and resumes from the latest checkpoint"
        )
        _advance(b, attempt, restarts)
        b.set(c.SUSPENDED, False, "Resumed", msg)
        b.set(c.RUNNING, False, "Resuming", msg)
        b.set(c.RECONCILING, True, "Resuming", msg)
        return b.finish(PENDING)
    if spec.queue_name and not by_user:
        return _queued(b, spec.queue_name)
    b.actions.append(SetRayJobSuspend(name, False, by_user=False))
    msg = f"resuming RayJob {name} from the latest checkpoint"
    b.set(c.SUSPENDED, False, "Resumed", msg)
    b.set(c.RUNNING, False, "Resuming", msg)
    b.set(c.RECONCILING, True, "Resuming", msg)
    return b.finish(PENDING)
