"""The runtime answers a suspend's checkpoint request even when a checkpoint beat it.

Seen on real pods: digits checkpoints twice a second, so by the time the reporter read the
request, a checkpoint of the same second already existed. The reporter counted the request as
answered but never said so (``checkpointing`` stayed unset), and the operator, which waits for
``checkpointing: false`` written after the request, kept the job running for the whole grace
period; the job finished instead of suspending.
"""

from __future__ import annotations

from typing import Any

from _clock import FakeClock

from raytrain_contract.timefmt import parse_rfc3339
from trainer_runtime.reporter import RecordingTransport, Reporter

REQUEST = "2033-05-18T03:33:20Z"
REQUESTED_AT = parse_rfc3339(REQUEST).timestamp()  # type: ignore[union-attr]


def _trainer(sink: RecordingTransport) -> dict[str, Any]:
    trainer: dict[str, Any] = sink.patches[-1]["status"]["trainerStatus"]
    return trainer


def test_a_checkpoint_in_the_request_second_answers_it() -> None:
    clock = FakeClock(REQUESTED_AT + 0.4)
    job: dict[str, Any] = {"metadata": {"annotations": {}}}
    sink = RecordingTransport(trainjob=job)
    r = Reporter(sink, min_interval=0, clock=clock)
    r.start()
    r.on_report({"epoch": 0}, "s3://b/run/checkpoint_0")
    job["metadata"]["annotations"]["raytrain.dev/checkpoint-requested"] = REQUEST
    clock.now += 0.3
    r.on_report({"epoch": 1}, "s3://b/run/checkpoint_1")
    # Answered by the checkpoint already taken: said so at once, in a patch written now.
    assert _trainer(sink)["checkpointing"] is False
    clock.now += 0.3
    r.on_report({"epoch": 2})
    assert _trainer(sink)["checkpointing"] is False


def test_a_request_newer_than_every_checkpoint_is_still_waited_on() -> None:
    clock = FakeClock(REQUESTED_AT - 30)
    job: dict[str, Any] = {"metadata": {"annotations": {}}}
    sink = RecordingTransport(trainjob=job)
    r = Reporter(sink, min_interval=0, clock=clock)
    r.start()
    r.on_report({"epoch": 0}, "s3://b/run/checkpoint_0")
    job["metadata"]["annotations"]["raytrain.dev/checkpoint-requested"] = REQUEST
    clock.now = REQUESTED_AT + 2
    r.on_report({"epoch": 1})
    assert _trainer(sink)["checkpointing"] is True
    clock.now += 1
    r.on_report({"epoch": 2}, "s3://b/run/checkpoint_2")
    assert _trainer(sink)["checkpointing"] is False
