"""The runtime contract document the local benchmarks run: 2 CPU workers, gloo, a local store."""

from __future__ import annotations

import uuid
from typing import Any

from raytrain_contract import (
    Contract,
    FailureSettings,
    PvcStorage,
    ReportSettings,
    Scaling,
    TorchSettings,
    TrainJobRef,
    dump_contract,
)


def local_contract_doc(
    entrypoint: str,
    config: dict[str, Any],
    store: str,
    *,
    max_failures: int = 0,
    timeout_seconds: int = 300,
    report: bool = True,
) -> dict[str, Any]:
    """A contract document (built with the contract model) with a fresh run name."""
    contract = Contract(
        train_job=TrainJobRef(namespace="bench", name="bench", uid=str(uuid.uuid4())),
        run_name=f"bench-{uuid.uuid4().hex[:12]}",
        entrypoint=entrypoint,
        config=config,
        scaling=Scaling(num_workers=2, resources_per_worker={"CPU": 1.0}),
        torch=TorchSettings(backend="gloo", timeout_seconds=timeout_seconds),
        storage=PvcStorage(path=store),
        failure=FailureSettings(max_failures=max_failures),
        report=ReportSettings(enabled=report, min_interval_seconds=0),
    )
    return dump_contract(contract)
