"""Carry out a Plan's actions on the children, idempotently.

A child is created with a plain create when its name is free, which is the usual case and
costs one request. When the name is taken, the object is read: if it carries this TrainJob's
ownerReference it is ours (made by an earlier pass, or before a restart) and is brought in line
with a server-side apply of the whole child, which corrects drift on every field we set. An
object without our ownerReference belongs to someone else and is never touched: applying it
would adopt it, because server-side apply reports a conflict only for fields that both
managers set, and a foreign ConfigMap's keys need not overlap ours. Deletes tolerate "not found".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator import k8s, metrics
from raytrain_operator.api.v1alpha1 import TrainJob
from raytrain_operator.builders.contract import build_contract_configmap
from raytrain_operator.builders.meta import ANNOTATION_SUSPENDED_BY_USER, LABEL_TRAINJOB, Meta
from raytrain_operator.builders.names import contract_configmap_name, runtime_account_name
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.builders.rbac import build_rbac
from raytrain_operator.status import machine
from raytrain_operator.status.machine import (
    Action,
    Annotate,
    DeleteChildren,
    DeleteRayJob,
    EnsureChildren,
    SetRayJobSuspend,
)


class Conflict(Exception):
    """A child's name is taken by an object the TrainJob does not own; it is left alone."""


def _owned(obj: Mapping[str, Any], meta: Meta) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == meta.uid for r in refs)


def _ensure(body: dict[str, Any], meta: Meta) -> bool:
    """Create a child, or apply it over the one we own already. True if created."""
    if k8s.create(body) is not None:
        return True
    kind, name = body["kind"], body["metadata"]["name"]
    existing = k8s.get(kind, meta.namespace, name)
    # None: deleted between the create and the read; the apply creates it again.
    if existing is not None and not _owned(existing, meta):
        raise Conflict(
            f"a {kind} named {name} exists in namespace {meta.namespace} but does not belong "
            f"to this TrainJob (uid {meta.uid}); delete that {kind} or rename the TrainJob"
        )
    k8s.apply(body)
    return False


def ensure_children(
    trainjob: TrainJob,
    meta: Meta,
    action: EnsureChildren,
    creation_timestamp: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    _ensure(build_contract_configmap(trainjob, meta, action.attempt), meta)
    for obj in build_rbac(trainjob, meta):
        _ensure(obj, meta)
    rayjob = build_rayjob(trainjob, meta, action.attempt, suspend=action.suspend)
    if _ensure(rayjob, meta):
        logger.info(f"Created RayJob {rayjob['metadata']['name']} (attempt {action.attempt}).")
        created = parse_rfc3339(creation_timestamp)
        if created is not None and action.attempt == 0:
            elapsed = (machine.now_utc() - created).total_seconds()
            metrics.RAYJOB_CREATION_SECONDS.observe(max(elapsed, 0.0))


def delete_children(meta: Meta) -> None:
    selector = f"{LABEL_TRAINJOB}={meta.name}"
    for name in k8s.list_rayjob_names(meta.namespace, selector):
        rayjob = k8s.get_rayjob(meta.namespace, name)
        if rayjob is not None and _owned(rayjob, meta):
            k8s.delete_rayjob(meta.namespace, name)
    k8s.delete("ConfigMap", meta.namespace, contract_configmap_name(meta.name))
    for kind in ("RoleBinding", "Role", "ServiceAccount"):
        k8s.delete(kind, meta.namespace, runtime_account_name(meta.name))


def run(
    actions: list[Action],
    trainjob: TrainJob | None,
    meta: Meta,
    patch: kopf.Patch,
    creation_timestamp: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    for action in actions:
        if isinstance(action, EnsureChildren):
            if trainjob is not None:
                ensure_children(trainjob, meta, action, creation_timestamp, logger)
        elif isinstance(action, SetRayJobSuspend):
            value = "true" if action.by_user and action.suspend else None
            k8s.patch_rayjob(
                meta.namespace,
                action.name,
                {
                    "metadata": {"annotations": {ANNOTATION_SUSPENDED_BY_USER: value}},
                    "spec": {"suspend": action.suspend},
                },
            )
            logger.info(f"{'Suspended' if action.suspend else 'Resumed'} RayJob {action.name}.")
        elif isinstance(action, DeleteRayJob):
            k8s.delete_rayjob(meta.namespace, action.name)
            logger.info(f"Deleted RayJob {action.name}.")
        elif isinstance(action, DeleteChildren):
            delete_children(meta)
            logger.info("Deleted the children after ttlSecondsAfterFinished.")
        elif isinstance(action, Annotate):
            patch.metadata.annotations[action.key] = action.value
