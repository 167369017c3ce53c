"""One reconcile pass: observe, plan (pure), act, report. Shared by every TrainJob handler."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from raytrain_operator import k8s, metrics
from raytrain_operator.api.v1alpha1 import TrainJob
from raytrain_operator.builders.meta import Meta
from raytrain_operator.builders.names import name_problems, rayjob_name
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.handlers import apply, preflight
from raytrain_operator.settings import CONFIG
from raytrain_operator.status import conditions, machine

Logger = logging.Logger | logging.LoggerAdapter[Any]


def parse(body: Mapping[str, Any]) -> tuple[TrainJob | None, str | None]:
    """The TrainJob model, or the reason the spec cannot be used (names the field)."""
    try:
        trainjob = TrainJob.model_validate(
            {"metadata": dict(body.get("metadata") or {}), "spec": dict(body.get("spec") or {})}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, f"{where}: {first['msg']}; fix this field of the TrainJob"
    meta = Meta.from_metadata(body["metadata"])
    problems = name_problems(meta.name)
    if problems:
        return trainjob, problems[0]
    try:
        build_rayjob(trainjob, meta, 0, suspend=False)
    except ValueError as exc:
        return trainjob, f"{exc}; fix this field of the TrainJob"
    return trainjob, None


def lookup_rayjob(index: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The RayJob from the in-memory index; the API when the index has not seen it (yet)."""
    if index is not None:
        store = index.get((namespace, name))
        if store:
            for value in store:
                metrics.RAYJOB_LOOKUPS.labels(source="index").inc()
                return dict(value)
    metrics.RAYJOB_LOOKUPS.labels(source="api").inc()
    return k8s.get_rayjob(namespace, name)


def with_cluster_workers(rayjob: dict[str, Any], index: Any) -> dict[str, Any]:
    """The RayJob with its cluster's worker counts taken from the RayCluster itself.

    The RayJob's `status.rayClusterStatus` is KubeRay's copy, refreshed only when KubeRay reaches
    the Ray dashboard; the RayCluster's own status is current.
    """
    if index is None:
        return rayjob
    meta = rayjob.get("metadata") or {}
    status = dict(rayjob.get("status") or {})
    for entry in index.get((meta.get("namespace"), meta.get("name")), ()):
        if status.get("rayClusterName") not in (None, entry["name"]):
            continue
        cluster = dict(status.get("rayClusterStatus") or {})
        for key in ("desiredWorkerReplicas", "readyWorkerReplicas"):
            if entry.get(key) is not None:
                cluster[key] = entry[key]
        return {**rayjob, "status": {**status, "rayClusterStatus": cluster}}
    return rayjob


def reconcile(
    handler: str,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: Logger,
    rayjob_index: Any = None,
    raycluster_index: Any = None,
) -> machine.Plan:
    started = time.monotonic()
    result = "error"
    try:
        plan = _reconcile(body, patch, logger, rayjob_index, raycluster_index)
        result = plan.phase.lower() if plan.phase == machine.STALLED else "ok"
        return plan
    except kopf.TemporaryError:
        result = "retry"
        raise
    finally:
        metrics.RECONCILES.labels(handler=handler, result=result).inc()
        metrics.RECONCILE_SECONDS.labels(handler=handler).observe(time.monotonic() - started)


def _reconcile(
    body: kopf.Body, patch: kopf.Patch, logger: Logger, rayjob_index: Any, raycluster_index: Any
) -> machine.Plan:
    meta = Meta.from_metadata(body["metadata"])
    status: dict[str, Any] = dict(body.get("status") or {})
    trainjob, spec_problem = parse(body)
    now = machine.now_utc()

    rayjob = None
    problem = None
    if not machine.is_terminal(status) and trainjob is not None and spec_problem is None:
        attempt = int(status.get("attempt") or 0)
        rayjob = lookup_rayjob(rayjob_index, meta.namespace, rayjob_name(meta.name, attempt))
        if rayjob is not None:
            rayjob = with_cluster_workers(rayjob, raycluster_index)
        if machine.needs_preflight(status, rayjob):
            problem = preflight.check(trainjob, meta)

    observation = machine.Observation(
        meta=meta,
        trainjob=trainjob,
        status=status,
        now=now,
        rayjob=rayjob,
        preflight_problem=problem,
        spec_problem=spec_problem,
        checkpoint_grace_seconds=CONFIG.checkpoint_grace_seconds,
    )
    plan = machine.plan(observation)
    try:
        apply.run(
            plan.actions,
            trainjob,
            meta,
            patch,
            body["metadata"].get("creationTimestamp"),
            logger,
        )
    except apply.Conflict as exc:
        plan = machine.plan(dataclasses.replace(observation, conflict=str(exc)))
    for key, value in plan.status.items():
        if status.get(key) != value:
            patch.status[key] = value
    for t in plan.transitions:
        message = f"{t.type} is {t.status}" + (f": {t.message}" if t.message else "")
        if t.is_warning:
            kopf.warn(body, reason=t.reason, message=message)
        else:
            kopf.info(body, reason=t.reason, message=message)
    if plan.recheck_after is not None:
        logger.debug(f"Next deadline, grace period or TTL due in {plan.recheck_after:.0f} s.")
    if plan.phase == machine.STALLED:
        stalled = conditions.find(plan.status["conditions"], conditions.STALLED) or {}
        logger.warning(f"Stalled ({stalled.get('reason')}): {stalled.get('message')}")
    return plan
