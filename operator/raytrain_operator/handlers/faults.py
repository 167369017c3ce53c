"""Whose fault a builder's failure is: the user's spec, or the operator's code.

A builder raises `SpecError` on purpose for a spec it cannot use; the TrainJob stalls with
reason `InvalidSpec` and the builder's message, which names the field. Any other exception out
of a builder (KeyError, TypeError, AttributeError...) is a bug in the operator: the TrainJob
stalls with reason `OperatorError`, whose message says so, gives the exception and asks for a
bug report with the operator's log. Its traceback is logged once per TrainJob and error, not on
every pass. Nothing of the job is marked Failed: every pass builds again (a stalled job is
queued again, and a bug's result is never kept as the spec's verdict), so an operator with the
bug fixed carries on where the job stood.
"""

from __future__ import annotations

import logging
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.handlers.state import PassState

#: The Stalled reason of a spec the builders refuse.
INVALID_SPEC = "InvalidSpec"
#: The Stalled reason of a builder that broke: a bug in the operator.
OPERATOR_ERROR = "OperatorError"


class BuilderBug(Exception):
    """A builder raised something other than SpecError; `__cause__` is what it raised."""

    def __init__(self, trainjob: TrainJob | None, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.trainjob = trainjob
        self.error = error


def spec_message(exc: SpecError) -> str:
    """The InvalidSpec message of a spec the builders refuse."""
    return f"{exc}; fix this field of the TrainJob"


def operator_message(exc: BaseException, what: str) -> str:
    """The OperatorError message: whose fault it is, the exception, and what to do about it."""
    return (
        f"a bug in the operator, not a problem of this TrainJob: {what} raised "
        f"{type(exc).__name__}: {exc}. Please file it as a bug of raytrain-operator with the "
        "operator's log, which has the traceback; the job is not failed, and the operator "
        "tries again on its next pass"
    )


def report(
    state: PassState,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    meta: Meta,
    what: str,
    exc: BaseException,
) -> str:
    """Log a builder's bug with its traceback (the first time this TrainJob meets this error)
    and return the OperatorError message."""
    if state.first_fault((meta.uid, type(exc).__name__, str(exc))):
        logger.error(
            f"TrainJob {meta.namespace}/{meta.name}: {what} raised {type(exc).__name__}: "
            f"{exc}. This is a bug in the operator; the traceback follows.",
            exc_info=exc,
        )
    return operator_message(exc, what)
