"""Whether a classified failure is retried: `RetryPolicy`, `DEFAULT_POLICY` and a job's
spec.retryPolicy over it (`merge_policy`), `retry_decision`, and the `advice` a message
gets when an attempt is not retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from raytrain_operator.status.triage.model import FailureClass, Triage


class RetryPolicy(TypedDict):
    """Class -> retry, and exit code -> retry (an exit code named here wins over its class)."""

    classes: Mapping[str, bool]
    exitCodes: Mapping[int, bool]


#: OOMKilled is not retried: the same memory limit and batch fail the same way (the next attempt
#: resumes from a checkpoint only to be killed again). A user exception is a bug in the training
#: loop and fails fast. A run with no checkpoint that passes its check is not retried either, and
#: whatever spec.retryPolicy says (its Triage is `permanent`): every attempt meets the same
#: checkpoints. A hang is retried from the latest checkpoint (spec.failure.onHang Restart, its
#: default). Unknown keeps the retries every failure had before this classification.
DEFAULT_POLICY: RetryPolicy = {
    "classes": {
        FailureClass.OOM_KILLED.value: False,
        FailureClass.IMAGE_PULL_FAILED.value: True,
        FailureClass.UNSCHEDULABLE.value: True,
        FailureClass.NODE_LOST.value: True,
        FailureClass.USER_EXCEPTION.value: False,
        FailureClass.COLLECTIVE_TIMEOUT.value: True,
        FailureClass.CHECKPOINT_UNUSABLE.value: False,
        FailureClass.HUNG.value: True,
        FailureClass.UNKNOWN.value: True,
    },
    "exitCodes": {},
}


def merge_policy(
    classes: Mapping[str, bool] | None, exit_codes: Mapping[int, bool] | None
) -> RetryPolicy:
    """DEFAULT_POLICY with a job's spec.retryPolicy over it: a class it leaves out keeps its
    default; its exit codes are the only ones (the default names none)."""
    return {
        "classes": {**DEFAULT_POLICY["classes"], **(classes or {})},
        "exitCodes": {**DEFAULT_POLICY["exitCodes"], **(exit_codes or {})},
    }


def retry_decision(
    failure_class: FailureClass | str,
    exit_code: int | None,
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    permanent: bool = False,
) -> bool:
    """Whether an attempt that failed so is worth another attempt under `policy`."""
    if permanent:
        return False
    if exit_code is not None and exit_code in policy["exitCodes"]:
        return bool(policy["exitCodes"][exit_code])
    key = failure_class.value if isinstance(failure_class, FailureClass) else str(failure_class)
    return bool(policy["classes"].get(key, policy["classes"].get("Unknown", True)))


def advice(triage: Triage, retried: bool, policy: RetryPolicy = DEFAULT_POLICY) -> str:
    """What the retry decision was and how to change it (spec.retryPolicy)."""
    if retried:
        return ""
    if triage.permanent:
        same = {
            FailureClass.CHECKPOINT_UNUSABLE: "every attempt would meet the same checkpoints and "
            "fail the same way",
        }.get(triage.failure_class, "the same input fails the same way on every attempt")
        return (
            f" Not retried: {same}, so spec.backoffLimit is not spent on it (spec.retryPolicy "
            "cannot change that)."
        )
    code = triage.exit_code
    if code is not None and policy["exitCodes"].get(code) is False:
        return (
            f" Not retried: spec.retryPolicy.exitCodes says exit code {code} is not retried, so "
            "spec.backoffLimit is not spent on it; fix the cause and create the TrainJob again, "
            f"or set retry: true for code {code} in spec.retryPolicy.exitCodes."
        )
    setting = policy["classes"].get(triage.reason)
    if setting is False:
        why = {
            FailureClass.OOM_KILLED: "the same memory limit fails the same way",
            FailureClass.USER_EXCEPTION: "an exception in the training code fails the same "
            "way on every attempt",
        }.get(triage.failure_class, "this class is not retried")
        if DEFAULT_POLICY["classes"].get(triage.reason) is not False:
            why = f"spec.retryPolicy.classes.{triage.reason} is false"
        return (
            f" Not retried ({why}), so spec.backoffLimit is not spent on it; fix the cause "
            "and create the TrainJob again, or set "
            f"spec.retryPolicy.classes.{triage.reason}: true."
        )
    return ""
