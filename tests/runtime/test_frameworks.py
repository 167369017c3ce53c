"""The framework examples train for real on the CPU and resume from their own checkpoints.

examples/hf_transformers (Hugging Face's ``Trainer`` with Ray's ``RayTrainReportCallback`` and
``prepare_trainer``) and examples/lightning_digits (``RayDDPStrategy``,
``RayLightningEnvironment``, ``RayTrainReportCallback``), each with two workers on the session's
local Ray, the way ``raytrain run --local`` runs them. Each trains one epoch, then the same run
goes on to a second: only that epoch is trained, from the step the first stopped at. Progress
(the report's ``epoch``, a float for Transformers and an index for Lightning), the metrics and
the checkpoints reach the status the operator shows.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raytrain_contract import load_contract
from trainer_runtime.local import run_local
from trainer_runtime.reporter import RecordingTransport

pytestmark = [pytest.mark.runtime, pytest.mark.usefixtures("ray_local")]


def run(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the contract locally; the status of each patch, in order. Fails unless Succeeded."""
    sink = RecordingTransport()
    code = run_local(load_contract(doc), display=False, transport=sink, min_interval=0)
    statuses = [p["status"] for p in sink.patches]
    assert code == 0, statuses[-1]["trainerStatus"]
    assert statuses[-1]["trainerStatus"]["phase"] == "Succeeded"
    return statuses


def reported(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per report: its epoch, progress, metrics and the checkpoint count after it."""
    out: list[dict[str, Any]] = []
    for status in statuses:
        trainer = status["trainerStatus"]
        if trainer.get("phase") != "Running" or not trainer.get("metrics"):
            continue
        if out and out[-1]["step"] == trainer["step"]:
            continue
        out.append({
            "step": trainer["step"],
            "epoch": trainer.get("epoch"),
            "progress": trainer.get("progressPercentage"),
            "metrics": {m["name"]: float(m["value"]) for m in trainer["metrics"]},
            "checkpoints": (status.get("checkpoint") or {}).get("count", 0),
        })  # fmt: skip
    return out


def kept(store: Path, doc: dict[str, Any], final: dict[str, Any]) -> None:
    """The second run added one checkpoint (the count is this process's), the latest; the run
    directory keeps ``numToKeep`` (2) of the three."""
    assert final["checkpoint"]["count"] == 1
    run_dir = store / doc["runName"]
    kept = sorted(p for p in run_dir.glob("checkpoint_*") if p.is_dir())
    assert len(kept) == 2, kept
    assert final["checkpoint"]["latestURI"] == str(kept[-1])


def two_then_three(
    make_doc: Any, store: Path, name: str, entrypoint: str, config: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train two epochs, then the same run to three: the reports of the first run, the one report
    of the second. What both frameworks share is checked here:
    one report per epoch with its progress and checkpoint, and a second run that trains only
    the third epoch, its steps numbered on from where the first stopped."""
    doc = make_doc(
        run_name=f"{name}-{uuid.uuid4().hex[:8]}",
        entrypoint=entrypoint,
        storage={"type": "pvc", "path": str(store)},
        config={**config, "epochs": 2},
    )
    first = reported(run(doc))
    assert [(r["epoch"], r["progress"], r["checkpoints"]) for r in first] == [
        (0, 50, 1),
        (1, 99, 2),
    ]
    again = run({**doc, "config": {**config, "epochs": 3}, "attempt": 1})
    rest = reported(again)
    assert [r["epoch"] for r in rest] == [2]
    assert rest[0]["metrics"]["step"] == first[-1]["metrics"]["step"] * 3 / 2
    final = again[-1]
    assert final["trainerStatus"]["progressPercentage"] == 100
    kept(store, doc, final)
    return first, rest[0]


@contextlib.contextmanager
def no_scratch_left(pattern: str) -> Iterator[None]:
    """The examples' scratch directories of each worker (the Transformers Trainer's output
    directory, the Lightning report callback's) are gone once the runs inside end."""
    scratch = Path(tempfile.gettempdir())
    before = set(scratch.glob(pattern))
    yield
    assert set(scratch.glob(pattern)) - before == set()


@pytest.mark.long
@pytest.mark.timeout(600)
def test_transformers_trainer_reports_progress_and_checkpoints_and_resumes(
    make_doc: Any, tmp_path: Path
) -> None:
    config = {"lr": 0.01, "batch_size": 32, "samples": 256, "seq_len": 16, "vocab": 32}
    with no_scratch_left("hf-trainer-*"):
        first, last = two_then_three(
            make_doc, tmp_path / "store", "hf",
            "examples.hf_transformers.train:train_loop_per_worker", config,
        )  # fmt: skip
    # The Trainer's float epoch (1.0, 2.0, then 3.0) reads as index 0, 1, then 2.
    assert [r["metrics"]["epoch"] for r in first] == [1.0, 2.0]
    assert last["metrics"]["epoch"] == 3.0
    losses = [r["metrics"]["eval_loss"] for r in first]
    assert losses[1] < losses[0] < math.log(32), losses
    assert last["metrics"]["eval_loss"] < losses[1]


@pytest.mark.long
@pytest.mark.timeout(600)
def test_lightning_trainer_reports_progress_and_checkpoints_and_resumes(
    make_doc: Any, tmp_path: Path
) -> None:
    config = {"lr": 0.05, "batch_size": 64, "hidden": 64}
    with no_scratch_left("lightning_checkpoints-*"):
        first, last = two_then_three(
            make_doc, tmp_path / "store", "lightning",
            "examples.lightning_digits.train:train_loop_per_worker", config,
        )  # fmt: skip
    assert {"train_loss", "val_loss", "val_accuracy"} <= set(first[0]["metrics"])
    assert first[1]["metrics"]["val_loss"] < first[0]["metrics"]["val_loss"]
    assert last["metrics"]["val_accuracy"] > 0.8, last["metrics"]
