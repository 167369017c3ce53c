"""A search's trial drivers run on the head, next to the driver, not on the worker pods.

On real pods each trial's driver (Tune's trial actor, which imports torch: about 0.4 GB) and the
TorchTrainer controller it starts (about 0.2 GB, placed on the trial's node) landed on a worker
pod beside that pod's training worker; the 1 GiB worker pod went over Ray's memory threshold and
Ray killed the trial before its first report. The head advertises no CPU, so only a request
for the head's own resource puts them there. Here a local cluster of two Ray nodes stands in:
the head (no CPU, like ours) and a worker node with the CPUs. It runs in a process of its own,
beside the session's local Ray of the other runtime tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.runtime

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]

SEARCH = r"""
import json, sys
import ray
from ray.cluster_utils import Cluster
from raytrain_contract import TuneSettings
from trainer_runtime.tune import run_tune

storage = sys.argv[1]
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
cluster.add_node(num_cpus=2)
ray.init(address=cluster.address)


def loop(config):
    import ray.train
    ray.train.report({"accuracy": config["lr"]})


def make_trainer(config, name, callbacks):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    # Runs inside the trial's driver: where it runs is where the trial was placed.
    placed.append(ray.get_runtime_context().get_node_id())
    with open(f"{storage}/{name}.node", "w") as f:
        f.write(ray.get_runtime_context().get_node_id())
    return TorchTrainer(
        loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=name, storage_path=storage, callbacks=callbacks),
    )


placed = []
try:
    head = ray.get_runtime_context().get_node_id()
    settings = TuneSettings(
        param_space={"lr": {"grid": [0.1, 0.2]}}, metric="accuracy", mode="max",
        max_concurrent_trials=1,
    )
    grid = run_tune(settings, {}, make_trainer, run_name="search", storage_path=storage,
                    storage_filesystem=None)
    import glob
    nodes = sorted(open(p).read() for p in glob.glob(f"{storage}/*.node"))
    errors = [str(r.error) for r in grid if r.error is not None]
    best = grid.get_best_result().metrics["accuracy"]
    print("RESULT " + json.dumps({"head": head, "trial_nodes": nodes, "errors": errors,
                                  "best": best}), flush=True)
finally:
    ray.shutdown()
    cluster.shutdown()
"""


@pytest.mark.long
@pytest.mark.timeout(600)
def test_trial_drivers_run_on_the_head_that_advertises_no_cpu(tmp_path: Path) -> None:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", SEARCH, str(tmp_path)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": path},
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out["errors"] == [], out
    assert out["trial_nodes"] == [out["head"], out["head"]], out
    assert out["best"] == 0.2, out
