"""A collective that never completes, produced for real and classified by the operator's triage.

Two gloo workers on a local Ray; rank 1 never joins rank 0's all_reduce, so rank 0's waits out
the group's timeout (the contract's ``torch.timeoutSeconds``) and raises. The runtime's final
report is what the operator reads from ``status.trainerStatus``; the operator's triage turns it
into the attempt's class (docs/failures.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raytrain_contract import load_contract
from raytrain_operator.status.triage import (
    DEFAULT_POLICY,
    Evidence,
    FailureClass,
    classify,
    retry_decision,
)
from trainer_runtime.local import run_local
from trainer_runtime.reporter import RecordingTransport

pytestmark = [pytest.mark.runtime, pytest.mark.usefixtures("ray_local")]

#: What KubeRay's RayJob says when the driver exits non-zero.
RAYJOB_FAILED = {
    "jobDeploymentStatus": "Failed",
    "jobStatus": "FAILED",
    "reason": "AppFailed",
    "message": "Job entrypoint command failed with exit code 1",
}


def test_a_peer_that_never_joins_the_all_reduce_is_a_collective_timeout(
    make_doc: Any, tmp_path: Path
) -> None:
    doc = make_doc(entrypoint="tests/runtime/loops.py:stalled_peer_loop",
                   config={"stall_seconds": 120},
                   storage={"type": "pvc", "path": str(tmp_path / "store")})  # fmt: skip
    doc["torch"]["timeoutSeconds"] = 3
    sink = RecordingTransport()
    assert run_local(load_contract(doc), display=False, transport=sink, min_interval=0) == 1
    final = sink.patches[-1]["status"]["trainerStatus"]
    assert final["phase"] == "Failed", final

    triage = classify(Evidence(rayjob_status=RAYJOB_FAILED, report=final))
    assert triage.failure_class is FailureClass.COLLECTIVE_TIMEOUT, (triage, final["message"])
    assert "NCCL/gloo" in triage.message, triage.message
    # An infrastructure cause: retried under the default policy, the backoff limit permitting.
    assert triage.infrastructure
    assert retry_decision(triage.failure_class, triage.exit_code, DEFAULT_POLICY)
