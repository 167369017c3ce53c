"""What `train()` accepts, turned into API objects: a manifest dict, a YAML file, a typed model."""

from __future__ import annotations

import copy
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import yaml

from raytrain.errors import InvalidJobError
from raytrain_contract.api import v1alpha1 as api

JobSource = Mapping[str, Any] | str | os.PathLike[str] | api.TrainJob | api.TrainJobSpec


def is_trainjob(doc: Mapping[str, Any]) -> bool:
    return doc.get("kind") == api.KIND and doc.get("apiVersion") == api.API_VERSION


def is_template(doc: Mapping[str, Any]) -> bool:
    """A ClusterTrainJobTemplate or a TrainJobTemplate (docs/templates.md)."""
    return doc.get("apiVersion") == api.API_VERSION and doc.get("kind") in (
        api.CLUSTER_TEMPLATE_KIND,
        api.TEMPLATE_KIND,
    )


def read_documents(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file (`-` reads standard input)."""
    import sys

    try:
        text = sys.stdin.read() if str(path) == "-" else pathlib.Path(path).read_text()
    except OSError as exc:
        raise InvalidJobError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise InvalidJobError(f"{path} is not valid YAML: {exc}") from exc
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise InvalidJobError(
                f"{path}: document {i + 1} is a {type(doc).__name__}, not a Kubernetes object"
            )
    return docs


def split_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The file's one TrainJob, and the other objects it needs (Secrets, PVCs), in file order."""
    docs = read_documents(path)
    jobs = [d for d in docs if is_trainjob(d)]
    if len(jobs) != 1:
        found = ", ".join(f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" for d in docs)
        raise InvalidJobError(
            f"{path} holds {len(jobs)} TrainJobs (apiVersion {api.API_VERSION}, kind "
            f"{api.KIND}); train() takes a file with exactly one. Found: {found or 'nothing'}"
        )
    return jobs[0], [d for d in docs if not is_trainjob(d)]


def to_manifest(
    job: Mapping[str, Any] | api.TrainJob | api.TrainJobSpec, name: str | None
) -> dict[str, Any]:
    """A TrainJob manifest, with `name` (if given) as its metadata.name."""
    if isinstance(job, api.TrainJobSpec):
        if not name:
            raise InvalidJobError(
                "train(spec) needs name=...: a TrainJobSpec carries no metadata.name"
            )
        manifest: dict[str, Any] = {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "metadata": {},
            "spec": job.model_dump(
                mode="json", by_alias=True, exclude_unset=True, exclude_none=True
            ),
        }
    elif isinstance(job, api.TrainJob):
        manifest = job.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
        manifest["apiVersion"], manifest["kind"] = api.API_VERSION, api.KIND
        manifest.setdefault("metadata", {})
        manifest.pop("status", None)
    elif isinstance(job, Mapping):
        manifest = copy.deepcopy(dict(job))
        manifest.setdefault("apiVersion", api.API_VERSION)
        manifest.setdefault("kind", api.KIND)
        if not is_trainjob(manifest):
            raise InvalidJobError(
                f"apiVersion {manifest.get('apiVersion')!r}, kind {manifest.get('kind')!r} is not "
                f"a TrainJob: use apiVersion {api.API_VERSION}, kind {api.KIND}"
            )
        if not isinstance(manifest.get("spec"), Mapping):
            raise InvalidJobError(
                "spec: a TrainJob manifest needs a spec mapping (image, entrypoint, scaling, "
                "storage); see docs/sdk.md"
            )
        manifest.pop("status", None)
        manifest["metadata"] = dict(manifest.get("metadata") or {})
    else:
        raise InvalidJobError(
            f"train() takes a manifest dict, a YAML path, a TrainJob or a TrainJobSpec, "
            f"not {type(job).__name__}"
        )
    if name:
        manifest["metadata"]["name"] = name
    meta = manifest["metadata"]
    if not meta.get("name") and not meta.get("generateName"):
        raise InvalidJobError(
            "metadata.name: the TrainJob has no name; set metadata.name in the manifest "
            "or pass name=..."
        )
    return manifest
