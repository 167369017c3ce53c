"""status.checkpoint.lastTime: the runtime says when it reported its latest checkpoint, and a
later attempt keeps the earlier one's time until it reports a checkpoint of its own."""

from __future__ import annotations

from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJobStatus
from trainer_runtime.reporter import RecordingTransport, Reporter

T0 = 1_795_000_000.0  # 2026-11-18T11:06:40Z


def _checkpoint(transport: RecordingTransport) -> dict[str, Any]:
    return dict(transport.patches[-1]["status"].get("checkpoint") or {})


def test_a_checkpoint_report_carries_its_time() -> None:
    clock = {"now": T0}
    transport = RecordingTransport()
    reporter = Reporter(transport, min_interval=0, clock=lambda: clock["now"])
    reporter.on_report({"epoch": 0})
    assert "checkpoint" not in transport.patches[-1]["status"]
    clock["now"] = T0 + 30
    reporter.on_report({"epoch": 1}, checkpoint_uri="s3://b/run/checkpoint_0")
    assert _checkpoint(transport)["lastTime"] == "2026-11-18T11:07:10Z"
    clock["now"] = T0 + 90
    reporter.on_report({"epoch": 2})  # no checkpoint: the time stays that of the last one
    assert _checkpoint(transport)["lastTime"] == "2026-11-18T11:07:10Z"
    # what the runtime writes is what the status schema holds
    TrainJobStatus.model_validate(transport.patches[-1]["status"])


def test_a_resumed_attempt_keeps_the_earlier_checkpoint_time() -> None:
    earlier = {
        "status": {
            "checkpoint": {
                "count": 2,
                "latestURI": "s3://b/c_1",
                "lastTime": "2026-11-18T11:00:00Z",
            }
        }
    }
    transport = RecordingTransport(earlier)
    reporter = Reporter(transport, attempt=1, min_interval=0, clock=lambda: T0 + 600)
    reporter.start()
    assert _checkpoint(transport)["lastTime"] == "2026-11-18T11:00:00Z"
    reporter.on_report({"epoch": 3}, checkpoint_uri="s3://b/c_2")
    assert _checkpoint(transport) == {
        "count": 3,
        "latestURI": "s3://b/c_2",
        "lastTime": "2026-11-18T11:16:40Z",
    }
