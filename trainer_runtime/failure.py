"""A failed run's message: what failed, the exception's type and the end of its traceback.

The operator reads `trainerStatus.message` to tell a bug in the training code (a Python
exception: the type and the frames nearest the raise) from a collective that timed out (NCCL's
watchdog, gloo's "Timed out waiting ... for recv") or a worker Ray lost. So the message keeps, in
this order and within the status' limit: one line per failed worker (rank, exception type, the
exception's last line), then the last lines of the first failure's traceback. Lines are dropped
from the top of the traceback first; the headline is never cut.

Ray Train V2 carries a worker's exception as `UserExceptionWithTraceback` (the user's exception
and its traceback text, `_base_exc` and `_traceback_str`). The `WorkerGroupError` that `fit()`
raises maps ranks to the bare exceptions (`worker_failures`, no traceback left on them) and
keeps the traceback texts in its own message (`[Rank 0,1 Error Snippet]:` sections); a
`ControllerError` holds `controller_failure`. Pure, no Ray import: the attributes are read where
they exist.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping

from raytrain_contract.frames import without_runtime_frames

#: The status message limit of the runtime (reporter.py) and of the operator's conditions.
MESSAGE_LIMIT = 4000
#: Traceback lines kept (its end: the raise and the frames that led to it).
TRACEBACK_LINES = 12
TRACEBACK_HEAD = "Traceback (most recent call last):"
_SNIPPET = re.compile(r"\[Rank [\d, ]+ Error Snippet\]:\n")


def type_name(exc: BaseException) -> str:
    """`KeyError`, `torch.OutOfMemoryError`: the module is named unless it is a builtin."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def unwrap(exc: BaseException) -> tuple[BaseException, str | None]:
    """The exception the user's code raised and its traceback text when Ray carried it as text.

    Follows Ray Train's wrapper (`_base_exc`) and Ray's task errors (`cause`), not `raise ...
    from`: the exception the user's code let escape is the one named (its chain is in the
    traceback).
    """
    text: str | None = None
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        carried = getattr(exc, "_traceback_str", None)
        if isinstance(carried, str) and carried.strip():
            text = carried
        inner = getattr(exc, "_base_exc", None) or getattr(exc, "cause", None)
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc, text


def summary(exc: BaseException) -> str:
    """`Type: last line of its message` (or the type alone)."""
    root, _ = unwrap(exc)
    lines = str(root).strip().splitlines()
    last = lines[-1].strip() if lines else ""
    name = type_name(root)
    return f"{name}: {last}" if last else name


def _snippet(outer: BaseException) -> str | None:
    """The first traceback in a `WorkerGroupError`'s text (Ray Train's `[Rank 0,1 Error
    Snippet]:` sections hold each group of workers' traceback text)."""
    for part in _SNIPPET.split(str(outer)):
        if TRACEBACK_HEAD in part:
            return part[part.index(TRACEBACK_HEAD) :]
    return None


def traceback_text(exc: BaseException, outer: BaseException | None = None) -> str:
    """The traceback of the innermost exception (without the runtime's wrapper frames): Ray's
    carried text, else Python's own, else the traceback text `outer` (the exception that holds
    `exc`) carries."""
    return without_runtime_frames(_traceback_text(exc, outer))


def _traceback_text(exc: BaseException, outer: BaseException | None) -> str:
    root, carried = unwrap(exc)
    if carried is not None:
        return carried
    if root.__traceback__ is None and outer is not None and outer is not exc:
        found = _snippet(outer)
        if found is not None:
            return found
    formatted = "".join(traceback.format_exception(type(root), root, root.__traceback__))
    if root.__traceback__ is None and TRACEBACK_HEAD not in formatted:
        # Never raised here (it came through a queue or a pickle): Ray's task errors keep the
        # remote traceback in their text.
        text = str(exc)
        if TRACEBACK_HEAD in text:
            return text[text.index(TRACEBACK_HEAD) :]
    return formatted


def last_lines(text: str, count: int = TRACEBACK_LINES) -> list[str]:
    """The last `count` non-empty lines of the last traceback in `text`."""
    at = text.rfind(TRACEBACK_HEAD)
    body = text[at:] if at >= 0 else text
    lines = [line.rstrip() for line in body.splitlines() if line.strip()]
    return lines[-count:]


def worker_failures(exc: BaseException) -> Mapping[int, BaseException]:
    failures = getattr(exc, "worker_failures", None)
    if isinstance(failures, Mapping):
        return {int(k): v for k, v in failures.items() if isinstance(v, BaseException)}
    return {}


def headline(exc: BaseException) -> str:
    """One line per failed worker, or the controller's failure, or the exception itself."""
    failures = worker_failures(exc)
    if failures:
        parts = [f"worker {rank}: {summary(e)}" for rank, e in sorted(failures.items())]
        return "training failed: " + "; ".join(parts)
    controller = getattr(exc, "controller_failure", None)
    if isinstance(controller, BaseException):
        return "training failed in the Ray Train controller: " + summary(controller)
    return summary(exc)


def first_failure(exc: BaseException) -> BaseException:
    failures = worker_failures(exc)
    if failures:
        return failures[min(failures)]
    controller = getattr(exc, "controller_failure", None)
    return controller if isinstance(controller, BaseException) else exc


def fit(head: str, lines: list[str], limit: int = MESSAGE_LIMIT) -> str:
    """`head`, then as many of `lines` (dropped from their top) as `limit` allows."""
    head = head if len(head) <= limit else head[: limit - 16] + " ... (cut)"
    kept = list(lines)
    while kept:
        text = head + "\n" + "\n".join(kept)
        if len(text) <= limit:
            return text
        kept.pop(0)
    return head


def format_failure(
    exc: BaseException, *, limit: int = MESSAGE_LIMIT, lines: int = TRACEBACK_LINES
) -> str:
    """The failure message of a run that ended with `exc` (see the module docstring)."""
    tail = last_lines(traceback_text(first_failure(exc), outer=exc), lines)
    return fit(headline(exc), tail, limit)


def format_worker_errors(failures: Mapping[int, BaseException], limit: int = MESSAGE_LIMIT) -> str:
    """A worker group's failures while Ray Train may still restart it (`after_exception`)."""
    valid = {int(k): v for k, v in failures.items() if isinstance(v, BaseException)}
    if not valid:
        return "a worker failed"
    head = "; ".join(f"worker {rank}: {summary(e)}" for rank, e in sorted(valid.items()))
    return fit(head, last_lines(traceback_text(valid[min(valid)])), limit)
