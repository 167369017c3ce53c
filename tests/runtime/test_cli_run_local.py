"""`raytrain run examples/digits.yaml --local`: a real run, then a second run that resumes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raytrain_operator.cli import main

pytestmark = [pytest.mark.runtime, pytest.mark.usefixtures("ray_local")]

DIGITS = str(Path(__file__).resolve().parents[2] / "examples" / "digits.yaml")


def _checkpoints(run_dir: Path) -> list[Path]:
    return [p for p in run_dir.glob("checkpoint_*") if p.is_dir()]


def _start_epochs(text: str) -> list[int]:
    """start_epoch of each per-epoch report line the console printed."""
    return [int(v) for v in re.findall(r"^report \d+ .*start_epoch=(\d+)", text, re.MULTILINE)]


def test_run_local_trains_then_a_second_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    args = ["run", DIGITS, "--local", "--quiet", "--storage-path", str(store)]

    assert main([*args, "--epochs", "2"]) == 0
    first = capsys.readouterr().err
    assert "Succeeded" in first
    assert _start_epochs(first) == [0, 0]
    run_dirs = [p for p in store.iterdir() if p.is_dir()]
    assert len(run_dirs) == 1, run_dirs
    assert len(_checkpoints(run_dirs[0])) == 2  # numToKeep: 2

    # Same manifest, more epochs: the run picks up after the last checkpoint (epoch 1).
    assert main([*args, "--epochs", "3"]) == 0
    again = capsys.readouterr().err
    assert "Succeeded" in again
    assert _start_epochs(again) == [2]
    assert [p for p in store.iterdir() if p.is_dir()] == run_dirs

    # --new-run starts over in a run of its own; the first run's checkpoints stay.
    assert main([*args, "--epochs", "1", "--new-run"]) == 0
    assert _start_epochs(capsys.readouterr().err) == [0]
    assert len([p for p in store.iterdir() if p.is_dir()]) == 2
    assert len(_checkpoints(run_dirs[0])) == 2
