"""A drained Ray node: examples/resumable reports a checkpoint on the notice and the restarted
worker group goes on from it.

The Ray cluster is three nodes of ``ray.cluster_utils.Cluster`` on this machine (a head and two
nodes that each hold one ``trainer`` resource, so the training worker runs on a node that is not
the head). Once the first periodic checkpoint is written, the node the worker runs on is drained
the way a worker pod's preStop hook drains it (trainer_runtime.drain.RayGcs: reason PREEMPTION,
a deadline a few seconds away).
Ray Train sees the draining node within its poll, ``ray.train.get_preemption_info()`` returns a
value on every rank, the loop reports a checkpoint marked ``preempted``, and at the deadline the
controller restarts the worker group on the other node from the latest checkpoint.

The cluster lives in a child process: the session's local Ray (tests/runtime/conftest.py) and a
multi-node cluster cannot share one driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.runtime

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = "examples.resumable.train:train_loop_per_worker"
DEADLINE_SECONDS = 6.0
FIRST_CHECKPOINT_SECONDS = 300.0
# 3 epochs of 43 steps (digits' 1347 training rows in batches of 32, one worker); a checkpoint
# every 10 steps and at the end of each epoch.
CONFIG = {
    "epochs": 3,
    "lr": 0.05,
    "batch_size": 32,
    "hidden": 32,
    "seed": 0,
    "checkpoint_every": 10,
    "step_seconds": 0.25,
}
PER_EPOCH = 43


def _drain_when_training(gcs_address: str, run_dir: Path, out: dict[str, Any]) -> None:
    """Drain the Ray Train worker's node once the run has a checkpoint."""
    from ray.util.state import list_actors

    from trainer_runtime.drain import REASON_MESSAGE, RayGcs

    # Polled with a deadline: past it the test's own assertions on `out` say what was missing.
    deadline = time.monotonic() + FIRST_CHECKPOINT_SECONDS
    tick = threading.Event()
    while not any(run_dir.glob("checkpoint_*")):
        if time.monotonic() > deadline:
            out.update(accepted=False, why=f"no checkpoint in {FIRST_CHECKPOINT_SECONDS} s")
            return
        tick.wait(0.2)
    alive = [
        a
        for a in list_actors(filters=[("state", "=", "ALIVE")])
        if "RayTrainWorker" in (a.class_name or "")
    ]
    node_id = str(alive[0].node_id)
    deadline_ms = int((time.time() + DEADLINE_SECONDS) * 1000)
    accepted, why = RayGcs(gcs_address).drain(
        node_id, REASON_MESSAGE.format(pod="worker-0"), deadline_ms
    )
    out.update(node=node_id, accepted=accepted, why=why, at=time.time())


def main(storage: str) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from examples.resumable.train import train_loop_per_worker

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={"trainer": 1})
    ray.init(address=cluster.address)
    drained: dict[str, Any] = {}
    threading.Thread(
        target=_drain_when_training,
        args=(cluster.gcs_address, Path(storage) / "preempted", drained),
        daemon=True,
    ).start()
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=CONFIG,
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1, "trainer": 1}),
        run_config=RunConfig(
            name="preempted",
            storage_path=storage,
            checkpoint_config=CheckpointConfig(num_to_keep=None),
        ),
    )
    result = trainer.fit()
    reports = [dict(metrics) for _, metrics in result.best_checkpoints or []]
    print("RESULT " + json.dumps({"drained": drained, "reports": reports}), flush=True)
    ray.shutdown()
    cluster.shutdown()  # type: ignore[no-untyped-call]


@pytest.mark.long
@pytest.mark.timeout(600)
def test_a_drained_node_gets_a_checkpoint_at_the_notice_and_the_new_group_resumes_there(
    tmp_path: Path,
) -> None:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, __file__, str(tmp_path / "store")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out["drained"].get("accepted"), out["drained"]
    reports = sorted(out["reports"], key=lambda r: (r["start_epoch"], r["start_batch"], r["step"]))

    # One checkpoint answers the notice, after the periodic one that set the drain off.
    notices = [r for r in reports if r.get("preempted") == 1]
    assert len(notices) == 1, reports
    notice = notices[0]
    assert notice["start_epoch"] == 0 and notice["start_batch"] == 0, notice
    assert notice["step"] > CONFIG["checkpoint_every"], notice

    # The worker group was restarted, and it began at the last checkpoint the first group wrote
    # (the notice's, or an epoch's end reached before the deadline).
    first = [r for r in reports if (r["start_epoch"], r["start_batch"]) == (0, 0)]
    later = [r for r in reports if (r["start_epoch"], r["start_batch"]) != (0, 0)]
    assert later, f"no restarted worker group: {reports}"
    last = max(first, key=lambda r: r["step"])
    assert last["step"] >= notice["step"]
    closed = last["batch"] == PER_EPOCH
    resumed_at = (last["epoch"] + 1, 0) if closed else (last["epoch"], last["batch"])
    assert {(r["start_epoch"], r["start_batch"]) for r in later} == {resumed_at}, reports

    # Nothing before the notice was trained twice, and the run finished every step.
    assert min(r["step"] for r in later) > notice["step"]
    assert max(r["step"] for r in reports) == CONFIG["epochs"] * PER_EPOCH


if __name__ == "__main__":
    main(sys.argv[1])
