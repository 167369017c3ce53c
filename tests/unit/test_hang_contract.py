"""The shared rules of the hang watch and the straggler (raytrain_contract/hang.py): the timeout
in force, where a rank is stuck, how the ranks are grouped, and when a rank is a straggler."""

from __future__ import annotations

from typing import Any

import pytest

from raytrain_contract import hang


def test_a_set_timeout_wins_and_zero_turns_the_watch_off() -> None:
    assert hang.timeout_seconds(30, 2.0) == 30.0
    assert hang.timeout_seconds(0, 2.0) is None
    assert "hangTimeoutSeconds 0" in hang.describe_timeout(0, 2.0)


def test_the_derived_timeout_is_ten_intervals_with_a_floor_and_a_start_up_default() -> None:
    assert hang.timeout_seconds(None, None) == hang.DEFAULT_STARTUP_SECONDS
    assert hang.timeout_seconds(None, 2.0) == hang.DEFAULT_FLOOR_SECONDS  # 20 s < the floor
    assert hang.timeout_seconds(None, 120.0) == 1200.0
    assert "median report interval 120 s" in hang.describe_timeout(None, 120.0)


def test_the_median_is_over_the_latest_intervals() -> None:
    old = [1000.0] * 30
    recent = [2.0] * hang.INTERVALS_KEPT
    assert hang.median_interval(old + recent) == 2.0
    assert hang.median_interval([]) is None


def frame(file: str, line: int, function: str, source: str = "", library: bool = False) -> Any:
    return {"file": file, "line": line, "function": function, "source": source, "library": library}


SITE = "/usr/local/lib/python3.11/site-packages"
RAY_BOOT = [
    frame("/usr/local/lib/python3.11/threading.py", 1002, "_bootstrap", library=True),
    frame(f"{SITE}/ray/train/v2/_internal/execution/worker_group/thread_runner.py", 40, "_run",
          library=True),
    frame(f"{SITE}/trainer_runtime/entrypoint.py", 110, "loop_with_config", library=True),
    frame(f"{SITE}/trainer_runtime/hangwatch.py", 60, "watched", library=True),
]  # fmt: skip


def test_a_rank_in_a_collective_names_the_call_and_the_loops_line() -> None:
    frames = [
        *RAY_BOOT,
        frame("/app/loops/hang.py", 33, "train_loop", "dist.all_reduce(t)"),
        frame(f"{SITE}/trainer_runtime/steptime.py", 120, "timed", library=True),
        frame(f"{SITE}/torch/distributed/c10d_logger.py", 81, "wrapper", library=True),
        frame(f"{SITE}/torch/distributed/distributed_c10d.py", 2806, "all_reduce", library=True),
    ]
    found = hang.place(frames)
    assert found.waiting
    # The outermost frame of torch.distributed is the call the loop made; the runtime's timer
    # and torch's logging decorator around it are not what the loop called.
    assert (
        found.where == "in torch.distributed all_reduce, called at loops/hang.py:33 in train_loop"
    )


def test_a_collective_inside_another_names_the_one_the_loop_called() -> None:
    frames = [
        *RAY_BOOT,
        frame("/app/train.py", 40, "loop", "dist.all_gather_object(out, x)"),
        frame(f"{SITE}/torch/distributed/distributed_c10d.py", 3100, "all_gather_object",
              library=True),
        frame(f"{SITE}/torch/distributed/distributed_c10d.py", 3700, "all_gather", library=True),
    ]  # fmt: skip
    assert hang.place(frames).where.startswith("in torch.distributed all_gather_object, called")


def test_a_rank_in_its_own_code_names_the_line_and_its_source() -> None:
    frames = [*RAY_BOOT, frame("/app/loops/hang.py", 31, "train_loop", "time.sleep(3600)")]
    found = hang.place(frames)
    assert not found.waiting
    assert found.where == "at loops/hang.py:31 in train_loop (time.sleep(3600))"


def test_a_rank_in_the_data_loader_and_one_in_report() -> None:
    loader = [
        *RAY_BOOT,
        frame("/app/train.py", 50, "loop", "for batch in loader:"),
        frame(f"{SITE}/torch/utils/data/dataloader.py", 630, "__next__", library=True),
        frame("/usr/local/lib/python3.11/queue.py", 180, "get", library=True),
    ]
    assert hang.place(loader).where.startswith("in the data loader (torch.utils.data __next__")
    assert not hang.place(loader).waiting
    report = [
        *RAY_BOOT,
        frame("/app/train.py", 60, "loop", "ray.train.report(m)"),
        frame(f"{SITE}/ray/train/v2/_internal/execution/train_fn_utils.py", 50, "report",
              library=True),
    ]  # fmt: skip
    place = hang.place(report)
    assert place.waiting and place.where.startswith("in ray.train report")
    assert hang.place([]).where.startswith("at an unknown place")


def test_ranks_are_grouped_the_odd_one_out_first_and_the_silent_named() -> None:
    ranks = [
        {"rank": 0, "where": "in torch.distributed all_reduce", "waiting": True},
        {"rank": 1, "where": "at hang.py:31 in loop (time.sleep(3600))", "waiting": False},
        {"rank": 2, "where": "in torch.distributed all_reduce", "waiting": True},
    ]
    text = hang.describe_ranks(ranks, workers=4)
    assert text == (
        "rank 1 at hang.py:31 in loop (time.sleep(3600)); ranks 0 and 2 in torch.distributed "
        "all_reduce; rank 3 sent no stacks"
    )
    assert hang.suspects(ranks) == [1]
    # All waiting (a peer gone), or none: nobody is singled out.
    assert hang.suspects([r for r in ranks if r["waiting"]]) == []
    assert hang.suspects([{"rank": 0, "where": "x", "waiting": False}]) == []


def rounds(*rows: dict[int, tuple[float, float]]) -> list[hang.RoundSkew]:
    found = [hang.round_skew(row) for row in rows]
    return [r for r in found if r is not None]


def test_a_rank_slower_in_every_recent_report_is_the_straggler() -> None:
    slow = {0: (0.1, 0.45), 1: (0.4, 0.45), 2: (0.1, 0.45)}
    found = hang.straggler(rounds(*[slow] * hang.STRAGGLER_REPORTS))
    assert found is not None and found.rank == 1
    assert found.skew == pytest.approx(0.3 / 0.45)


def test_no_straggler_before_enough_reports_or_when_the_slowest_changes() -> None:
    slow = {0: (0.1, 0.45), 1: (0.4, 0.45)}
    other = {0: (0.4, 0.45), 1: (0.1, 0.45)}
    assert hang.straggler(rounds(*[slow] * (hang.STRAGGLER_REPORTS - 1))) is None
    mixed = [slow] * (hang.STRAGGLER_REPORTS - 1) + [other]
    assert hang.straggler(rounds(*mixed)) is None


def test_equal_ranks_with_noise_name_no_straggler() -> None:
    # A few percent of jitter between equal ranks stays under the threshold.
    rows = [{0: (0.100, 0.2), 1: (0.104, 0.2), 2: (0.099, 0.2)}] * 20
    found = rounds(*rows)
    assert all(r.skew < hang.STRAGGLER_SKEW for r in found)
    assert hang.straggler(found) is None
    assert hang.round_skew({0: (1.0, 1.0)}) is None  # one rank: nobody to wait for
