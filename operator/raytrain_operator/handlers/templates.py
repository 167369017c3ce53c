"""spec.template: read the template a TrainJob names, keep it in status.template, merge it in.

The template is read on every pass until the job's first attempt exists (so a template fixed
or created meanwhile is taken) and never after: from then on the job runs with the copy in
status.template, and an edit of the template changes no running job. A job whose spec.template
changes (allowed only while suspended) reads the new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import (
    CLUSTER_TEMPLATE_KIND,
    CLUSTER_TEMPLATE_PLURAL,
    TEMPLATE_PLURAL,
)
from raytrain_operator import k8s


@dataclass(frozen=True)
class Resolved:
    """What a pass runs with."""

    #: The TrainJob's own spec.
    own: Mapping[str, Any]
    #: The template's spec to merge under it ({} without one).
    template: Mapping[str, Any]
    #: status.template to write: a new snapshot, or None to remove a stale one; absent
    #: (``write`` False) when status.template is already right.
    snapshot: dict[str, Any] | None = None
    write: bool = False
    #: Why the template cannot be used (names spec.template and the fix); the job stalls.
    problem: str | None = None

    @property
    def spec(self) -> dict[str, Any]:
        """The spec with the template merged in (merged on demand: a pass parses it once per
        generation and template version, reconcile.parse_cached)."""
        return templates.merge(self.template, self.own) if self.template else dict(self.own)


def started(status: Mapping[str, Any]) -> bool:
    """Whether the job has had an attempt (its RayJob was created): the template is fixed."""
    return bool(status.get("startTime") or status.get("rayJobName") or status.get("attempt"))


def resolve(namespace: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> Resolved:
    ref = templates.reference(spec)
    snap = status.get("template")
    if ref is None:
        return Resolved(spec, {}, None, write=snap is not None)
    if (
        isinstance(snap, Mapping)
        and (snap.get("kind"), snap.get("name")) == ref
        and started(status)
    ):
        kept = templates.snapshot_spec(status, spec)
        return Resolved(spec, kept)
    kind, name = ref
    try:
        obj = k8s.get_template(kind, namespace, name)
    except k8s.ApiException as exc:
        if exc.status != 403:
            raise
        plural = CLUSTER_TEMPLATE_PLURAL if kind == CLUSTER_TEMPLATE_KIND else TEMPLATE_PLURAL
        return Resolved(
            spec,
            {},
            problem=(
                f"spec.template: the operator may not read {kind} {name!r} (403 Forbidden: "
                f"{k8s.api_message(exc)}); grant it get on {plural}.raytrain.dev (the chart's "
                "RBAC does), or remove spec.template"
            ),
        )
    if obj is None:
        where = "" if kind == CLUSTER_TEMPLATE_KIND else f" in namespace {namespace}"
        listing = (
            "kubectl get clustertrainjobtemplates"
            if kind == CLUSTER_TEMPLATE_KIND
            else f"kubectl get trainjobtemplates -n {namespace}"
        )
        return Resolved(
            spec,
            {},
            problem=(
                f"spec.template: {kind} {name!r} not found{where}; create it, or set "
                f"spec.template.name to one that exists ({listing} lists them)"
            ),
        )
    metadata = obj.get("metadata") or {}
    template_spec = dict(obj.get("spec") or {})
    new = {
        "kind": kind,
        "name": name,
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
        "spec": template_spec,
    }
    return Resolved(spec, template_spec, new, write=new != snap)
