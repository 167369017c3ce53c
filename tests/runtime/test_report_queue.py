"""Reports reach the driver through a queue that lives where the driver lives.

On real pods the queue's actor once landed on a worker's Ray node; deleting that worker pod
killed the queue, and after Ray Train restarted the worker group every report was lost (the
TrainJob's status stayed at the epoch of the fault until the end). Here a local cluster of two
Ray nodes stands in: the driver's (no CPU, like our head) and a worker node with the CPUs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.runtime

ray = pytest.importorskip("ray")


@pytest.fixture
def two_nodes() -> Iterator[str]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)
    try:
        yield ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_the_report_queue_lives_on_the_drivers_node(two_nodes: str) -> None:
    from ray.util.state import list_actors

    from trainer_runtime.trainer import report_queue

    queues = [report_queue() for _ in range(4)]
    for q in queues:
        q.put_nowait(("report", {"epoch": 0}, None))
        assert q.get(timeout=30) == ("report", {"epoch": 0}, None)
    placed = {a.node_id for a in list_actors(filters=[("class_name", "=", "_QueueActor")])}
    assert placed == {two_nodes}, placed
