"""The run log: what an attempt leaves in checkpoint storage for after its Ray cluster is gone.

Under ``<storage>/<run>/attempt-<N>/`` (beside Ray Train's ``checkpoint_*`` directories, never
inside one) the driver keeps:

- ``driver.log``: the driver process's stdout, stderr and console logging;
- ``metrics.jsonl``: one JSON line per ``ray.train.report`` (time, epoch, step, metrics,
  checkpoint URI);
- ``worker-<rank>.error.txt``: a failed training worker's exception type, message and the last
  lines of its traceback;
- ``stacks.txt``: when the attempt's reports stopped for the hang timeout, where every rank
  was, grouped, and every training process's stacks (the latest ``STACK_DUMPS_KEPT`` dumps,
  newest first; trainer_runtime/hangwatch.py);
- ``steps.jsonl``: one JSON line per report round with each rank's busy seconds and the
  round's wall seconds (trainer_runtime/steptime.py).

Writing never holds training up: output is kept in memory (a bounded head and tail, so a run
that prints without end costs a fixed amount) and written from a background thread every few
seconds, at exit, on a failure and on SIGTERM. S3 has no append, so each write replaces the
whole object. A write that fails is logged once per file and training goes on.

``python -m trainer_runtime.runlog cat PATH`` prints a stored file (``s3://bucket/key`` or a
mounted path); ``raytrain logs NAME --attempt N`` runs it in a short-lived pod.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, TextIO

from trainer_runtime.failure import traceback_text
from trainer_runtime.reporter import finished_epoch

log = logging.getLogger("trainer_runtime.runlog")

#: Names shared with the CLI's reader (sdk/raytrain/reader.py keeps a copy: the
#: SDK may not import the runtime).
ATTEMPT_DIR = "attempt-{attempt}"
DRIVER_LOG = "driver.log"
METRICS = "metrics.jsonl"
WORKER_ERROR = "worker-{rank}.error.txt"
STACKS = "stacks.txt"
STEPS = "steps.jsonl"
#: Stack dumps stacks.txt keeps (a job with onHang Report can stall more than once).
STACK_DUMPS_KEPT = 3

#: Seconds between background writes: what a SIGKILL can lose at most.
FLUSH_INTERVAL_S = 5.0
#: The driver log keeps its first and its last bytes; what lies between is dropped and counted.
LOG_HEAD_BYTES = 256 * 1024
LOG_TAIL_BYTES = 4 * 1024 * 1024
#: metrics.jsonl likewise, by lines.
METRICS_HEAD_LINES = 1000
METRICS_TAIL_LINES = 20_000
#: Traceback lines kept in a worker's error file.
TRACEBACK_LINES = 40
#: Seconds the final write (at exit, on SIGTERM) may take before the process goes on exiting.
CLOSE_TIMEOUT_S = 10.0

EXIT_OK, EXIT_ERROR, EXIT_MISSING = 0, 2, 3

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def attempt_path(storage_path: str, run_name: str, attempt: int) -> str:
    """``<storage>/<run>/attempt-<N>`` inside the storage's filesystem."""
    return f"{storage_path.rstrip('/')}/{run_name}/{ATTEMPT_DIR.format(attempt=attempt)}"


class BoundedText:
    """Text kept as a fixed head plus a bounded tail; the middle is dropped and counted.

    ``measure`` sizes a piece (characters for the log, 1 for a line of metrics); ``marker``
    says, where the dropped pieces were, how much was dropped.
    """

    def __init__(
        self,
        head: int,
        tail: int,
        measure: Callable[[str], int],
        marker: Callable[[int], str],
    ) -> None:
        self._head_limit = head
        self._tail_limit = tail
        self._measure = measure
        self._marker = marker
        self._head: list[str] = []
        self._head_size = 0
        self._tail: deque[str] = deque()
        self._tail_size = 0
        self.dropped = 0

    def add(self, piece: str) -> None:
        size = self._measure(piece)
        if not self._tail and self._head_size + size <= self._head_limit:
            self._head.append(piece)
            self._head_size += size
            return
        self._tail.append(piece)
        self._tail_size += size
        while self._tail_size > self._tail_limit and len(self._tail) > 1:
            gone = self._measure(self._tail.popleft())
            self._tail_size -= gone
            self.dropped += gone

    def render(self) -> str:
        middle = [self._marker(self.dropped)] if self.dropped else []
        return "".join([*self._head, *middle, *self._tail])


def _chars_marker(dropped: int) -> str:
    return f"\n[... {dropped} characters of output dropped here to bound the log ...]\n"


def _lines_marker(dropped: int) -> str:
    return json.dumps({"dropped_reports": dropped}) + "\n"


def _one(_: str) -> int:
    return 1


def _is_checkpoint_dir(path: str) -> bool:
    from trainer_runtime.storage import CHECKPOINT_PREFIX

    return any(part.startswith(CHECKPOINT_PREFIX) for part in path.split("/"))


class RunLog:
    """The files of one attempt, kept in memory and written to ``directory`` in the background.

    ``filesystem`` is a ``pyarrow.fs.FileSystem``; ``directory`` a path inside it.
    """

    def __init__(
        self,
        filesystem: Any,
        directory: str,
        *,
        uri: str | None = None,
        flush_interval: float = FLUSH_INTERVAL_S,
        log_bytes: tuple[int, int] = (LOG_HEAD_BYTES, LOG_TAIL_BYTES),
        metric_lines: tuple[int, int] = (METRICS_HEAD_LINES, METRICS_TAIL_LINES),
        clock: Callable[[], float] = time.time,
    ) -> None:
        if _is_checkpoint_dir(directory):
            raise ValueError(f"run log directory {directory!r} is inside a checkpoint directory")
        self.filesystem = filesystem
        self.directory = directory.rstrip("/")
        self.uri = uri or self.directory
        self._interval = flush_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._driver = BoundedText(*log_bytes, len, _chars_marker)
        self._metrics = BoundedText(*metric_lines, _one, _lines_marker)
        self._steps = BoundedText(*metric_lines, _one, _lines_marker)
        self._stacks: list[str] = []
        self._errors: dict[int, str] = {}
        self._dirty: set[str] = set()
        self._failed: set[str] = set()
        self._write_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._made_dir = False
        self.writes = 0

    # -- inputs (cheap; any thread) --------------------------------------------------------------

    def write_output(self, text: str) -> None:
        """Driver output; escape sequences of a live display are left out."""
        if not text:
            return
        text = _ANSI.sub("", text)
        with self._lock:
            self._driver.add(text)
            self._dirty.add(DRIVER_LOG)

    def metric(
        self,
        metrics: Mapping[str, Any],
        checkpoint_uri: str | None,
        *,
        step: int | None = None,
        checkpoints: int | None = None,
    ) -> None:
        """One report: its time, epoch, step, metrics, checkpoint URI and the run's checkpoint
        count after it, as a JSON line."""
        record = {
            "time": round(self._clock(), 3),
            "epoch": finished_epoch(metrics),
            "step": step,
            "metrics": {k: _jsonable(v) for k, v in metrics.items()},
            "checkpoint": checkpoint_uri,
            "checkpoints": checkpoints,
        }
        line = json.dumps(record, default=str) + "\n"
        with self._lock:
            self._metrics.add(line)
            self._dirty.add(METRICS)

    def steps(self, rounds: Sequence[tuple[int, Mapping[int, tuple[float, float]]]]) -> None:
        """Report rounds of the ranks' step times: each rank's busy seconds, the wall seconds."""
        if not rounds:
            return
        now = round(self._clock(), 3)
        lines = []
        for index, row in rounds:
            walls = sorted(w for _, w in row.values())
            record = {
                "time": now,
                "round": index,
                "wall": walls[len(walls) // 2],
                "busy": {str(rank): busy for rank, (busy, _) in sorted(row.items())},
            }
            lines.append(json.dumps(record) + "\n")
        with self._lock:
            for line in lines:
                self._steps.add(line)
            self._dirty.add(STEPS)

    def stacks(self, text: str) -> str:
        """One dump of every rank's stacks; written at once (the pods may go soon). Returns
        the file's location."""
        with self._lock:
            self._stacks.insert(0, text)
            del self._stacks[STACK_DUMPS_KEPT:]
            self._dirty.add(STACKS)
        self._wake.set()
        return f"{self.uri}/{STACKS}"

    def worker_errors(self, errors: Mapping[int, str], *, replace: bool = True) -> None:
        """Error summaries by worker rank; written at once (the pods may go soon).

        ``replace=False`` keeps a rank's text when it already has one (a fuller one).
        """
        with self._lock:
            for rank, text in errors.items():
                if not replace and int(rank) in self._errors:
                    continue
                self._errors[int(rank)] = text
                self._dirty.add(WORKER_ERROR.format(rank=int(rank)))
        self._wake.set()

    # -- writing ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="raytrain-runlog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            self.flush()

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Stop the background writer and write what is left, waiting at most ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        final = threading.Thread(target=self.flush, name="raytrain-runlog-close", daemon=True)
        final.start()
        final.join(timeout)

    def flush(self) -> None:
        """Write every file that changed since its last write."""
        with self._write_lock:
            with self._lock:
                dirty, self._dirty = self._dirty, set()
                contents: dict[str, str] = {}
                for name in dirty:
                    if name == DRIVER_LOG:
                        contents[name] = self._driver.render()
                    elif name == METRICS:
                        contents[name] = self._metrics.render()
                    elif name == STEPS:
                        contents[name] = self._steps.render()
                    elif name == STACKS:
                        contents[name] = "\n\n".join(self._stacks)
                    else:
                        rank = int(name.split("-", 1)[1].split(".", 1)[0])
                        contents[name] = self._errors[rank]
            for name, text in sorted(contents.items()):
                if not self._write(name, text.encode("utf-8", "replace")):
                    with self._lock:
                        self._dirty.add(name)  # tried again at the next flush

    def _write(self, name: str, data: bytes) -> bool:
        path = f"{self.directory}/{name}"
        try:
            if not self._made_dir:
                # S3 has no directories: creating one would leave an empty marker object.
                if getattr(self.filesystem, "type_name", "") != "s3":
                    self.filesystem.create_dir(self.directory, recursive=True)
                self._made_dir = True
            with self.filesystem.open_output_stream(path) as out:
                out.write(data)
        except Exception as exc:
            if name not in self._failed:
                self._failed.add(name)
                log.warning(
                    "could not write %s/%s (%s: %s); training goes on, later writes are retried "
                    "without this warning",
                    self.uri,
                    name,
                    type(exc).__name__,
                    exc,
                )
            return False
        self.writes += 1
        return True


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    try:  # numpy and torch scalars
        return _jsonable(value.item())
    except Exception:
        return str(value)


# -- worker errors -------------------------------------------------------------------------------


def worker_error_text(exc: BaseException, lines: int = TRACEBACK_LINES) -> str:
    """Exception type, message and the last ``lines`` lines of a worker's traceback.

    Ray Train wraps a worker's exception with its traceback as a string (the traceback object
    does not survive pickling); an exception that still has its traceback object is formatted.
    """
    base = getattr(exc, "_base_exc", None)
    inner = base if isinstance(base, BaseException) else exc
    tb_lines = traceback_text(exc).rstrip("\n").splitlines()
    kept = tb_lines[-lines:]
    if len(tb_lines) > len(kept):
        kept.insert(0, f"[... {len(tb_lines) - len(kept)} earlier traceback lines left out ...]")
    message = str(inner).strip()
    return (
        f"exception: {type(inner).__module__}.{type(inner).__qualname__}\n"
        f"message: {message}\n"
        f"traceback (last {lines} lines):\n" + "\n".join(kept) + "\n"
    )


# -- the driver's output -------------------------------------------------------------------------


class _Tee:
    """A text stream that writes through to ``stream`` and copies into the run log."""

    def __init__(self, stream: TextIO, runlog: RunLog) -> None:
        self._stream = stream
        self._runlog = runlog

    def write(self, text: str) -> int:
        with contextlib.suppress(Exception):
            self._runlog.write_output(text)
        return self._stream.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer, ...
        return getattr(self._stream, name)


class _RunLogHandler(logging.Handler):
    def __init__(self, runlog: RunLog) -> None:
        super().__init__()
        self._runlog = runlog
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._runlog.write_output(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def capture_driver_output(runlog: RunLog) -> Iterator[RunLog]:
    """Copy this process's stdout, stderr and console logging into ``runlog`` while inside.

    Logging handlers that write to the process's stdout or stderr are pointed at the copies
    (``logging.basicConfig`` captured the streams before this). On SIGTERM the log is written
    before the previous handler (or the default action) runs; at exit, once more.
    """
    saved_out, saved_err = sys.stdout, sys.stderr
    tee_out, tee_err = _Tee(saved_out, runlog), _Tee(saved_err, runlog)
    repointed: list[tuple[logging.StreamHandler[Any], Any]] = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            if handler.stream is saved_err:
                repointed.append((handler, saved_err))
                handler.stream = tee_err
            elif handler.stream is saved_out:
                repointed.append((handler, saved_out))
                handler.stream = tee_out
    # Without a console handler (under pytest, in `raytrain run --local`) records are copied
    # by a handler of our own; with one, the console's text is the copy (no line twice).
    own = None if repointed else _RunLogHandler(runlog)
    if own is not None:
        logging.getLogger().addHandler(own)
    sys.stdout, sys.stderr = tee_out, tee_err  # type: ignore[assignment]
    previous = _install_sigterm(runlog)
    atexit.register(runlog.close)
    runlog.start()
    try:
        yield runlog
    except BaseException:
        # An exception on its way out of the driver: its traceback belongs in the log.
        with contextlib.suppress(Exception):
            runlog.write_output(traceback.format_exc())
        raise
    finally:
        if sys.stdout is tee_out:
            sys.stdout = saved_out
        if sys.stderr is tee_err:
            sys.stderr = saved_err
        for handler, stream in repointed:
            handler.stream = stream
        if own is not None:
            logging.getLogger().removeHandler(own)
        _restore_sigterm(previous)
        atexit.unregister(runlog.close)
        runlog.close()


_NOT_INSTALLED = object()


def _install_sigterm(runlog: RunLog) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return _NOT_INSTALLED
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        runlog.write_output("\n[SIGTERM: the driver is being stopped]\n")
        runlog.close(timeout=CLOSE_TIMEOUT_S)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError):
        return _NOT_INSTALLED
    return previous


def _restore_sigterm(previous: Any) -> None:
    if previous is _NOT_INSTALLED or previous is None:
        return
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, previous)


def open_run_log(target: Any, run_name: str, attempt: int, **kwargs: Any) -> RunLog:
    """The run log of ``attempt`` in a ``trainer_runtime.storage.StorageTarget``."""
    directory = attempt_path(target.path, run_name, attempt)
    return RunLog(target.filesystem, directory, uri=target.uri(directory), **kwargs)


_ATTEMPT_NAME = re.compile(r"^attempt-(\d+)$")


def last_attempt(target: Any, run_name: str) -> tuple[int, dict[str, Any]] | None:
    """The run's highest stored attempt and what its metrics say the run had reached.

    Returns ``(attempt, status)``, ``status`` shaped as the parts of a TrainJob's status a
    reporter continues from (``trainerStatus.step``, ``checkpoint.count`` and ``latestURI``),
    empty when the attempt reported nothing; None when the run has no stored attempt.
    """
    from pyarrow import fs as pafs

    base = f"{target.path.rstrip('/')}/{run_name}"
    selector = pafs.FileSelector(base, allow_not_found=True)
    attempts = []
    for info in target.filesystem.get_file_info(selector):
        match = _ATTEMPT_NAME.match(info.base_name)
        if match and info.type == pafs.FileType.Directory:
            attempts.append(int(match.group(1)))
    if not attempts:
        return None
    attempt = max(attempts)
    path = f"{attempt_path(target.path, run_name, attempt)}/{METRICS}"
    try:
        with target.filesystem.open_input_stream(path) as stream:
            text = stream.read().decode(errors="replace")
    except OSError:  # FileNotFoundError among them: the attempt reported nothing
        return attempt, {}
    status: dict[str, Any] = {}
    for line in reversed(text.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the marker of dropped lines
        if not isinstance(record, dict):
            continue
        if "trainerStatus" not in status:
            status["trainerStatus"] = {"step": record.get("step")}
            status["checkpoint"] = {"count": record.get("checkpoints")}
        if record.get("checkpoint"):
            status["checkpoint"]["latestURI"] = record["checkpoint"]
            break
    return attempt, status


# -- reading: python -m trainer_runtime.runlog cat PATH ------------------------------------------


def _filesystem_for(path: str) -> tuple[Any, str]:
    from pyarrow import fs as pafs

    from trainer_runtime.storage import s3_filesystem

    if path.startswith("s3://"):
        return s3_filesystem(None, None), path.removeprefix("s3://")
    return pafs.LocalFileSystem(), path


def _missing_reason(fs: Any, fs_path: str, shown: str) -> str:
    from pyarrow import fs as pafs

    parent = fs_path.rsplit("/", 1)[0]
    try:
        info = fs.get_file_info(parent)
        if info.type == pafs.FileType.NotFound:
            return (
                f"no file {shown}: its directory {parent} does not exist (the attempt never "
                "started, or ran before stored logs existed, or its driver could not write there)"
            )
        names = sorted(
            i.base_name for i in fs.get_file_info(pafs.FileSelector(parent, recursive=False))
        )
    except Exception as exc:
        return f"no file {shown} (listing its directory failed: {type(exc).__name__}: {exc})"
    held = ", ".join(names) if names else "nothing"
    return f"no file {shown}; {parent} holds: {held}"


def cat(path: str, out: Any, chunk: int = 1 << 20) -> tuple[int, str]:
    """Copy the file at ``path`` to the binary stream ``out``; (exit code, error message)."""
    from pyarrow import fs as pafs

    if _is_checkpoint_dir(path.rsplit("/", 1)[0]):
        return EXIT_ERROR, f"{path} is inside a checkpoint directory: not a run log file"
    try:
        fs, fs_path = _filesystem_for(path)
        info = fs.get_file_info(fs_path)
        if info.type != pafs.FileType.File:
            return EXIT_MISSING, _missing_reason(fs, fs_path, path)
        with fs.open_input_stream(fs_path) as stream:
            while True:
                data = stream.read(chunk)
                if not data:
                    break
                out.write(data)
        out.flush()
    except Exception as exc:
        return EXIT_ERROR, f"reading {path} failed: {type(exc).__name__}: {exc}"
    return EXIT_OK, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer_runtime.runlog", description="Print a stored run log file."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cat_cmd = sub.add_parser("cat", help="print a file: s3://bucket/key or a mounted path")
    cat_cmd.add_argument("path")
    cat_cmd.add_argument(
        "--message-file",
        help="write an error message here instead of stderr (a pod's termination message)",
    )
    args = parser.parse_args(argv)
    code, message = cat(args.path, sys.stdout.buffer)
    if message:
        if args.message_file:
            try:
                with open(args.message_file, "w") as f:
                    f.write(message)
            except OSError:
                print(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
