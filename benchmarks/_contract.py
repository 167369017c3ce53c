"""The runtime contract document the local benchmarks run: 2 CPU workers, gloo, a local store."""

from __future__ import annotations

import uuid
from typing import Any


def local_contract_doc(
    entrypoint: str,
    config: dict[str, Any],
    store: str,
    *,
    max_failures: int = 0,
    timeout_seconds: int = 300,
    report: bool = True,
) -> dict[str, Any]:
    """A version-1 contract (docs/runtime-contract.md) with a fresh run name."""
    return {
        "contractVersion": 1,
        "trainJob": {
            "apiVersion": "raytrain.dev/v1alpha1",
            "namespace": "bench",
            "name": "bench",
            "uid": str(uuid.uuid4()),
        },
        "runName": f"bench-{uuid.uuid4().hex[:12]}",
        "attempt": 0,
        "entrypoint": entrypoint,
        "config": config,
        "scaling": {
            "numWorkers": 2,
            "minWorkers": None,
            "maxWorkers": None,
            "useGpu": False,
            "resourcesPerWorker": {"CPU": 1.0},
            "placementStrategy": "PACK",
            "acceleratorType": None,
        },
        "torch": {"backend": "gloo", "timeoutSeconds": timeout_seconds},
        "storage": {"type": "pvc", "path": store},
        "checkpoint": {"numToKeep": None, "scoreAttribute": None, "scoreOrder": None},
        "failure": {"maxFailures": max_failures},
        "datasets": {},
        "tune": None,
        "report": {"enabled": report, "minIntervalSeconds": 0},
    }
