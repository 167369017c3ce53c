"""Reading a failure's text: the end of its last traceback (`last_traceback_lines`) and the
exception type it names (`exception_type`).
"""

from __future__ import annotations

import re

from raytrain_contract.frames import without_runtime_frames

#: Lines of a traceback kept in a message (its end: the frames nearest the raise).
TRACEBACK_LINES = 12


#: Ray Train V2 carries a worker's exception in this wrapper; the type after it is the user's.
_WRAPPER = re.compile(r"UserExceptionWithTraceback:\s*")
#: A dotted type name as Python prints it (a class defined in a function has `<locals>` in it).
_EXC_NAME = r"((?:[A-Za-z_]\w*\.|<locals>\.)*[A-Za-z_]\w*)"
_TRACEBACK_END = re.compile(r"^" + _EXC_NAME + r"(?::\s|$)")
_NAMED_EXCEPTION = re.compile(
    r"(?:^|worker \d+: |failed: |controller: |raised |\n)"
    + r"((?:[A-Za-z_]\w*\.|<locals>\.)*"
    + r"[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Iteration))"
    + r"(?::|$|\s)",
    re.MULTILINE,
)


def last_traceback_lines(text: str, count: int = TRACEBACK_LINES) -> str:
    """The last `count` non-empty lines of the last traceback in `text`, else of `text`,
    without the frames of the runtime's wrappers around the training function (the runtime's
    report leaves them out too)."""
    at = text.rfind("Traceback (most recent call last):")
    body = without_runtime_frames(text[at:] if at >= 0 else text)
    lines = [line for line in body.splitlines() if line.strip()]
    return "\n".join(lines[-count:])


def exception_type(text: str) -> str | None:
    """The exception a failure message names: the end of its last traceback, else the first
    `Name: ...` that looks like an exception type."""
    text = _WRAPPER.sub("", text)
    at = text.rfind("Traceback (most recent call last):")
    if at >= 0:
        lines = text[at:].splitlines()
        # The exception's line is the first one after the frames that is not indented: what
        # follows it (KubeRay puts the RayJob's reason after the quoted log) names no exception.
        for line in lines[1:]:
            if line.strip() and not line.startswith((" ", "\t")):
                found = _TRACEBACK_END.match(line.strip())
                if found:
                    return found.group(1)
                break
        for line in reversed(lines):
            found = _TRACEBACK_END.match(line.strip())
            if found and not line.startswith((" ", "\t")):
                return found.group(1)
    found = _NAMED_EXCEPTION.search(text)
    return found.group(1) if found else None
