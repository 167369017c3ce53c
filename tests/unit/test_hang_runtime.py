"""The runtime's side of the hang watch and the step times, without Ray: when the controller's
watch fires, what a process's stack dump holds (read with sys._current_frames, no ptrace), what
the reporter writes to status.trainerStatus, what stacks.txt says, and how the driver pairs the
ranks' step times into rounds."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from raytrain_contract import hang
from trainer_runtime import hangwatch, steptime
from trainer_runtime.reporter import RecordingTransport, Reporter
from trainer_runtime.runlog import STACKS, RunLog


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the controller's watch -----------------------------------------------------------------------


def test_the_watch_fires_once_per_stall_at_the_timeout_from_the_last_progress() -> None:
    watch = hangwatch.Watch(configured=30)
    assert watch.due(0) is None  # no worker group yet
    watch.start(100)
    assert watch.due(129) is None
    assert watch.due(130) == 30
    watch.fired = True
    assert watch.due(500) is None  # one dump per stall
    watch.report(600)  # progress again: the next stall gets its own dump
    assert watch.due(629) is None and watch.due(630) == 30


def test_the_derived_timeout_follows_the_report_interval() -> None:
    watch = hangwatch.Watch(configured=None)
    watch.start(0)
    assert watch.timeout() == hang.DEFAULT_STARTUP_SECONDS
    for t in range(0, 200, 100):
        watch.report(float(t))
    assert watch.timeout() == 1000.0  # 10 x the 100 s interval
    watch.start(500)  # a restarted group: its intervals start anew
    assert watch.timeout() == hang.DEFAULT_STARTUP_SECONDS
    assert hangwatch.Watch(configured=0).due(10**6) is None


# -- a process's stacks ---------------------------------------------------------------------------


def blocked_in_the_loop(started: threading.Event, release: threading.Event) -> None:
    hangwatch.mark_training_thread()
    started.set()
    # The line it is stuck on:
    release.wait(60)


@pytest.fixture
def stuck_thread() -> Iterator[threading.Thread]:
    started, release = threading.Event(), threading.Event()
    # Another thread of the process, whose name sorts first: the training thread still leads.
    helper = threading.Thread(target=release.wait, args=(60,), name="AAA-helper")
    helper.start()
    thread = threading.Thread(
        target=blocked_in_the_loop, args=(started, release), name="TrainingThread(loop)"
    )
    thread.start()
    assert started.wait(10)
    try:
        yield thread
    finally:
        release.set()
        thread.join(10)
        helper.join(10)
        hangwatch._TRAINING_THREAD = None
        steptime.CLOCK.thread = None


def test_a_dump_reads_every_threads_stack_the_training_thread_first(
    stuck_thread: threading.Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYTRAIN_POD_NAME", "digits-0-worker-a")
    monkeypatch.setenv("RAYTRAIN_NODE_NAME", "node-a")
    dump = hangwatch.dump_stacks()
    text = dump["text"]
    assert text.startswith(f"pid {dump['pid']}, pod digits-0-worker-a, node node-a")
    first = text.split("\nThread ", 2)[1]
    assert first.startswith('"TrainingThread(loop)"') and "[the training loop]" in first
    assert 'Thread "AAA-helper"' in text
    assert "in blocked_in_the_loop" in first and "release.wait(60)" in first
    where = hang.place(dump["frames"])
    assert not where.waiting
    assert where.where.startswith("at unit/test_hang_runtime.py:")
    assert where.where.endswith("in blocked_in_the_loop (release.wait(60))")
    # The thread that took the dump is not in it.
    assert "in dump_stacks" not in text


def test_without_the_mark_rays_thread_name_finds_the_loop(stuck_thread: threading.Thread) -> None:
    hangwatch._TRAINING_THREAD = None
    dump = hangwatch.dump_stacks()
    assert hang.place(dump["frames"]).where.endswith("(release.wait(60))")


class Ref:
    def __init__(self, answer: dict[str, Any] | None) -> None:
        self.answer = answer


class Worker:
    """A stand-in for Ray Train's Worker: `execute_async` hands back a ref to its answer (None:
    a process that does not answer)."""

    def __init__(self, rank: int, answer: dict[str, Any] | None) -> None:
        self.distributed_context = type("Ctx", (), {"world_rank": rank})()
        self.answer = answer

    def execute_async(self, fn: Any) -> Ref:
        assert fn is hangwatch.dump_stacks
        return Ref(self.answer)


def test_the_ranks_answers_are_placed_and_the_silent_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    fake_ray = types.ModuleType("ray")
    fake_ray.wait = lambda refs, num_returns, timeout: (  # type: ignore[attr-defined]
        [r for r in refs if r.answer is not None],
        [r for r in refs if r.answer is None],
    )
    fake_ray.get = lambda ref: ref.answer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    sleeping = [{"file": "/app/loop.py", "line": 31, "function": "loop",
                 "source": "time.sleep(600)", "library": False}]  # fmt: skip
    waiting = [
        {"file": "/app/loop.py", "line": 32, "function": "loop", "source": "", "library": False},
        {"file": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 1,
         "function": "all_reduce", "source": "", "library": True},
    ]  # fmt: skip
    workers = [
        Worker(0, {"pod": "p0", "node": "n0", "frames": waiting, "text": "stack 0"}),
        Worker(1, {"pod": "p1", "node": "n1", "frames": sleeping, "text": "stack 1"}),
        Worker(2, None),
    ]
    ranks, texts, unanswered = hangwatch.collect(workers, hangwatch.dump_stacks, 1)
    assert [r["rank"] for r in ranks] == [0, 1] and unanswered == [2]
    assert ranks[1]["where"] == "at app/loop.py:31 in loop (time.sleep(600))"
    assert ranks[0]["waiting"] and not ranks[1]["waiting"]
    assert texts[2] == "no answer within 1 s"

    payload = {
        "timeoutSeconds": 30.0,
        "lastProgress": 1000.0,
        "time": 1031.0,
        "workers": 3,
        "ranks": ranks,
        "unanswered": unanswered,
        "texts": {str(k): v for k, v in texts.items()},
    }
    text = hangwatch.stacks_text(payload, "digits-5f0c2a7e91b3", 0)
    assert "no training report for 31 s (hang timeout 30 s)" in text
    # Of two groups as large, the one not waiting on its peers comes first.
    assert (
        "Where the ranks were: rank 1 at app/loop.py:31 in loop (time.sleep(600)); rank 0 in "
        "torch.distributed all_reduce, called at app/loop.py:32 in loop; rank 2 sent no stacks."
    ) in text
    assert "Not waiting on the others (the likely cause): rank 1." in text
    assert text.index("=== rank 0") < text.index("=== rank 1") < text.index("=== rank 2")
    assert "=== rank 2: no stacks ===\nno answer within 1 s" in text


# -- the reporter ---------------------------------------------------------------------------------


def trainer(transport: RecordingTransport) -> dict[str, Any]:
    return dict(transport.patches[-1]["status"]["trainerStatus"])


def test_reports_carry_the_last_progress_and_the_median_interval() -> None:
    clock, sink = Clock(), RecordingTransport()
    reporter = Reporter(sink, min_interval=0, clock=clock)
    reporter.start()
    first = trainer(sink)
    assert first["lastProgressTime"] == "1970-01-01T00:16:40Z"
    # An earlier attempt's numbers are cleared by the first patch (a merge patch keeps them).
    assert first["hang"] is None and first["stepTime"] is None
    assert first["reportIntervalSeconds"] is None
    for t in (1010.0, 1012.0, 1014.0):
        clock.now = t
        reporter.on_report({"epoch": 0})
    last = trainer(sink)
    assert first["attemptReports"] == 0 and last["attemptReports"] == 3
    assert last["reportIntervalSeconds"] == 2.0
    assert last["lastProgressTime"] == "1970-01-01T00:16:54Z"
    assert "hang" not in last  # nothing to clear any more


def stall_payload(last: float, **extra: Any) -> dict[str, Any]:
    return {
        "timeoutSeconds": 30.0,
        "lastProgress": last,
        "time": last + 30,
        "workers": 2,
        "ranks": [
            {
                "rank": 0,
                "pod": "p0",
                "node": "n0",
                "where": "in torch.distributed all_reduce",
                "waiting": True,
            },
            {
                "rank": 1,
                "pod": "p1",
                "node": "n1",
                "where": "at loop.py:31 in loop",
                "waiting": False,
            },
        ],
        "unanswered": [],
        "texts": {},
        **extra,
    }


def test_a_hang_is_reported_for_its_stall_and_cleared_by_the_next_report() -> None:
    clock, sink = Clock(), RecordingTransport()
    reporter = Reporter(sink, min_interval=0, clock=clock)
    reporter.start()
    reporter.on_report({"epoch": 0})
    clock.now = 1031.0
    reporter.on_hang(stall_payload(1000.0), "s3://b/run/attempt-0/stacks.txt")
    found = trainer(sink)["hang"]
    assert found["since"] == trainer(sink)["lastProgressTime"] == "1970-01-01T00:16:40Z"
    assert found["groups"] == [
        {"where": "at loop.py:31 in loop", "waiting": False, "ranks": [1]},
        {"where": "in torch.distributed all_reduce", "waiting": True, "ranks": [0]},
    ]
    assert found["suspects"] == [{"rank": 1, "pod": "p1", "node": "n1"}]
    assert found["stacks"] == "s3://b/run/attempt-0/stacks.txt" and found["workers"] == 2
    clock.now = 1040.0
    reporter.on_report({"epoch": 1})
    assert trainer(sink)["hang"] is None  # sent as null: the merge patch removes it


def test_stacks_of_a_stall_that_already_ended_are_not_reported() -> None:
    clock, sink = Clock(), RecordingTransport()
    reporter = Reporter(sink, min_interval=0, clock=clock)
    reporter.start()
    clock.now = 1100.0
    reporter.on_report({"epoch": 0})  # a report came after the stall the dump was for
    reporter.on_hang(stall_payload(1000.0), None)
    assert "hang" not in trainer(sink)
    assert reporter.state.hang is None


def test_a_restarted_worker_group_counts_as_progress() -> None:
    clock, sink = Clock(), RecordingTransport()
    reporter = Reporter(sink, min_interval=0, clock=clock)
    reporter.start()
    reporter.on_report({})
    clock.now = 1002.0
    reporter.on_report({})
    clock.now = 1500.0
    reporter.on_started()
    assert trainer(sink)["lastProgressTime"] == "1970-01-01T00:25:00Z"
    assert reporter.state.intervals == []


# -- step times -----------------------------------------------------------------------------------


def test_a_ranks_busy_time_leaves_out_its_waits() -> None:
    clock = Clock(0.0)
    waits = steptime.WaitClock(clock=clock)
    steps = steptime.RankSteps(clock=clock)
    steps.enter(waits.take())  # the first report: nothing to measure yet
    clock.now = 0.1
    steps.leave()
    clock.now = 0.3
    with waits.waiting():  # 0.5 s in a collective
        clock.now = 0.8
    clock.now = 1.0
    steps.enter(waits.take())
    assert steps.pending == [(2, pytest.approx(0.4), pytest.approx(1.0))]
    assert steps.due() and steps.take() and not steps.due()


def test_waits_of_other_threads_and_nested_waits_count_once() -> None:
    clock = Clock(0.0)
    waits = steptime.WaitClock(clock=clock)
    waits.thread = threading.get_ident()
    with waits.waiting():
        clock.now = 1.0
        with waits.waiting():  # all_gather inside all_gather_object
            clock.now = 2.0
    other = threading.Thread(target=lambda: waits.waiting().__enter__())
    other.start()
    other.join()
    assert waits.take() == 2.0


def sample(rank: int, *rows: tuple[int, float, float], workers: int = 2) -> dict[str, Any]:
    return {"rank": rank, "workers": workers, "pod": f"p{rank}", "node": f"n{rank}",
            "samples": list(rows)}  # fmt: skip


def test_the_driver_pairs_the_ranks_samples_into_rounds_and_names_a_straggler() -> None:
    rounds = steptime.StepRounds()
    rows0 = [(i, 0.1, 0.5) for i in range(2, 8)]
    rows1 = [(i, 0.45, 0.5) for i in range(2, 8)]
    assert rounds.add(sample(0, *rows0[:3])) == []  # rank 1's half of each round is missing
    done = rounds.add(sample(1, *rows1))
    assert [i for i, _ in done] == [2, 3, 4]
    assert rounds.status()["straggler"] is False  # three rounds are not enough
    done = rounds.add(sample(0, *rows0[3:]))
    assert [i for i, _ in done] == [5, 6, 7]
    status = rounds.status()
    assert status["straggler"] is True and status["reports"] == hang.STRAGGLER_REPORTS
    assert status["slowest"] == {"rank": 1, "busySeconds": 0.45, "pod": "p1", "node": "n1"}
    assert status["skewPercent"] == pytest.approx(35.0)
    # The group restarted: its report indexes begin again, and so does the table.
    assert rounds.add(sample(0, (2, 0.1, 0.5))) == [] and rounds.status() is None


class MemoryFS:
    type_name = "s3"  # no directories to make

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def open_output_stream(self, path: str) -> Any:
        fs = self

        class Out(io.BytesIO):
            def __exit__(self, *exc: Any) -> None:
                fs.files[path] = self.getvalue()
                super().__exit__(*exc)

        return Out()


def test_stacks_txt_keeps_the_latest_dumps_newest_first() -> None:
    fs = MemoryFS()
    runlog = RunLog(fs, "bucket/run/attempt-0", uri="s3://bucket/run/attempt-0")
    assert runlog.stacks("first dump") == "s3://bucket/run/attempt-0/stacks.txt"
    for n in range(2, 6):
        runlog.stacks(f"dump {n}")
    runlog.flush()
    text = fs.files[f"bucket/run/attempt-0/{STACKS}"].decode()
    assert text == "dump 5\n\ndump 4\n\ndump 3"
    runlog.steps([(7, {0: (0.1, 0.5), 1: (0.4, 0.5)})])
    runlog.flush()
    line = fs.files["bucket/run/attempt-0/steps.jsonl"].decode()
    assert '"round": 7' in line and '"busy": {"0": 0.1, "1": 0.4}' in line


def test_a_local_run_says_once_per_stall_where_the_ranks_are() -> None:
    from rich.console import Console

    from trainer_runtime.console import ConsoleTransport

    out = io.StringIO()
    console = ConsoleTransport("run", console=Console(file=out, width=400), live=False)
    clock = Clock()
    reporter = Reporter(console, min_interval=0, clock=clock)
    reporter.start()
    reporter.on_report({"epoch": 0})
    clock.now = 1031.0
    reporter.on_hang(stall_payload(1000.0), "/store/run/attempt-0/stacks.txt")
    reporter.tick()
    text = out.getvalue()
    assert text.count("no report for 30.0 s") == 1, text
    assert "ranks [1] at loop.py:31 in loop" in text
    assert "stacks: /store/run/attempt-0/stacks.txt" in text


def contract(use_gpu: bool, **failure: Any) -> Any:
    from raytrain_contract import (
        Contract,
        FailureSettings,
        PvcStorage,
        Scaling,
        TorchSettings,
        TrainJobRef,
    )

    return Contract(
        train_job=TrainJobRef(namespace="team-a", name="digits", uid="u"),
        run_name="digits-u",
        entrypoint="m:f",
        scaling=Scaling(num_workers=2, use_gpu=use_gpu),
        torch=TorchSettings(backend="nccl" if use_gpu else "gloo"),
        storage=PvcStorage(type="pvc", path="/mnt/raytrain/x"),
        failure=FailureSettings(**failure),
    )


def test_rays_nccl_hang_detector_is_on_for_gpu_jobs_with_the_watch_on() -> None:
    assert hangwatch.nccl_hang_detection(contract(False)) == {}
    assert hangwatch.nccl_hang_detection(contract(True, hang_timeout_seconds=0)) == {}
    assert hangwatch.nccl_hang_detection(contract(True)) == {
        "RAY_TRAIN_ENABLE_NCCL_HANG_DETECTOR": "1",
        "RAY_TRAIN_NCCL_RAS_ACTION": "fail",
        "RAY_TRAIN_NCCL_RAS_CONFIRM_DURATION_S": "600",
    }
    report = hangwatch.nccl_hang_detection(
        contract(True, hang_timeout_seconds=120, on_hang="Report")
    )
    assert report["RAY_TRAIN_NCCL_RAS_ACTION"] == "observe"
    assert report["RAY_TRAIN_NCCL_RAS_CONFIRM_DURATION_S"] == "120"


@pytest.mark.runtime
def test_a_rank_sends_its_step_times_in_batches_and_stops_when_the_queue_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ray", reason="Ray comes with the runtime extra: make install")
    import ray.train

    class Context:
        def get_world_rank(self) -> int:
            return 1

        def get_world_size(self) -> int:
            return 2

    class Queue:
        def __init__(self, fail: bool) -> None:
            self.fail, self.items, self.calls = fail, [], 0

        def put_nowait(self, item: Any) -> None:
            self.calls += 1
            if self.fail:
                raise ConnectionError("the driver's queue is gone")
            self.items.append(item)

    monkeypatch.setattr(ray.train, "get_context", lambda: Context())
    monkeypatch.setattr(steptime, "SEND_EVERY_S", 0.0)
    good = Queue(fail=False)
    callback = steptime.step_time_callback(good)
    for _ in range(4):
        with callback.on_report():
            pass
    kinds = {kind for kind, _, _ in good.items}
    assert kinds == {"steps"} and sum(len(p["samples"]) for _, p, _ in good.items) == 3
    assert good.items[0][1]["rank"] == 1 and good.items[0][1]["workers"] == 2
    bad = Queue(fail=True)
    callback = steptime.step_time_callback(bad)
    for _ in range(10):
        with callback.on_report():  # never raises into the loop
            pass
    assert bad.calls == steptime.GIVE_UP_AFTER
