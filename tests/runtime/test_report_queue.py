"""Reports reach the driver through a queue that lives where the driver lives.

On real pods the queue's actor once landed on a worker's Ray node; deleting that worker pod
killed the queue, and after Ray Train restarted the worker group every report was lost (the
TrainJob's status stayed at the epoch of the fault until the end). Here a local cluster of two
Ray nodes stands in: the driver's (no CPU, like our head) and a worker node with the CPUs. It
runs in a process of its own, beside the session's local Ray of the other runtime tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.runtime

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]

PLACEMENT = r"""
import json
import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors
from trainer_runtime.trainer import report_queue

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
cluster.add_node(num_cpus=2)
ray.init(address=cluster.address)
try:
    driver = ray.get_runtime_context().get_node_id()
    queues = [report_queue() for _ in range(4)]
    for q in queues:
        q.put_nowait(("report", {"epoch": 0}, None))
        assert q.get(timeout=60) == ("report", {"epoch": 0}, None)
    placed = sorted({a.node_id for a in list_actors(filters=[("class_name", "=", "_QueueActor")])})
    print("RESULT " + json.dumps({"driver": driver, "placed": placed}), flush=True)
finally:
    ray.shutdown()
    cluster.shutdown()
"""


def test_the_report_queue_lives_on_the_drivers_node() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PLACEMENT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["placed"] == [result["driver"]], result
