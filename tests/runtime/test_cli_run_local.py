"""`raytrain run examples/digits.yaml --local`: a real run, then a second run that resumes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from raytrain.cli import main

pytestmark = [pytest.mark.runtime, pytest.mark.usefixtures("ray_local")]

DIGITS = str(Path(__file__).resolve().parents[2] / "examples" / "digits.yaml")


def _checkpoints(run_dir: Path) -> list[Path]:
    return [p for p in run_dir.glob("checkpoint_*") if p.is_dir()]


def _start_epochs(text: str) -> list[int]:
    """start_epoch of each per-epoch report line the console printed."""
    return [int(v) for v in re.findall(r"^report \d+ .*start_epoch=(\d+)", text, re.MULTILINE)]


def _checkpoint_counts(text: str) -> list[int]:
    """The count of each checkpoint line the console printed."""
    return [int(v) for v in re.findall(r"^checkpoint (\d+) ", text, re.MULTILINE)]


def _report_steps(text: str) -> list[int]:
    return [int(v) for v in re.findall(r"^report (\d+) ", text, re.MULTILINE)]


def test_run_local_trains_then_a_second_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    args = ["run", DIGITS, "--local", "--quiet", "--storage-path", str(store)]

    assert main([*args, "--epochs", "2"]) == 0
    first = capsys.readouterr().err
    assert "Succeeded" in first
    assert _start_epochs(first) == [0, 0]
    assert _checkpoint_counts(first) == [1, 2], first
    run_dirs = [p for p in store.iterdir() if p.is_dir()]
    assert len(run_dirs) == 1, run_dirs
    assert len(_checkpoints(run_dirs[0])) == 2  # numToKeep: 2

    # Same manifest, more epochs: the run picks up after the last checkpoint (epoch 1).
    assert main([*args, "--epochs", "3"]) == 0
    again = capsys.readouterr().err
    assert "Succeeded" in again
    assert _start_epochs(again) == [2]
    assert [p for p in store.iterdir() if p.is_dir()] == run_dirs
    # It is the run's next attempt: its counts go on from the first's (2 reports, 2 checkpoints:
    # the console shows the checkpoint it goes on from, then its own), and the first attempt's
    # stored log and metrics stay beside its own.
    assert _checkpoint_counts(again) == [2, 3], again
    assert _report_steps(again) == [3], again
    assert sorted(p.name for p in run_dirs[0].glob("attempt-*")) == ["attempt-0", "attempt-1"]
    for attempt in ("attempt-0", "attempt-1"):
        assert (run_dirs[0] / attempt / "metrics.jsonl").is_file(), attempt

    # --new-run starts over in a run of its own; the first run's checkpoints stay.
    assert main([*args, "--epochs", "1", "--new-run"]) == 0
    assert _start_epochs(capsys.readouterr().err) == [0]
    assert len([p for p in store.iterdir() if p.is_dir()]) == 2
    assert len(_checkpoints(run_dirs[0])) == 2


def _manifest_resuming_from(tmp_path: Path, name: str, checkpoint: str) -> str:
    docs = list(yaml.safe_load_all(Path(DIGITS).read_text()))
    (job,) = [d for d in docs if d and d.get("kind") == "TrainJob"]
    job["metadata"]["name"] = name
    job["spec"]["resumeFrom"] = {"checkpoint": checkpoint}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


@pytest.mark.long
def test_a_new_job_with_resume_from_starts_at_another_runs_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    common = ["--local", "--quiet", "--storage-path", str(store)]
    assert main(["run", DIGITS, *common, "--epochs", "2"]) == 0
    capsys.readouterr()
    (first_run,) = [p for p in store.iterdir() if p.is_dir()]
    latest = sorted(_checkpoints(first_run))[-1]

    # Another TrainJob (another run name) that starts where the first one ended.
    follow = _manifest_resuming_from(tmp_path, "digits-more", str(latest))
    assert main(["run", follow, *common, "--epochs", "3"]) == 0
    err = capsys.readouterr().err
    assert "Succeeded" in err
    assert _start_epochs(err) == [2]
    runs = sorted(p for p in store.iterdir() if p.is_dir())
    assert len(runs) == 2
    (second_run,) = [p for p in runs if p != first_run]
    assert second_run.name.startswith("digits-more-")
    assert _checkpoints(second_run), "the new run keeps its own checkpoints"
    assert len(_checkpoints(first_run)) == 2, "the source run is left as it was"


def test_resume_from_a_checkpoint_that_is_not_there_fails_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    missing = tmp_path / "gone" / "checkpoint_2026-01-01_00-00-00.000000"
    follow = _manifest_resuming_from(tmp_path, "digits-orphan", str(missing))
    code = main(["run", follow, "--local", "--quiet", "--storage-path", str(store)])
    err = " ".join(capsys.readouterr().err.split())
    assert code != 0
    # The console may shorten the long path in the middle.
    assert "spec.resumeFrom: the checkpoint /" in err
    assert "000000 is not there; name a checkpoint directory" in err
    assert "report 0" not in err
    assert not store.exists() or not any(store.glob("*/checkpoint_*"))
