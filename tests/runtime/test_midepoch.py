"""examples/resumable: a run stopped in the middle of an epoch resumes at its saved batch.

Two workers on the session's local Ray. Digits' 1347 training rows in batches of 32 are 22
batches per worker per epoch; checkpoints every 5 steps and at the end of the epoch.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from raytrain_contract import load_contract
from trainer_runtime.local import run_local
from trainer_runtime.reporter import RecordingTransport

pytestmark = [pytest.mark.runtime, pytest.mark.usefixtures("ray_local")]

ENTRYPOINT = "examples.resumable.train:train_loop_per_worker"
CONFIG = {"epochs": 1, "lr": 0.05, "batch_size": 32, "hidden": 64, "seed": 0, "checkpoint_every": 5}


def reports(sink: RecordingTransport) -> list[dict[str, float]]:
    """The metrics of each report, in order (rank 0's: the reporter shows the first worker's).

    The final patch repeats the last report's metrics; consecutive repeats count once.
    """
    out: list[dict[str, float]] = []
    for patch in sink.patches:
        metrics = patch["status"]["trainerStatus"].get("metrics")
        if metrics:
            values = {m["name"]: float(m["value"]) for m in metrics}
            if not out or out[-1] != values:
                out.append(values)
    return out


def run(doc: dict[str, Any]) -> list[dict[str, float]]:
    sink = RecordingTransport()
    code = run_local(load_contract(doc), display=False, transport=sink, min_interval=0)
    assert code == 0, sink.patches[-1]["status"]["trainerStatus"]
    return reports(sink)


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_run_stopped_mid_epoch_resumes_at_the_saved_batch_not_the_epoch_start(
    make_doc: Any, tmp_path: Path
) -> None:
    store = {"type": "pvc", "path": str(tmp_path / "store")}
    name = f"resumable-{uuid.uuid4().hex[:8]}"
    stopped = make_doc(run_name=name, entrypoint=ENTRYPOINT, storage=store, num_to_keep=2,
                       config={**CONFIG, "stop_at_step": 15})  # fmt: skip
    first = run(stopped)
    assert [(r["step"], r["batch"]) for r in first] == [(5, 5), (10, 10), (15, 15)]
    assert all(r["epoch"] == 0 for r in first)

    # The same run again, not stopped: it starts at batch 15 of epoch 0.
    again = run({**stopped, "attempt": 1, "config": CONFIG})
    assert {(r["start_epoch"], r["start_batch"]) for r in again} == {(0, 15)}
    assert [(r["step"], r["batch"]) for r in again] == [(20, 20), (22, 22)]

    # It ends where a run that never stopped ends: same weights, same held-out accuracy.
    whole = run(make_doc(run_name=f"{name}-whole", entrypoint=ENTRYPOINT, storage=store,
                         num_to_keep=2, config=CONFIG))  # fmt: skip
    assert {(r["start_epoch"], r["start_batch"]) for r in whole} == {(0, 0)}
    assert whole[-1]["step"] == again[-1]["step"] == 22
    assert whole[-1]["accuracy"] == again[-1]["accuracy"]
    assert whole[-1]["loss"] == pytest.approx(again[-1]["loss"], rel=1e-6)
