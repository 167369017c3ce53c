"""How a TrainJob's spec and its template's spec make the spec the operator runs.

The TrainJob's own values win. Objects merge field by field, at every depth (`config` too).
Lists whose entries have a name merge by it: an entry of the job replaces the template's entry
of the same name in place, and the job's other entries follow the template's. Tolerations and
envFrom add up (an entry present in both is kept once). Any other list is the job's if it sets
one. docs/templates.md says the same for users.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

#: Lists merged entry by entry, by the field that names an entry.
KEYED_LISTS = {
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "exitCodes": "code",
}
#: Lists whose entries add up.
ADDED_LISTS = ("tolerations", "envFrom")


def merge(template: Mapping[str, Any], job: Mapping[str, Any]) -> dict[str, Any]:
    """The spec the job runs with: ``template`` with ``job``'s values over it (neither changes)."""
    out: dict[str, Any] = copy.deepcopy(dict(template))
    for key, value in job.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        else:
            out[key] = _merge_value(key, out[key], value)
    return out


def _merge_value(key: str, base: Any, over: Any) -> Any:
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        return merge(base, over)
    if isinstance(base, list) and isinstance(over, list):
        if key in KEYED_LISTS:
            return _merge_keyed(base, over, KEYED_LISTS[key])
        if key in ADDED_LISTS:
            return base + [copy.deepcopy(e) for e in over if e not in base]
    return copy.deepcopy(over)


def _merge_keyed(base: list[Any], over: list[Any], field: str) -> list[Any]:
    def key_of(entry: Any) -> Any:
        return entry.get(field) if isinstance(entry, Mapping) else None

    mine = {key_of(e): e for e in over if key_of(e) is not None}
    out = [copy.deepcopy(mine.pop(key_of(e), e)) for e in base]
    out.extend(copy.deepcopy(e) for e in over if key_of(e) is None or key_of(e) in mine)
    return out


def reference(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (kind, name) spec.template names, the kind's default filled in; None without one."""
    ref = spec.get("template")
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    return str(ref.get("kind") or "ClusterTrainJobTemplate"), str(ref["name"])


def find_in(
    spec: Mapping[str, Any], documents: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The spec of the template spec.template names among ``documents`` (a manifest's);
    {} without spec.template, None when it is not there."""
    ref = reference(spec)
    if ref is None:
        return {}
    for doc in documents:
        if (doc.get("kind"), (doc.get("metadata") or {}).get("name")) == ref:
            found = doc.get("spec")
            return found if isinstance(found, Mapping) else {}
    return None


def expand(doc: Mapping[str, Any], documents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A TrainJob document with the template it names, found among ``documents``, merged
    into its spec (as ``kubectl get -o yaml`` would not show it, but the operator runs it).
    ValueError when the template is not among them."""
    spec = doc.get("spec") or {}
    template = find_in(spec, documents)
    if template is None:
        kind, name = reference(spec) or ("", "")
        raise ValueError(f"spec.template names {kind} {name!r}, which is not in the manifest")
    return {**doc, "spec": merge(template, spec)}


def snapshot_spec(status: Mapping[str, Any], spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The template spec status.template keeps, when it is of the template spec names."""
    ref = reference(spec)
    snap = status.get("template")
    if ref is None or not isinstance(snap, Mapping):
        return {}
    if (snap.get("kind"), snap.get("name")) != ref:
        return {}
    found = snap.get("spec")
    return found if isinstance(found, Mapping) else {}


def effective_spec(spec: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with the template status.template keeps merged under it (as is without one)."""
    return merge(snapshot_spec(status, spec), spec)


def effective_value(spec: Mapping[str, Any], status: Mapping[str, Any], key: str) -> Any:
    """One top-level field of the spec a job runs with, without merging the rest."""
    if key in spec:
        return spec[key]
    return snapshot_spec(status, spec).get(key)


def field_origin(
    spec: Mapping[str, Any], template: Mapping[str, Any], path: tuple[Any, ...]
) -> str:
    """Where a field of the merged spec came from, for messages: " (from <kind> <name>)" when
    the template sets it and the TrainJob does not, else ""."""
    ref = reference(spec)
    if ref is None or not path or has_path(spec, path) or not has_path(template, path):
        return ""
    return f" (from {ref[0]} {ref[1]})"


def has_path(node: Any, path: tuple[Any, ...]) -> bool:
    """Whether ``node`` has a value at ``path`` (keys of objects, indexes of lists)."""
    for part in path:
        found = (isinstance(node, Mapping) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if not found:
            return False
        node = node[part]
    return True
