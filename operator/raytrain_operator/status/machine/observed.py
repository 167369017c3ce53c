"""Reading what a pass observed: whether the job ended, which attempt it is at, the runtime's
report of the current cluster, and that cluster's time for status.goodput."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from raytrain_contract.meta import LABEL_ATTEMPT
from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator.status import conditions as c
from raytrain_operator.status import goodput
from raytrain_operator.status.machine.plan_types import ANNOTATION_CLEANED_UP, Observation


def is_terminal(status: Mapping[str, Any]) -> bool:
    conds = status.get("conditions")
    return c.is_true(conds, c.SUCCEEDED) or c.is_true(conds, c.FAILED)


def needs_operator(
    status: Mapping[str, Any], ttl_seconds: Any, annotations: Mapping[str, Any]
) -> bool:
    """Whether the operator still has work on a TrainJob: it has not finished, or it finished
    with a spec.ttlSecondsAfterFinished whose clean-up has not happened yet.

    Only such a job gets passes from the wake-up queue (the resync among them): a finished job
    without pending clean-up gets none.
    """
    if not is_terminal(status):
        return True
    return ttl_seconds is not None and ANNOTATION_CLEANED_UP not in annotations


def current_attempt(status: Mapping[str, Any], highest_attempt: int | None) -> int:
    """The attempt the job is at: the status' word, but never below a RayJob that exists.

    A status patch can be lost (a crash, a conflict) or read from an older snapshot; the RayJobs
    themselves, labelled with their attempt, cannot be: no pass ever goes back to an attempt
    lower than the highest one that was created.
    """
    try:
        attempt = int(status.get("attempt") or 0)
    except (TypeError, ValueError):
        attempt = 0
    return max(attempt, highest_attempt or 0)


def needs_preflight(obs_status: Mapping[str, Any], rayjob: Mapping[str, Any] | None) -> bool:
    """The storage preflight runs only before a RayJob is created."""
    return rayjob is None and not is_terminal(obs_status)


def attempt_of(rayjob: Mapping[str, Any]) -> int | None:
    labels = (rayjob.get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_ATTEMPT)
    return int(value) if value is not None and str(value).isdigit() else None


def _owned_by(rayjob: Mapping[str, Any], uid: str) -> bool:
    refs = (rayjob.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def _cluster_start(rj_status: Mapping[str, Any]) -> datetime | None:
    """When KubeRay started the RayJob's current cluster (reset on every resume)."""
    return parse_rfc3339(rj_status.get("startTime"))


def _report(
    status: Mapping[str, Any], attempt: int, cluster_start: datetime | None
) -> Mapping[str, Any]:
    """The runtime's report if it comes from this attempt's current cluster, else {}.

    A report names its attempt (from the pod's environment); one from another attempt does not
    count. Within an attempt, a report written before the current cluster started comes from
    an earlier cluster of the same RayJob (before a suspend or a Kueue preemption).
    """
    trainer = status.get("trainerStatus") or {}
    reported_attempt = trainer.get("attempt")
    if reported_attempt is not None and reported_attempt != attempt:
        return {}
    written = parse_rfc3339(trainer.get("lastUpdatedTime"))
    if cluster_start is not None and written is not None and written < cluster_start:
        return {}
    return trainer


def _trainer_phase(report: Mapping[str, Any]) -> tuple[str | None, str]:
    return report.get("phase"), str(report.get("message") or "")


def _waiting_since(status: Mapping[str, Any], rj_meta: Mapping[str, Any]) -> datetime | None:
    """Since when the current attempt's cluster has been asked for: its RayJob's creation, or
    the latest resume (Suspended turning False) when that came later."""
    created = parse_rfc3339(rj_meta.get("creationTimestamp"))
    suspended = c.find(status.get("conditions"), c.SUSPENDED)
    resumed = None
    if suspended is not None and suspended.get("status") == "False":
        resumed = parse_rfc3339(suspended.get("lastTransitionTime"))
    found = [t for t in (created, resumed) if t is not None]
    return max(found) if found else None


def _seen(obs: Observation, attempt: int) -> goodput.Seen | None:
    """The current attempt's cluster as this pass saw it, or None before KubeRay started it."""
    rj = obs.rayjob
    if rj is None:
        return None
    rj_status = rj.get("status") or {}
    start = _cluster_start(rj_status)
    if start is None:
        return None
    deployment = str(rj_status.get("jobDeploymentStatus") or "")
    suspended = bool((rj.get("spec") or {}).get("suspend"))
    ended = deployment in ("Complete", "Failed", "Suspending", "Suspended", "ValidationFailed")
    return goodput.Seen(
        attempt=attempt,
        start=start,
        end=parse_rfc3339(rj_status.get("endTime")),
        gpus=goodput.rayjob_gpus(rj),
        up=not suspended and not ended and not (rj.get("metadata") or {}).get("deletionTimestamp"),
        suspended=suspended or deployment in ("Suspending", "Suspended"),
        report=_report(obs.status, attempt, start),
        checkpoint=obs.status.get("checkpoint") or {},
    )
