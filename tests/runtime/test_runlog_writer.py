"""The run log writer (trainer_runtime/runlog.py) on the local filesystem: what it writes, that
it stays bounded, that a failing or slow storage never stops the writer's callers, and the
``cat`` that the reader pod runs."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pafs = pytest.importorskip("pyarrow.fs")
pytestmark = pytest.mark.runtime

from trainer_runtime import runlog  # noqa: E402
from trainer_runtime.runlog import RunLog  # noqa: E402


def _wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        pause.wait(0.02)


def _runlog(tmp_path: Path, **kwargs: Any) -> tuple[RunLog, Path]:
    directory = tmp_path / "store" / "digits-5f0c2a7e91b3" / "attempt-2"
    return RunLog(pafs.LocalFileSystem(), str(directory), **kwargs), directory


def test_the_attempt_directory_is_beside_the_checkpoints() -> None:
    assert (
        runlog.attempt_path("bucket/runs/", "digits-5f0c", 3) == "bucket/runs/digits-5f0c/attempt-3"
    )


def test_driver_output_metrics_and_worker_errors_land_in_their_files(tmp_path: Path) -> None:
    clock = iter([100.0, 101.5])
    log, directory = _runlog(tmp_path, clock=lambda: next(clock))
    log.write_output("epoch 0 done\n")
    log.write_output("\x1b[2K\x1b[1Aprogress 50%\n")  # a live display's escape codes go
    log.metric({"epoch": 0, "loss": 0.5}, None, step=1, checkpoints=0)
    log.metric(
        {"epoch": 1, "loss": 0.25, "note": object()}, "/store/run/checkpoint_1", step=2,
        checkpoints=1,
    )  # fmt: skip
    log.worker_errors({1: "exception: builtins.ValueError\n"})
    log.flush()

    assert (directory / "driver.log").read_text() == "epoch 0 done\nprogress 50%\n"
    lines = [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]
    assert lines[0] == {
        "time": 100.0,
        "epoch": 0,
        "step": 1,
        "metrics": {"epoch": 0, "loss": 0.5},
        "checkpoint": None,
        "checkpoints": 0,
    }
    assert lines[1]["checkpoint"] == "/store/run/checkpoint_1" and lines[1]["time"] == 101.5
    assert lines[1]["checkpoints"] == 1
    assert lines[1]["metrics"]["note"].startswith("<object object")
    assert (directory / "worker-1.error.txt").read_text() == "exception: builtins.ValueError\n"
    # Nothing changed since: the next flush writes nothing.
    writes = log.writes
    log.flush()
    assert log.writes == writes


def test_the_driver_log_keeps_its_head_and_tail_within_bounds(tmp_path: Path) -> None:
    log, directory = _runlog(tmp_path, log_bytes=(100, 1000), metric_lines=(2, 3))
    for i in range(5000):
        log.write_output(f"line {i:05d}\n")  # 11 characters each
    for i in range(10):
        log.metric({"epoch": i}, None, step=i)
    log.flush()
    text = (directory / "driver.log").read_text()
    assert text.startswith("line 00000\n")
    assert text.endswith("line 04999\n")
    assert "characters of output dropped here" in text
    assert len(text) < 100 + 1000 + 100
    lines = [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("epoch") for r in lines] == [0, 1, None, 7, 8, 9]
    assert lines[2] == {"dropped_reports": 5}


class _BrokenFS:
    """A filesystem whose writes fail until ``healthy`` is set."""

    def __init__(self) -> None:
        self.inner = pafs.LocalFileSystem()
        self.healthy = False
        self.attempts = 0

    def create_dir(self, path: str, recursive: bool = True) -> None:
        self.inner.create_dir(path, recursive=recursive)

    def open_output_stream(self, path: str) -> Any:
        self.attempts += 1
        if not self.healthy:
            raise OSError("AWS Error ACCESS_DENIED during PutObject operation")
        return self.inner.open_output_stream(path)


def test_a_failing_write_is_logged_once_per_file_and_retried_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = _BrokenFS()
    directory = tmp_path / "run" / "attempt-0"
    log = RunLog(fs, str(directory), uri="s3://bucket/run/attempt-0")
    caplog.set_level(logging.WARNING, logger="trainer_runtime.runlog")
    for _ in range(3):
        log.write_output("still training\n")
        log.metric({"epoch": 0}, None, step=1)
        log.flush()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings
    assert any(
        "s3://bucket/run/attempt-0/driver.log" in w and "ACCESS_DENIED" in w for w in warnings
    )
    assert fs.attempts == 6
    fs.healthy = True
    log.flush()  # what failed is written once storage works again
    assert (directory / "driver.log").read_text() == "still training\n" * 3
    assert len((directory / "metrics.jsonl").read_text().splitlines()) == 3


class _SlowFS(_BrokenFS):
    def __init__(self) -> None:
        super().__init__()
        self.healthy = True
        self.release = threading.Event()
        self.entered = threading.Event()

    def open_output_stream(self, path: str) -> Any:
        self.entered.set()
        self.release.wait(30)
        return super().open_output_stream(path)


def test_a_hanging_storage_does_not_hold_up_the_writers(tmp_path: Path) -> None:
    fs = _SlowFS()
    log = RunLog(fs, str(tmp_path / "attempt-0"), flush_interval=0.01)
    log.start()
    log.write_output("first\n")
    assert fs.entered.wait(10)  # the background writer is stuck in a write
    started = time.monotonic()
    for i in range(20_000):
        log.write_output(f"line {i}\n")
        if i % 100 == 0:
            log.metric({"epoch": i}, None, step=i)
    elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"20,000 writes took {elapsed:.2f} s while storage hung"
    closing = time.monotonic()
    log.close(timeout=0.2)  # bounded even when storage never answers
    assert time.monotonic() - closing < 2.0
    fs.release.set()


def test_the_background_writer_writes_without_being_asked(tmp_path: Path) -> None:
    log, directory = _runlog(tmp_path, flush_interval=0.05)
    log.start()
    try:
        log.write_output("hello\n")
        _wait_for(lambda: (directory / "driver.log").exists())
        log.worker_errors({0: "boom\n"})  # written at once, not at the next interval
        _wait_for(lambda: (directory / "worker-0.error.txt").exists())
    finally:
        log.close()


def test_nothing_is_written_into_a_checkpoint_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inside a checkpoint directory"):
        RunLog(pafs.LocalFileSystem(), str(tmp_path / "run" / "checkpoint_000001" / "x"))
    out = io.BytesIO()
    code, message = runlog.cat(str(tmp_path / "run/checkpoint_000001/model.pt"), out)
    assert code == runlog.EXIT_ERROR and "checkpoint directory" in message


def test_capture_copies_prints_and_console_logging_once_and_restores(tmp_path: Path) -> None:
    log, directory = _runlog(tmp_path, flush_interval=60)
    stream = io.StringIO()
    saved = sys.stderr
    sys.stderr = stream  # a console handler made before the capture, as basicConfig does
    handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with pytest.raises(RuntimeError), runlog.capture_driver_output(log):
            print("printed line")
            print("to stderr", file=sys.stderr)
            logging.getLogger("trainer_runtime").error("logged line")
            raise RuntimeError("driver blew up")
        assert sys.stderr is stream and handler.stream is stream
    finally:
        root.removeHandler(handler)
        sys.stderr = saved
    text = (directory / "driver.log").read_text()
    assert "printed line\n" in text and "to stderr\n" in text
    assert text.count("logged line") == 1
    assert "RuntimeError: driver blew up" in text
    assert "logged line" in stream.getvalue()  # the console still gets it


def test_without_a_console_handler_records_are_copied_by_their_own_handler(
    tmp_path: Path,
) -> None:
    log, directory = _runlog(tmp_path, flush_interval=60)
    root = logging.getLogger()
    saved = root.handlers[:]
    # No handler writes to the console: earlier tests of a session may have left one of any
    # StreamHandler subclass (the runtime's own console format, for one).
    console = (sys.stdout, sys.stderr)
    root.handlers = [h for h in saved if getattr(h, "stream", None) not in console]
    try:
        with runlog.capture_driver_output(log):
            logging.getLogger("trainer_runtime").warning("no console here")
    finally:
        root.handlers = saved
    assert "WARNING trainer_runtime: no console here" in (directory / "driver.log").read_text()


def test_sigterm_writes_the_log_before_the_process_ends(tmp_path: Path) -> None:
    directory = tmp_path / "attempt-0"
    script = f"""
import os, signal, pyarrow.fs as pafs
from trainer_runtime.runlog import RunLog, capture_driver_output
log = RunLog(pafs.LocalFileSystem(), {str(directory)!r}, flush_interval=3600)
with capture_driver_output(log):
    print("before the signal", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    print("never here")
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == -15, proc.stderr
    text = (directory / "driver.log").read_text()
    assert "before the signal" in text and "[SIGTERM" in text and "never here" not in text


class _UserExceptionWithTraceback(Exception):
    """The shape of Ray Train's wrapper: the worker's exception and its traceback as text."""

    def __init__(self, exc: BaseException, traceback_str: str) -> None:
        self._base_exc = exc
        self._traceback_str = traceback_str

    def __str__(self) -> str:
        return self._traceback_str


def test_a_workers_error_text_names_type_message_and_the_end_of_the_traceback() -> None:
    frames = [f'  File "train.py", line {i}, in step{i}' for i in range(60)]
    tb = "Traceback (most recent call last):\n" + "\n".join(frames) + "\nValueError: bad shape"
    wrapped = _UserExceptionWithTraceback(ValueError("bad shape"), tb)
    text = runlog.worker_error_text(wrapped, lines=5)
    assert text.startswith("exception: builtins.ValueError\nmessage: bad shape\n")
    assert "[... 57 earlier traceback lines left out ...]" in text
    assert text.rstrip().endswith("ValueError: bad shape")
    assert "step59" in text and "step54" not in text

    try:
        {}["missing"]
    except KeyError as exc:
        local = runlog.worker_error_text(exc)
    assert "exception: builtins.KeyError" in local and "test_runlog_writer.py" in local


def test_cat_prints_a_file_and_says_what_the_directory_holds_when_it_is_missing(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    attempt = tmp_path / "run" / "attempt-1"
    attempt.mkdir(parents=True)
    (attempt / "driver.log").write_bytes(b"line one\nline two\n")
    assert runlog.main(["cat", str(attempt / "driver.log")]) == 0
    assert capsysbinary.readouterr().out == b"line one\nline two\n"

    message_file = tmp_path / "termination-log"
    code = runlog.main(
        ["cat", str(attempt / "worker-3.error.txt"), "--message-file", str(message_file)]
    )
    assert code == runlog.EXIT_MISSING
    assert capsysbinary.readouterr().out == b""
    assert message_file.read_text().endswith(f"{attempt} holds: driver.log")

    code, message = runlog.cat(str(tmp_path / "run" / "attempt-7" / "driver.log"), io.BytesIO())
    assert code == runlog.EXIT_MISSING
    assert "attempt-7 does not exist" in message and "never started" in message


def test_a_fuller_worker_error_is_not_replaced_by_a_shorter_one(tmp_path: Path) -> None:
    log, directory = _runlog(tmp_path)
    log.worker_errors({0: "without traceback\n"}, replace=False)
    log.worker_errors({0: "with traceback\n", 1: "rank 1 with traceback\n"})
    log.worker_errors({0: "without\n", 1: "without\n", 2: "rank 2 without\n"}, replace=False)
    log.flush()
    assert (directory / "worker-0.error.txt").read_text() == "with traceback\n"
    assert (directory / "worker-1.error.txt").read_text() == "rank 1 with traceback\n"
    assert (directory / "worker-2.error.txt").read_text() == "rank 2 without\n"


def test_the_last_stored_attempt_gives_the_counts_a_local_rerun_goes_on_from(
    tmp_path: Path,
) -> None:
    from trainer_runtime.storage import StorageTarget

    target = StorageTarget(pafs.LocalFileSystem(), str(tmp_path / "store"), "")
    assert runlog.last_attempt(target, "digits-1") is None  # nothing stored yet

    base = tmp_path / "store" / "digits-1"
    (base / "attempt-0").mkdir(parents=True)
    (base / "attempt-10").mkdir()
    (base / "attempt-2").mkdir()
    (base / "checkpoint_2026-11-27_05-00-00").mkdir()
    # The highest attempt, by number: 10, not 2. It has no metrics yet.
    assert runlog.last_attempt(target, "digits-1") == (10, {})

    log = RunLog(pafs.LocalFileSystem(), str(base / "attempt-11"))
    log.metric({"epoch": 0}, "/s/digits-1/checkpoint_a", step=4, checkpoints=3)
    log.metric({"epoch": 1}, "/s/digits-1/checkpoint_b", step=5, checkpoints=4)
    log.metric({"loss": 0.5}, None, step=6, checkpoints=4)
    log.flush()
    attempt, status = runlog.last_attempt(target, "digits-1") or (None, None)
    assert attempt == 11
    # The step of the last report, the count after it, the latest checkpoint reported.
    assert status == {
        "trainerStatus": {"step": 6},
        "checkpoint": {"count": 4, "latestURI": "/s/digits-1/checkpoint_b"},
    }
