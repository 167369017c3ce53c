"""Real Ray Train runs on the CPU (gloo, 2 workers of 1 CPU) through the runtime's own path.

Checkpoints go to a real S3 server on loopback (MinIO); reports go to the real ``Reporter`` with
its transport swapped for an in-memory recorder (the Kubernetes path is tested in
tests/integration/test_reporter.py).
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


def s3_storage(server: Any, prefix: str) -> dict[str, Any]:
    return {"type": "s3", "path": f"s3://{server.bucket}/{prefix}", "endpoint": server.endpoint,
            "region": "us-east-1"}  # fmt: skip


def trainer_statuses(sink: RecordingTransport) -> list[dict[str, Any]]:
    return [p["status"]["trainerStatus"] for p in sink.patches]


def reported(sink: RecordingTransport, name: str) -> list[float]:
    """Values of metric ``name`` in every patch, in order."""
    out = []
    for ts in trainer_statuses(sink):
        for m in ts.get("metrics", []):
            if m["name"] == name:
                out.append(float(m["value"]))
    return out


@pytest.mark.long
def test_digits_reaches_accuracy_and_keeps_num_to_keep_checkpoints(
    s3_env: Any, make_doc: Any
) -> None:
    prefix = f"runs-{uuid.uuid4().hex[:8]}"
    doc = make_doc(config={"epochs": 5, "lr": 0.1, "seed": 0}, storage=s3_storage(s3_env, prefix),
                   num_to_keep=2)  # fmt: skip
    sink = RecordingTransport()
    assert run_local(load_contract(doc), display=False, transport=sink, min_interval=0) == 0

    final = sink.patches[-1]["status"]
    assert final["trainerStatus"]["phase"] == "Succeeded"
    assert final["trainerStatus"]["progressPercentage"] == 100
    assert final["trainerStatus"]["epoch"] == 4
    accuracy = {m["name"]: float(m["value"]) for m in final["trainerStatus"]["metrics"]}["accuracy"]
    assert accuracy >= 0.9, f"held-out accuracy {accuracy}"
    assert final["checkpoint"]["count"] == 5
    # Ray's retention: 5 reported, 2 kept, and the latest one is among them.
    run_prefix = f"{prefix}/{doc['runName']}"
    dirs = s3_env.checkpoint_dirs(run_prefix)
    assert len(dirs) == 2, dirs
    latest = final["checkpoint"]["latestURI"]
    assert latest.startswith(f"s3://{s3_env.bucket}/{run_prefix}/checkpoint_")
    assert latest.rsplit("/", 1)[1] in dirs


@pytest.mark.long
def test_killed_worker_resumes_from_latest_checkpoint_and_a_rerun_resumes_too(
    s3_env: Any, make_doc: Any, tmp_path: Path
) -> None:
    prefix = f"runs-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "died"
    config = {"epochs": 4, "lr": 0.1, "fail_at_epoch": 2, "fail_marker": str(marker)}
    doc = make_doc(config=config, storage=s3_storage(s3_env, prefix), num_to_keep=None,
                   max_failures=1)  # fmt: skip
    sink = RecordingTransport()
    assert run_local(load_contract(doc), display=False, transport=sink, min_interval=0) == 0

    assert marker.read_text() == "2", "the worker did not die at epoch 2"
    statuses = trainer_statuses(sink)

    def start_epoch(ts: dict[str, Any]) -> float | None:
        return next(
            (float(m["value"]) for m in ts.get("metrics", []) if m["name"] == "start_epoch"), None
        )

    # The restarted group's reports are the first with a start epoch other than 0.
    restart = next((i for i, ts in enumerate(statuses) if start_epoch(ts) not in (None, 0.0)), None)
    assert restart is not None, f"no report of a group that resumed: {statuses}"
    first_group = statuses[:restart]
    # The worker error is reported while the run goes on (phase Running, message set). It comes
    # from Ray Train's controller, the epochs from rank 0 through the report queue: on a busy
    # machine the error can reach the status before epoch 1's report does.
    errors = [ts for ts in first_group if (ts.get("message") or "").startswith("worker ")]
    assert errors and {ts["phase"] for ts in errors} == {"Running"}, first_group
    # The worker died as epoch 2 began, right after reporting epoch 1's checkpoint. No rank
    # trains past a checkpoint before Ray Train's controller has taken its report
    # (trainer_runtime/flush.py), so that checkpoint was registered and no epoch is trained
    # twice: the first group got to epoch 1, and the restarted one starts at epoch 2. (Before,
    # the unpolled report died with the worker and the restart went back one epoch or to the
    # start.)
    assert max(ts["epoch"] for ts in first_group if ts.get("metrics")) == 1, first_group
    assert start_epoch(statuses[restart]) == 2, statuses[restart]
    assert statuses[-1]["epoch"] == 3
    # Nothing was deleted by the restart: every checkpoint ever reported is still there.
    run_prefix = f"{prefix}/{doc['runName']}"
    dirs = s3_env.checkpoint_dirs(run_prefix)
    uris = {
        p["status"]["checkpoint"]["latestURI"] for p in sink.patches if "checkpoint" in p["status"]
    }
    assert {u.rsplit("/", 1)[1] for u in uris} <= dirs and len(uris) >= 4
    before_rerun = len(dirs)

    # A second driver with the same run name (a cluster-level retry) resumes, not restarts.
    doc2 = {**doc, "attempt": 1, "config": {"epochs": 6, "lr": 0.1}}
    sink2 = RecordingTransport()
    assert run_local(load_contract(doc2), display=False, transport=sink2, min_interval=0) == 0
    assert reported(sink2, "start_epoch")[0] == 4
    assert reported(sink2, "epoch")[-1] == 5
    assert sink2.patches[-1]["status"]["trainerStatus"]["attempt"] == 1
    assert len(s3_env.checkpoint_dirs(run_prefix)) == before_rerun + 2


def test_a_raising_loop_ends_in_a_failed_report_naming_the_error(
    make_doc: Any, tmp_path: Path
) -> None:
    doc = make_doc(entrypoint="tests/runtime/loops.py:raising_loop", config={"epochs": 2},
                   storage={"type": "pvc", "path": str(tmp_path / "store")})  # fmt: skip
    sink = RecordingTransport()
    code = run_local(load_contract(doc), display=False, transport=sink, min_interval=0)
    assert code == 1
    final = sink.patches[-1]["status"]["trainerStatus"]
    assert final["phase"] == "Failed"
    assert "ValueError" in final["message"] and "label tensor has shape" in final["message"]


@pytest.mark.long
def test_a_search_whose_every_trial_raises_names_the_trials_error(
    make_doc: Any, tmp_path: Path
) -> None:
    """Not Tune's "No best trial found", which reads as a missing metric."""
    doc = make_doc(entrypoint="tests/runtime/loops.py:raising_loop",
                   config={"epochs": 1, "report_first": False},
                   storage={"type": "pvc", "path": str(tmp_path / "store")})  # fmt: skip
    doc["scaling"].update(numWorkers=1)
    doc["tune"] = {"paramSpace": {"lr": {"grid": [0.05, 0.2]}}, "metric": "accuracy",
                   "mode": "max", "maxConcurrentTrials": 1}  # fmt: skip
    sink = RecordingTransport()
    code = run_local(load_contract(doc), display=False, transport=sink, min_interval=0)
    assert code == 1
    final = sink.patches[-1]["status"]["trainerStatus"]
    assert final["phase"] == "Failed"
    assert "label tensor has shape" in final["message"], final["message"]
    assert "No best trial" not in final["message"], final["message"]


def test_an_entrypoint_that_does_not_import_ends_in_a_failed_report(
    make_doc: Any, tmp_path: Path
) -> None:
    doc = make_doc(entrypoint="examples.digits.nope:train",
                   storage={"type": "pvc", "path": str(tmp_path / "store")})  # fmt: skip
    sink = RecordingTransport()
    code = run_local(load_contract(doc), display=False, transport=sink, min_interval=0)
    assert code == 2
    final = sink.patches[-1]["status"]["trainerStatus"]
    assert final["phase"] == "Failed"
    assert "'examples.digits.nope:train'" in final["message"] and "not found" in final["message"]


@pytest.mark.long
def test_a_tune_search_runs_each_trial_as_a_torch_trainer(make_doc: Any, tmp_path: Path) -> None:
    doc = make_doc(config={"epochs": 2, "lr": 0.1},
                   storage={"type": "pvc", "path": str(tmp_path / "store")})  # fmt: skip
    doc["scaling"]["resourcesPerWorker"] = {"CPU": 0.5}  # the trial driver asks for no CPU
    doc["tune"] = {
        "paramSpace": {"lr": {"grid": [0.05, 0.2]}, "hidden": 64},
        "numSamples": 1,
        "metric": "accuracy",
        "mode": "max",
        "maxConcurrentTrials": 1,
        "scheduler": None,
    }
    sink = RecordingTransport()
    assert run_local(load_contract(doc), display=False, transport=sink, min_interval=0) == 0
    final = sink.patches[-1]["status"]["trainerStatus"]
    assert final["phase"] == "Succeeded"
    assert final["message"].startswith("best trial of 2: accuracy=")
    assert final["step"] == 4  # both trials reported through the one reporter, 2 epochs each
