"""The runtime's failure message: type, last traceback lines, within the limit, classifiable."""

from __future__ import annotations

import datetime
import os
import traceback
from pathlib import Path
from typing import Any

import pytest

from raytrain_operator.status.triage import Evidence, classify
from trainer_runtime import failure
from trainer_runtime.reporter import FAILED, RecordingTransport, Reporter


def _load_batch(batch: dict[str, Any]) -> Any:
    return batch["label"]


def train_loop(config: dict[str, Any]) -> None:
    for _ in range(2):
        _load_batch({"image": 1})


def raised(fn: Any, *args: Any) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:
        return exc
    raise AssertionError("nothing raised")


def classified(message: str) -> Any:
    return classify(Evidence({}, report={"phase": "Failed", "message": message}))


def test_a_raised_exception_names_its_type_and_ends_with_its_frames() -> None:
    text = failure.format_failure(raised(train_loop, {}))
    lines = text.splitlines()
    assert lines[0] == "KeyError: 'label'"
    assert lines[1] == failure.TRACEBACK_HEAD
    assert any("in _load_batch" in line for line in lines)
    assert any('return batch["label"]' in line for line in lines)
    assert lines[-1] == "KeyError: 'label'"
    found = classified(text)
    assert found.reason == "UserException" and found.exception == "KeyError"
    assert 'return batch["label"]' in found.message


@pytest.mark.runtime
def test_ray_trains_worker_group_error_names_each_worker_and_the_users_type() -> None:
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
    from ray.train.v2.api.exceptions import WorkerGroupError

    exc = raised(train_loop, {})
    carried = "".join(traceback.format_exception(exc))
    wrapped = UserExceptionWithTraceback(exc, traceback_str=carried)
    error = WorkerGroupError("2 workers failed", {1: wrapped, 0: wrapped})
    text = failure.format_failure(error)
    assert text.splitlines()[0] == (
        "training failed: worker 0: KeyError: 'label'; worker 1: KeyError: 'label'"
    )
    assert "UserExceptionWithTraceback" not in text and "in _load_batch" in text
    assert classified(text).exception == "KeyError"
    assert failure.format_worker_errors({0: wrapped}).startswith("worker 0: KeyError: 'label'")


@pytest.mark.runtime
def test_the_error_fit_raises_keeps_the_traceback_in_its_own_text() -> None:
    """As Ray Train's poll builds it: bare exceptions per rank, the traceback texts only in the
    WorkerGroupError's message (seen so from a raising loop on a local Ray)."""
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
    from ray.train.v2._internal.execution.worker_group.poll import (
        WorkerGroupPollStatus,
        WorkerStatus,
    )

    exc = raised(train_loop, {})
    carried = "".join(traceback.format_exception(exc))
    exc.__traceback__ = None  # what arrives from the worker has none
    statuses = {
        rank: WorkerStatus(running=False, error=UserExceptionWithTraceback(exc, carried))
        for rank in (0, 1)
    }
    error = WorkerGroupPollStatus(worker_statuses=statuses).get_worker_group_error()
    assert all(e.__traceback__ is None for e in error.worker_failures.values())
    text = failure.format_failure(error)
    assert text.startswith("training failed: worker 0: KeyError: 'label'; worker 1: KeyError")
    assert 'return batch["label"]' in text and text.endswith("KeyError: 'label'")
    assert classified(text).reason == "UserException"


@pytest.mark.runtime
def test_the_runtimes_wrappers_leave_the_users_frames_and_the_traceback_head() -> None:
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
    from ray.train.v2.api.exceptions import WorkerGroupError

    from trainer_runtime import runlog
    from trainer_runtime.entrypoint import wrap_loop
    from trainer_runtime.flush import flushed_before_raising

    def around(run: Any) -> Any:  # a test's wrapper: its frame is the user's, and stays
        return run()

    # Wrapped as a worker runs it (resume.with_seed wraps through wrap_loop the same way).
    loop = wrap_loop(flushed_before_raising(train_loop, report_state=lambda: None), around)
    exc = raised(loop, {})
    carried = "".join(traceback.format_exception(exc))
    assert "trainer_runtime/flush.py" in carried  # the wrappers' frames are in the raw text
    error = WorkerGroupError("1 worker failed", {0: UserExceptionWithTraceback(exc, carried)})
    for text in (
        failure.format_failure(error),
        failure.format_worker_errors({0: UserExceptionWithTraceback(exc, carried)}),
        runlog.worker_error_text(UserExceptionWithTraceback(exc, carried)),
    ):
        assert "trainer_runtime/" not in text, text
        assert failure.TRACEBACK_HEAD in text, text
        assert "in train_loop" in text and 'return batch["label"]' in text, text


def test_only_the_runtimes_wrapper_frames_are_left_out() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/app/trainer_runtime/flush.py", line 121, in guarded\n'
        "    return run()\n"
        "           ^^^^^\n"
        '  File "/app/train.py", line 3, in guarded\n'
        "    raise ValueError('x')\n"
        '  File "/app/trainer_runtime/entrypoint.py", line 5, in main\n'
        "    main()\n"
        "ValueError: x\n"
    )
    assert failure.without_runtime_frames(text) == (
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 3, in guarded\n'
        "    raise ValueError('x')\n"
        '  File "/app/trainer_runtime/entrypoint.py", line 5, in main\n'
        "    main()\n"
        "ValueError: x\n"
    )


def test_a_module_exception_is_named_with_its_module() -> None:
    class ShapeError(ValueError):
        pass

    text = failure.format_failure(raised(lambda: (_ for _ in ()).throw(ShapeError("bad"))))
    assert text.startswith(f"{__name__}.")
    assert "ShapeError: bad" in text.splitlines()[0]
    assert classified(text).reason == "UserException"


def test_the_message_stays_within_the_limit_keeping_head_and_end() -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("x" * 300 + "\nthe last line says why")
        deep(n - 1)

    text = failure.format_failure(raised(deep, 60), lines=200)
    assert len(text) <= failure.MESSAGE_LIMIT
    assert text.splitlines()[0] == "RuntimeError: the last line says why"
    assert text.endswith("the last line says why")
    huge = failure.format_failure(RuntimeError("y" * 10_000))
    assert len(huge) <= failure.MESSAGE_LIMIT and huge.startswith("RuntimeError: yyy")


def test_the_reporter_formats_the_exception_being_handled() -> None:
    sink = RecordingTransport()
    reporter = Reporter(sink, clock=lambda: 0.0, sleep=lambda s: None)
    try:
        train_loop({})
    except KeyError:
        reporter.finish(FAILED, "training failed: worker 0: KeyError: 'label'")
    message = sink.patches[-1]["status"]["trainerStatus"]["message"]
    assert message.startswith("KeyError: 'label'\nTraceback") and "in _load_batch" in message
    # Outside an except block, with no exception given, the message is kept as it is.
    plain = Reporter(RecordingTransport(), clock=lambda: 0.0, sleep=lambda s: None)
    plain.finish(FAILED, "boom")
    assert plain.state.message == "boom"
    # A long worker error keeps its first line and its end.
    plain.on_worker_error(
        "worker 0: KeyError: 'a'\n" + "\n".join(f"  line {i}" for i in range(999))
    )
    assert plain.state.message.startswith("worker 0: KeyError: 'a'\n")
    assert plain.state.message.endswith("line 998") and len(plain.state.message) <= 4000


def _gloo_rank(rank: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = datetime.timedelta(seconds=2)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timeout)
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(1))  # rank 1 never joins this collective
        except Exception as exc:
            Path(out).write_text(failure.format_failure(exc))
    else:
        # Stay in the group, never joining the collective, until rank 0 has written what its
        # timeout said (or a deadline passes): leaving early would end rank 0's wait another way.
        import threading
        import time

        deadline = time.monotonic() + 60
        pause = threading.Event()  # never set: an interruptible wait between checks
        while not Path(out).exists() and time.monotonic() < deadline:
            pause.wait(0.05)
    # Leave without tearing the group down: torch's teardown of a gloo group whose collective
    # timed out sometimes aborts the process ("terminate called without an active exception",
    # SIGABRT) after the message was written, in about one run of six here.
    os._exit(0)


@pytest.mark.runtime
def test_a_real_gloo_timeout_is_recognised(tmp_path: Path) -> None:
    """Two CPU processes, a 2 s timeout, rank 1 skipping an all_reduce: torch's own words."""
    import torch.multiprocessing as mp
    from _ports import free_port

    out = tmp_path / "message.txt"
    mp.spawn(_gloo_rank, args=(free_port(), str(out)), nprocs=2)
    text = out.read_text()
    assert "Timed out waiting" in text, text
    found = classified(f"training failed: worker 0: {text}")
    assert found.reason == "CollectiveTimeout" and found.infrastructure
