"""One reconcile pass as the engine runs it, for tests: a fresh PassState unless one is given,
the pass's status patch copied into `patch`, its Events posted through kopf.info/kopf.warn."""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_operator.handlers import reconcile
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status.machine import Plan


def passed(patch: kopf.Patch, cause: str, body: Any, *args: Any, state: Any = None) -> Plan:
    result = reconcile.reconcile(state or PassState(), cause, body, *args)
    for key, value in result.patch.items():
        patch[key] = value
    for event in result.events:
        post = kopf.warn if event.warning else kopf.info
        post(body, reason=event.reason, message=event.message)
    return result.plan
