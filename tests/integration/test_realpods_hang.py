"""Hung and slow training on real pods (CPU, gloo): found, dumped, explained, restarted.

The loop is a folder in no image, submitted with `raytrain submit --code` (as
test_realpods_code.py does): two workers that report every epoch, rank 0 saving a checkpoint
every CHECKPOINT_EVERY epochs, an all_reduce per epoch, and three faults the config turns on:

- `hang`: in attempt 0 only, rank 1 sleeps an hour before the all_reduce rank 0 has entered.
  The job is reported hung within the timeout, both ranks' stacks are stored and quoted, the
  attempt restarts from the latest checkpoint (spec.failure.onHang: Restart) and the job ends
  Succeeded having redone at most one checkpoint interval.
- `pause`: every rank stops for PAUSE_SECONDS between two reports (a long evaluation) under a
  hangTimeoutSeconds set above it: not hung, not restarted.
- `slow`: from SLOW_FROM on, rank 1 sleeps SLOW_SECONDS more before each all_reduce: it is named
  the straggler within a few reports; before that, over at least 50 reports of equal ranks, no
  rank was.

Markers as test_realpods_triage.py uses them: `realnode` for the module; the hang's restart
starts a second Ray cluster, so it is also `realpods_faults` and `realpods_second_cluster`
(make test-faults runs it, make test leaves it out for time).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from _wait import wait_for
from realpods import BUCKET, NODE, ON_REAL_NODE, condition, wait_condition
from test_realpods import DIGITS, START_TIMEOUT, TRAIN_TIMEOUT, RealWorld, _logs, _trainjob
from test_realpods import real_world as real_world
from test_realpods_code import _submit

from raytrain_contract import hang
from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]

CPU = "250m"
CHECKPOINT_EVERY = 2
#: Above the start of an attempt to its first report on the real node (the timeout bounds
#: that too: it counts from the worker group's start), well below the hour rank 1 sleeps.
HANG_TIMEOUT = 90
PAUSE_SECONDS = 90
PAUSE_TIMEOUT = 150
SLOW_FROM = 60
SLOW_SECONDS = 1.5

LOOP = """
import os
import pathlib
import tempfile
import time

import ray.train
import torch
import torch.distributed as dist


def train(config):
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = int(pathlib.Path(d, "epoch").read_text()) + 1
    rank = ray.train.get_context().get_world_rank()
    attempt = int(os.environ.get("RAYTRAIN_ATTEMPT", "0"))
    for epoch in range(start, config["epochs"]):
        time.sleep(config.get("sleep", 0.5))  # the epoch's work
        if config.get("hang_at") == epoch and rank == 1 and attempt == 0:
            time.sleep(3600)  # the fault: this rank never reaches the all_reduce
        if config.get("pause_at") == epoch:
            time.sleep(config["pause_seconds"])  # a long evaluation, on every rank
        if rank == 1 and epoch >= config.get("slow_from", 10**9):
            time.sleep(config["slow_seconds"])  # a throttled node
        total = torch.ones(1)
        dist.all_reduce(total)
        metrics = {"epoch": epoch, "start_epoch": start, "attempt": attempt}
        if rank == 0 and (epoch + 1) % config["checkpoint_every"] == 0:
            with tempfile.TemporaryDirectory() as d:
                pathlib.Path(d, "epoch").write_text(str(epoch))
                ray.train.report(metrics, ray.train.Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)
"""


def _project(root: Path) -> Path:
    (root / "hangs").mkdir(parents=True, exist_ok=True)
    (root / "hangs" / "__init__.py").write_text("")
    (root / "hangs" / "loop.py").write_text(textwrap.dedent(LOOP))
    return root


def _manifest(path: Path, name: str, config: dict[str, Any], failure: dict[str, Any]) -> Path:
    """digits.yaml's Secret and storage, the folder's loop, the real node's sizes."""
    docs = [d for d in yaml.safe_load_all(DIGITS.read_text()) if d]
    for doc in docs:
        if doc.get("kind") != "TrainJob":
            continue
        doc["metadata"]["name"] = name
        spec = doc["spec"]
        spec["entrypoint"] = "hangs.loop:train"
        spec["config"] = {"checkpoint_every": CHECKPOINT_EVERY, **config}
        spec["scaling"]["resourcesPerWorker"] = {"cpu": CPU, "memory": "1Gi"}
        spec["checkpoint"] = {"numToKeep": 3}
        spec["failure"] = {"maxFailures": 0, **failure}
        spec["backoffLimit"] = 2
        head = {k: dict(v) for k, v in DEFAULT_HEAD_RESOURCES.items()}
        head["requests"]["cpu"] = CPU
        spec["head"] = {**ON_REAL_NODE, "resources": head}
        spec["workerTemplate"] = dict(ON_REAL_NODE)
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _metric(tj: dict[str, Any], name: str) -> float | None:
    for m in (tj.get("status", {}).get("trainerStatus") or {}).get("metrics") or []:
        if m["name"] == name:
            return float(m["value"])
    return None


def _events(world: RealWorld, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = world.cluster.get_json(
        "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return items


def _stored(world: RealWorld, key: str) -> str:
    body = world.minio.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return str(body.decode())


@pytest.mark.realpods_faults
@pytest.mark.realpods_second_cluster
def test_a_rank_that_never_reaches_the_all_reduce_is_dumped_named_and_restarted(
    real_world: RealWorld, namespace: str, tmp_path: Path
) -> None:
    name, epochs, hang_at = "hung", 14, 7
    config = {"epochs": epochs, "hang_at": hang_at, "sleep": 1.0}
    manifest = _manifest(tmp_path / "hung.yaml", name, config, {"hangTimeoutSeconds": HANG_TIMEOUT})
    _submit(real_world, namespace, manifest, _project(tmp_path / "proj"))

    def retried() -> tuple[str, dict[str, Any]] | None:
        tj = _trainjob(real_world, namespace, name)
        failed = condition(tj, "Failed")
        assert not (failed and failed["status"] == "True"), json.dumps(tj.get("status"), indent=1)
        # Reconciling says Retrying for one pass only (the next says it waits for the hung RayJob
        # and its pods to go), too short for a poll to see: its Event keeps the message.
        said = next(
            (e["message"] for e in _events(real_world, namespace, name)
             if e["reason"] == "Retrying" and "(Hung:" in e["message"]),
            None,
        )  # fmt: skip
        return (said, tj) if said and tj.get("status", {}).get("attempt") else None

    said, tj = wait_for(
        retried, START_TIMEOUT + TRAIN_TIMEOUT, "the hung attempt's retry", interval=2
    )
    assert said.startswith("Reconciling is True: "), said
    message = said.removeprefix("Reconciling is True: ")
    print(f"\n--- the operator's message (real pods) ---\n{message}")
    assert message.startswith("attempt 0 failed (Hung: no training report for "), message
    quiet = int(re.search(r"no training report for (\d+) s", message)[1])  # type: ignore[index]
    # Within the timeout: at it, plus at most the minute the operator waits for the stacks.
    assert HANG_TIMEOUT <= quiet <= HANG_TIMEOUT + hang.STACKS_WAIT_SECONDS + 30, message
    assert f"hang timeout is {HANG_TIMEOUT} s" in message
    assert re.search(
        r"Where the ranks were: rank 1 at hangs/loop\.py:\d+ in train \(time\.sleep\(3600\)",
        message,
    ), message
    assert re.search(
        r"rank 0 in torch\.distributed all_reduce, called at hangs/loop\.py:\d+ in train", message
    ), message
    assert f"likely cause: rank 1 (pod {name}-0-" in message and f"node {NODE})" in message
    assert f"raytrain logs {name} --attempt 0 --stacks" in message
    status = tj["status"]
    assert status["attempt"] == 1 and status["restarts"] == 1
    assert status["hangs"][0]["attempt"] == 0 and status["hangs"][0]["nodes"] == [NODE]
    event = next(e for e in _events(real_world, namespace, name) if e["reason"] == "Hung")
    assert event["type"] == "Warning" and event["message"].startswith("attempt 0 failed")

    # Every rank's stacks, stored and printed by the CLI.
    stacks = _logs(real_world, namespace, name, "--attempt", "0", "--stacks")
    assert stacks.returncode == 0, stacks.stderr
    print("--- raytrain logs --stacks (head) ---\n" + "\n".join(stacks.stdout.splitlines()[:6]))
    assert "Where the ranks were: rank 1 at hangs/loop.py:" in stacks.stdout
    for rank in (0, 1):
        section = stacks.stdout.split(f"=== rank {rank}: ", 1)[1].split("\n=== rank ", 1)[0]
        assert "[the training loop]" in section and "in train" in section, section[:3000]

    # The next attempt resumes from the latest checkpoint and ends Succeeded.
    done = wait_condition(
        real_world.cluster, namespace, name, "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT
    )
    assert done["status"]["restarts"] == 1 and condition(done, "Hung") is None
    # Exact, from the run log: the status shows what a poll saw, a report at most every 5 s.
    run = done["status"]["runName"]
    hung = _stored(real_world, f"checkpoints/{run}/attempt-0/metrics.jsonl").splitlines()
    last_epoch = int(json.loads(hung[-1])["metrics"]["epoch"])
    assert last_epoch == hang_at - 1, hung[-1]
    resumed = _stored(real_world, f"checkpoints/{run}/attempt-1/metrics.jsonl").splitlines()
    resumed_at = int(json.loads(resumed[0])["metrics"]["start_epoch"])
    redone = last_epoch + 1 - resumed_at
    print(f"attempt 0 reported epoch {last_epoch}, attempt 1 resumed at {resumed_at}: "
          f"{redone} epoch(s) redone, checkpoint interval {CHECKPOINT_EVERY}")  # fmt: skip
    assert 0 <= redone <= CHECKPOINT_EVERY, (hung[-1], resumed[0])
    goodput = done["status"]["goodput"]
    assert goodput["lostToHangSeconds"] >= HANG_TIMEOUT, goodput
    assert goodput["clusters"][0]["outcome"] == "Retried" and goodput["clusters"][0]["hungSince"]


def test_a_long_pause_under_its_timeout_runs_on_and_a_slow_rank_is_named_the_straggler(
    real_world: RealWorld, namespace: str, tmp_path: Path
) -> None:
    name = "slow"
    epochs = SLOW_FROM + 20
    config = {
        "epochs": epochs,
        "sleep": 0.5,
        "pause_at": 10,
        "pause_seconds": PAUSE_SECONDS,
        "slow_from": SLOW_FROM,
        "slow_seconds": SLOW_SECONDS,
    }
    failure = {"hangTimeoutSeconds": PAUSE_TIMEOUT}
    manifest = _manifest(tmp_path / "slow.yaml", name, config, failure)
    _submit(real_world, namespace, manifest, _project(tmp_path / "proj"))

    # Equal ranks, a 90 s pause among them: no straggler, never hung, no restart.
    def equal_phase_over() -> dict[str, Any] | None:
        tj = _trainjob(real_world, namespace, name)
        status = tj.get("status", {})
        assert status.get("restarts", 0) == 0, json.dumps(status, indent=1)
        assert condition(tj, "Hung") is None, condition(tj, "Hung")
        assert condition(tj, "Straggling") is None, condition(tj, "Straggling")
        step_time = (status.get("trainerStatus") or {}).get("stepTime") or {}
        assert not step_time.get("straggler"), step_time
        return tj if (_metric(tj, "epoch") or 0) >= SLOW_FROM - 1 else None

    wait_for(
        equal_phase_over, START_TIMEOUT + TRAIN_TIMEOUT, f"{SLOW_FROM} equal epochs", interval=1
    )
    # The status shows what a poll saw; the run log has every round.
    run = _trainjob(real_world, namespace, name)["status"]["runName"]
    rounds = [
        json.loads(x)
        for x in _stored(real_world, f"checkpoints/{run}/attempt-0/steps.jsonl").splitlines()
    ]
    equal = [r for r in rounds if r["round"] <= SLOW_FROM]
    assert len(equal) >= 50, len(equal)
    found = [hang.round_skew({int(k): (v, r["wall"]) for k, v in r["busy"].items()}) for r in equal]
    skews = [s for s in found if s is not None]
    # The runtime's own rule, at every round of the equal phase: no straggler.
    assert all(hang.straggler(skews[: i + 1]) is None for i in range(len(skews))), equal[-5:]
    print(f"\nequal ranks: {len(equal)} rounds, largest skew {max(s.skew for s in skews):.1%}")

    # Rank 1 slowed: named within a few reports, with its pod and node.
    def named() -> dict[str, Any] | None:
        tj = _trainjob(real_world, namespace, name)
        slow = condition(tj, "Straggling")
        return tj if slow and slow["status"] == "True" else None

    tj = wait_for(named, TRAIN_TIMEOUT, "the Straggling condition", interval=1)
    slow = condition(tj, "Straggling") or {}
    print(f"--- the Straggling condition (real pods) ---\n{slow['message']}")
    assert slow["message"].startswith(f"rank 1 (pod {name}-0-"), slow
    assert f"node {NODE})" in slow["message"]
    at = int(_metric(tj, "epoch") or 0)
    # Within a few reports: the window of 5, a sample batch, a poll of this test.
    assert at - SLOW_FROM <= hang.STRAGGLER_REPORTS + 6, (at, slow)
    events = _events(real_world, namespace, name)
    straggling = [e for e in events if e["reason"] == "SlowRank"]
    assert straggling and all("rank 1 " in e["message"] for e in straggling), straggling
    done = wait_condition(real_world.cluster, namespace, name, "Succeeded", TRAIN_TIMEOUT)
    assert done["status"]["restarts"] == 0
    hung = [
        e for e in _events(real_world, namespace, name) if e["reason"] in ("Hung", "NoProgress")
    ]
    assert not hung, hung
