"""Pure parts of the data path: CPUs left to Ray Data, the wait warning, the resumable sampler."""

from __future__ import annotations

from typing import Any

import pytest
from _clock import FakeClock

from raytrain_contract import load_contract
from trainer_runtime.datawait import Demand, WaitWatch, describe_wait
from trainer_runtime.local import cpus_needed
from trainer_runtime.trainer import DataPlan, training_cpus

pytestmark = pytest.mark.runtime


def contract(make_doc: Any, **scaling: Any) -> Any:
    doc = make_doc(storage={"type": "pvc", "path": "/tmp/unused"})
    doc["scaling"].update(scaling)
    return doc


def test_local_ray_keeps_a_cpu_for_ray_data_only_when_there_are_datasets(make_doc: Any) -> None:
    doc = contract(make_doc, numWorkers=2)
    assert cpus_needed(load_contract(doc)) == 2
    doc["datasets"] = {"train": {"uri": "/data/t.parquet", "format": "parquet", "split": True}}
    assert cpus_needed(load_contract(doc)) == 3


def test_training_cpus_counts_the_most_workers_and_gpu_workers_hold_none(make_doc: Any) -> None:
    doc = contract(make_doc, numWorkers=None, minWorkers=1, maxWorkers=4,
                   resourcesPerWorker={"CPU": 0.5})  # fmt: skip
    assert training_cpus(load_contract(doc)) == 2.0
    gpu = contract(make_doc, numWorkers=2, useGpu=True, resourcesPerWorker={"GPU": 1})
    assert training_cpus(load_contract(gpu)) == 0.0


@pytest.mark.parametrize(
    ("cluster", "training", "spare", "read"),
    [(3, 2, 1, 1.0), (2, 2, 0, 0.0), (2, 4, 0, 0.0), (8, 2, 6, 1.0), (2.5, 2, 0.5, 0.0)],
)
def test_data_plan_reads_without_a_cpu_only_when_none_is_left(
    cluster: float, training: float, spare: float, read: float
) -> None:
    plan = DataPlan(cluster, training)
    assert plan.spare_cpus == spare
    assert plan.read_cpus == read


def test_wait_watch_warns_after_the_wait_and_again_one_period_later() -> None:
    clock = FakeClock(100.0)
    demand: Demand = [({"CPU": 1.0}, 1)]
    current = {"demand": demand}
    watch = WaitWatch(["train"], 2.0, warn_after=10, demand=lambda: current["demand"],
                      cpus=lambda: (2.0, 0.0), clock=clock)  # fmt: skip
    assert watch.check() is None  # the wait starts
    clock.now += 9.9
    assert watch.check() is None
    clock.now += 0.2
    message = watch.check()
    assert message is not None
    assert "1 Ray task waited 10 s" in message and "1 x {CPU: 1}" in message
    assert "0 of 2 CPUs free" in message and "training workers hold 2" in message
    assert "'train'" in message and "spec.scaling.resourcesPerWorker.cpu" in message
    clock.now += 5
    assert watch.check() is None  # once per period
    clock.now += 5
    assert watch.check() is not None
    # The demand went away: the next wait is timed from its own start.
    current["demand"] = []
    assert watch.check() is None
    current["demand"] = demand
    clock.now += 1
    assert watch.check() is None


def test_describe_wait_lists_every_shape() -> None:
    text = describe_wait([({"CPU": 1.0}, 2), ({"CPU": 0.5, "memory": 1e9}, 1)], 61.0,
                         ["train", "eval"], 4.0, (4.0, 0.0))  # fmt: skip
    assert "3 Ray tasks waited 61 s" in text
    assert "2 x {CPU: 1}, 1 x {CPU: 0.5, memory: 1e+09}" in text
    assert "'train', 'eval'" in text


def test_the_resumed_sampler_yields_the_rest_of_the_epoch_in_the_same_order() -> None:
    from examples.resumable.train import EpochSampler, batches_per_epoch

    size, world, batch = 101, 2, 8
    for rank in range(world):
        whole = list(EpochSampler(size, seed=3, epoch=1, rank=rank, world=world, batch_size=batch))
        assert len(whole) == 51
        rest = EpochSampler(size, seed=3, epoch=1, rank=rank, world=world, batch_size=batch,
                            start_batch=4)  # fmt: skip
        assert list(rest) == whole[32:] and len(rest) == 19
    shares = [
        set(EpochSampler(size, seed=3, epoch=1, rank=r, world=world, batch_size=batch))
        for r in range(world)
    ]
    assert shares[0] | shares[1] == set(range(size))
    other_epoch = list(EpochSampler(size, seed=3, epoch=2, rank=0, world=world, batch_size=batch))
    assert other_epoch != list(EpochSampler(size, seed=3, epoch=1, rank=0, world=world,
                                            batch_size=batch))  # fmt: skip
    assert batches_per_epoch(size, world, batch) == 7


def test_a_search_runs_one_trial_at_a_time_unless_told_more(make_doc: Any) -> None:
    from trainer_runtime.tune import concurrent_trials

    doc = contract(make_doc, numWorkers=2)
    doc["tune"] = {"paramSpace": {"lr": {"grid": [0.1, 0.2]}}, "metric": "accuracy"}
    assert concurrent_trials(load_contract(doc).tune) == 1
    doc["tune"]["maxConcurrentTrials"] = 3
    assert concurrent_trials(load_contract(doc).tune) == 3
