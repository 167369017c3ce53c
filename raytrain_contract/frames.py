"""The runtime's own frames in a training worker's traceback.

The runtime wraps the user's training function (``trainer_runtime.entrypoint.wrap_loop`` and
what it wraps with: ``flush.flushed_before_raising``, ``resume.with_seed``,
``hangwatch.with_watched_thread``). Those frames sit
between Ray's call and the user's code in every worker's traceback. Both sides keep only a
traceback's last lines in a status message (the runtime in its report, the operator when it
quotes the driver's log from KubeRay's message), so left in, the wrapper frames take the place of
the traceback's head and of the user's outermost frames. Both leave them out with
``without_runtime_frames``. Pure, standard library only.
"""

from __future__ import annotations

import re

#: The wrappers, by the last two parts of their file's path and their function's name. A new
#: or renamed wrapper goes here (tests/unit/test_failure_format.py fails without it).
RUNTIME_FRAMES = frozenset(
    {
        ("trainer_runtime/entrypoint.py", "loop"),
        ("trainer_runtime/entrypoint.py", "loop_with_config"),
        ("trainer_runtime/flush.py", "guarded"),
        ("trainer_runtime/hangwatch.py", "watched"),
        ("trainer_runtime/manifests.py", "verified"),
        ("trainer_runtime/manifests.py", "_run_seed"),
        ("trainer_runtime/resume.py", "seeded"),
        # Not a wrapper of the loop: the timer around torch.distributed's collectives and
        # backward() (steptime.install), between the loop's call and torch's frames.
        ("trainer_runtime/steptime.py", "timed"),
    }
)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<name>\S+)\s*$')


def is_runtime_frame(path: str, name: str) -> bool:
    """Whether a frame (`File "<path>", line N, in <name>`) is one of the runtime's wrappers."""
    return ("/".join(path.replace("\\", "/").split("/")[-2:]), name) in RUNTIME_FRAMES


def without_runtime_frames(text: str) -> str:
    """`text` without the frames of the runtime's wrappers (`RUNTIME_FRAMES`): each such frame's
    `File ...` line and the indented lines under it (its source line, Python's ^^^ marks)."""
    kept: list[str] = []
    hiding = False
    for line in text.splitlines(keepends=True):
        frame = _FRAME.match(line)
        if frame is not None:
            hiding = is_runtime_frame(frame["file"], frame["name"])
        elif not (hiding and line.startswith("    ")):
            hiding = False
        if not hiding:
            kept.append(line)
    return "".join(kept)
