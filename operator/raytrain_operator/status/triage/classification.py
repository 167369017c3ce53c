"""The class of a failed attempt from everything observed: the pods first, then the runtime's
report, then the RayJob's status, else Unknown (`classify`).
"""

from __future__ import annotations

from raytrain_operator.status.triage.model import UNKNOWN_HINT, Evidence, FailureClass, Triage
from raytrain_operator.status.triage.pods import classify_pods
from raytrain_operator.status.triage.text import _from_text
from raytrain_operator.status.triage.tracebacks import last_traceback_lines


def classify(evidence: Evidence) -> Triage:
    """The class of a failed attempt from everything observed (see the package's docstring)."""
    found = classify_pods(
        evidence.pods, evidence.events, evidence.worker_memory, head_memory=evidence.head_memory
    )
    if found is not None:
        return found
    report = evidence.report or {}
    if report.get("phase") == "Failed":
        found = _from_text(
            str(report.get("message") or ""),
            "reported by the trainer runtime",
            evidence=evidence,
        )
        if found is not None:
            return found
    rj = evidence.rayjob_status
    rj_text = "\n".join(str(rj.get(k)) for k in ("message", "failedReason", "reason") if rj.get(k))
    found = _from_text(
        rj_text,
        "from the RayJob's status",
        user_needs_traceback=True,
        evidence=evidence,
    )
    if found is not None:
        return found
    detail = str(report.get("message") or "") if report.get("phase") == "Failed" else ""
    detail = detail or rj_text or "no message"
    return Triage(FailureClass.UNKNOWN, f"{last_traceback_lines(detail, 6)}; {UNKNOWN_HINT}")
