"""Training loops for the runtime tests, imported as ``tests/runtime/loops.py:<name>``."""

from __future__ import annotations

from typing import Any

import ray.train


def raising_loop(config: dict[str, Any]) -> None:
    """Report epoch 0 (unless ``report_first`` is false), then raise on every rank.

    With ``barrier``, the ranks meet after their reports. A report returns only once Ray
    Train's controller has polled it (the runtime's commit callback), so the round is complete
    before any rank raises. Without it, which poll takes which report and which error is up to
    the controller and the machine's load.
    """
    if config.get("report_first", True):
        ray.train.report({"epoch": 0, "loss": 1.0})
    if config.get("barrier"):
        import torch.distributed as dist

        dist.barrier()
    raise ValueError(f"label tensor has shape {config.get('shape', '(3, 7)')}, expected (64,)")


def late_peer_loop(config: dict[str, Any]) -> None:
    """Rank 1 reports and raises; rank 0's report of the same round reaches its queue only
    after the controller's poll has taken rank 1's report.

    Rank 1 watches its own result queue and writes ``config["marker"]`` once a poll has taken
    its report; rank 0's checkpoint upload waits for that file, so its report is put just after
    that poll. Rank 0 then goes on training (sleeps) until the group is torn down.
    """
    import os
    import tempfile
    import threading
    import time

    from ray.train import Checkpoint
    from ray.train.v2._internal.execution.context import get_train_context

    marker = str(config["marker"])
    rank = ray.train.get_context().get_world_rank()
    if rank == 1:
        ray.train.report({"epoch": 0, "loss": 1.0})
        queue = get_train_context().get_result_queue()

        def watch() -> None:
            deadline = time.monotonic() + 60
            while queue.unfinished_tasks and time.monotonic() < deadline:
                time.sleep(0.002)
            with open(marker, "w") as f:
                f.write("polled")

        threading.Thread(target=watch, daemon=True).start()
        raise ValueError("rank 1 fails right after its report")

    def upload_after_the_poll(checkpoint: Checkpoint, dir_name: str) -> Checkpoint:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.1)
        storage = ray.train.get_context().get_storage()
        return storage.persist_current_checkpoint(checkpoint, dir_name)  # type: ignore[no-any-return]

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state.json"), "w") as f:
            f.write('{"epoch": 0}')
        ray.train.report(
            {"epoch": 0, "loss": 1.0},
            checkpoint=Checkpoint.from_directory(d),
            checkpoint_upload_fn=upload_after_the_poll,
        )
    time.sleep(float(config.get("train_seconds", 60)))


NOT_CALLABLE = 42


def table_loop(config: dict[str, Any]) -> None:
    """Read the ``train`` dataset shard each epoch with ``iter_torch_batches``.

    Writes the ``id`` values each rank saw in each epoch to ``out_dir/rank<r>-epoch<e>.json``,
    reports every epoch with a checkpoint (rank 0) holding the epoch, resumes after the
    checkpoint's epoch, and returns early after ``stop_after_epoch`` (a run stopped after a
    checkpoint).
    """
    import json
    import os
    import tempfile

    from ray.train import Checkpoint

    epochs = int(config.get("epochs", 2))
    out_dir = str(config["out_dir"])
    stop_after = config.get("stop_after_epoch")
    rank = ray.train.get_context().get_world_rank()
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            start = int(json.load(f)["epoch"]) + 1
    shard = ray.train.get_dataset_shard("train")
    for epoch in range(start, epochs):
        ids: list[int] = []
        for batch in shard.iter_torch_batches(batch_size=64):
            ids.extend(int(v) for v in batch["id"])
            float(batch["x"].sum())
        with open(os.path.join(out_dir, f"rank{rank}-epoch{epoch}.json"), "w") as f:
            json.dump(ids, f)
        metrics = {"epoch": epoch, "rows": len(ids), "start_epoch": start}
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"epoch": epoch}, f)
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)
        if stop_after is not None and epoch >= int(stop_after):
            return


def stalled_peer_loop(config: dict[str, Any]) -> None:
    """Rank 1 never reaches the all_reduce rank 0 waits in: a collective that times out.

    The group's timeout is the contract's ``torch.timeoutSeconds``; rank 1 sleeps well past it.
    """
    import threading

    import torch
    import torch.distributed as dist

    if ray.train.get_context().get_world_rank() == 1:
        # The fault itself: this rank stays away from the collective (rank 0's failure ends
        # the group long before the wait does).
        threading.Event().wait(float(config.get("stall_seconds", 120)))
    tensor = torch.ones(1)
    dist.all_reduce(tensor)


def hang_loop(config: dict[str, Any]) -> None:
    """Report every step; at step ``hang_at`` rank ``hang_rank`` sleeps ``hang_seconds`` before
    the all_reduce its peers have entered (the fault: they wait there), then every rank goes
    on to ``steps``."""
    import time

    import torch
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    for step in range(int(config.get("steps", 6))):
        if rank == int(config.get("hang_rank", 1)) and step == int(config.get("hang_at", 3)):
            time.sleep(float(config.get("hang_seconds", 30)))
        tensor = torch.ones(1)
        dist.all_reduce(tensor)
        ray.train.report({"epoch": 0, "step": step, "sum": float(tensor.item())})


def steps_loop(config: dict[str, Any]) -> None:
    """``steps`` steps of work and an all_reduce each, reported every step; rank
    ``slow_rank`` (none unless given) sleeps ``slow_seconds`` more per step before its
    all_reduce, as a rank on a throttled node computes longer."""
    import time

    import torch
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    slow = config.get("slow_rank")
    for step in range(int(config.get("steps", 20))):
        tensor = torch.randn(64, 64)
        for _ in range(int(config.get("work", 20))):
            tensor = torch.tanh(tensor @ tensor.T / 64)
        if slow is not None and rank == int(slow):
            time.sleep(float(config.get("slow_seconds", 0.3)))
        dist.all_reduce(tensor)
        ray.train.report({"epoch": 0, "step": step})
