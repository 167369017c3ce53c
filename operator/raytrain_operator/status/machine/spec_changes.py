"""Spec changes against the running attempt: which fields its RayJob was built with that differ
now. Such fields take effect with the next attempt (after a failure, or a suspend and resume)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import ANNOTATION_GENERATION, ANNOTATION_SPEC_HASH
from raytrain_operator.builders.rayjob import ANNOTATION_FIELD_HASHES, changed_fields, spec_hash
from raytrain_operator.status.machine.plan_types import OPERATOR_FIELDS, Observation


def _pending_change(
    obs: Observation, tj: TrainJob, rj_annotations: Mapping[str, Any], name: str, attempt: int
) -> str | None:
    """What of the spec the running attempt does not carry, or None when it carries it all."""
    generation = obs.meta.generation
    built = rj_annotations.get(ANNOTATION_GENERATION)
    if built == str(generation):
        return None
    fields = _built_changes(tj, rj_annotations)
    if fields == []:
        return None
    what = ", ".join(fields) if fields else "the spec"
    return (
        f"generation {generation} changed {what}; RayJob {name} (attempt {attempt}) still runs "
        f"the spec of generation {built or 'before'}. These fields are built into an attempt, "
        "so they take effect when the next one starts: after a failed attempt, or at once from "
        "the latest checkpoint if you set spec.suspend to true and then back to false"
    )


def _built_changes(tj: TrainJob, rj_annotations: Mapping[str, Any]) -> list[str] | None:
    """The spec fields the RayJob was built with that differ now: [] when none does, None when
    something differs but the RayJob does not say what.

    The per-field hashes decide when the RayJob carries them, so that a field only the operator
    reads (OPERATOR_FIELDS) never counts; the whole-spec hash is the fallback for a RayJob
    without them.
    """
    fields = changed_fields(tj, rj_annotations.get(ANNOTATION_FIELD_HASHES))
    if fields is not None:
        return [f for f in fields if f not in OPERATOR_FIELDS]
    if rj_annotations.get(ANNOTATION_SPEC_HASH) in (None, spec_hash(tj)):
        return []
    return None
