"""Valid TrainJob manifests for the unit tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta, owner_reference

UID = "5f0c2a7e-91b3-4c1d-8e2f-0123456789ab"

BASE: dict[str, Any] = {
    "apiVersion": "raytrain.dev/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "digits", "namespace": "team-a", "uid": UID, "generation": 1},
    "spec": {
        "image": "raytrain/trainer-runtime:0.1.0",
        "entrypoint": "examples.digits.train:train_loop_per_worker",
        "config": {"epochs": 5, "lr": 0.05},
        "scaling": {"numWorkers": 2, "resourcesPerWorker": {"cpu": "1", "memory": "2Gi"}},
        "storage": {
            "s3": {
                "uri": "s3://bucket/prefix",
                "endpoint": "http://127.0.0.1:9000",
                "region": "us-east-1",
                "credentialsSecret": {"name": "digits-s3"},
            }
        },
    },
}


def manifest(**spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["spec"].update(spec)
    return doc


def trainjob(**spec: Any) -> TrainJob:
    return TrainJob.model_validate(manifest(**spec))


def meta(**fields: Any) -> Meta:
    values: dict[str, Any] = {"name": "digits", "namespace": "team-a", "uid": UID}
    values.update(fields)
    return Meta(**values)


def ours(kind: str, namespace: str, name: str) -> dict[str, Any]:
    """An object of a child's kind and name as the API server returns it when it is ours (it
    carries the TrainJob's ownerReference): a stand-in for `k8s.get` in delete tests."""
    return {
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-of-{name}",
            "ownerReferences": [owner_reference(meta())],
        },
    }


ROOT_EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
