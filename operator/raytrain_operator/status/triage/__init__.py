"""Why an attempt failed: one class from what the operator observes, and whether to retry.

Pure: the handlers gather the RayJob's status, the attempt's Ray pods, the events they have
(a RayCluster's ReplicaFailure, shaped as an Event) and the runtime's report; `classify` turns
them into a `Triage` with a stable reason (the condition reason, the Event reason and the
`reason` label of `raytrain_attempt_failures_total`), a message that names the pod, container,
exit code and what to do, and whether the fault is the infrastructure's or the user's.

Evidence is weighed from the most specific to the least: a container the kernel killed for
memory, an image that cannot be pulled, a pod that cannot be placed or whose node went away,
then what the runtime (or KubeRay) said: a run with no checkpoint that passes its check
(`CheckpointUnusable`, never retried), a collective timeout, a Python exception raised by the
user's code, else `Unknown`. `retry_decision` applies a `RetryPolicy` (class -> retry, plus
exit-code overrides): `DEFAULT_POLICY` merged with the job's `spec.retryPolicy` (`merge_policy`).

The modules:

- `model`: `FailureClass`, `Evidence` (what was observed) and `Triage` (the verdict).
- `policy`: `RetryPolicy`, `DEFAULT_POLICY`, `merge_policy`, `retry_decision` and `advice`.
- `pods`: what the pods and events show (`classify_pods`): OOMKilled, ImagePullFailed,
  NodeLost, Unschedulable.
- `config`: a container that cannot start for a missing Secret, ConfigMap or key
  (`config_problem`), and the credentials Secret's messages preflight shares.
- `memory`: what to raise when out of memory, and `head_out_of_memory` (status.outOfMemory).
- `tracebacks`: a failure text's last traceback lines and the exception type it names.
- `ray_memory`: OOMKilled by Ray's memory monitor, and where it killed.
- `text`: what the runtime's report or the RayJob's status shows.
- `classification`: `classify`, the pods first, then the texts, else Unknown.

Everything other code uses is imported from here, as `raytrain_operator.status.triage`.
"""

from __future__ import annotations

from raytrain_operator.status.triage.classification import classify
from raytrain_operator.status.triage.config import REASONS as CONFIG_REASONS
from raytrain_operator.status.triage.config import (
    config_problem,
    credential_keys,
    credentials_incomplete,
    credentials_not_found,
)
from raytrain_operator.status.triage.memory import head_fix, head_out_of_memory, worker_fix
from raytrain_operator.status.triage.model import (
    INFRASTRUCTURE,
    UNKNOWN_HINT,
    Evidence,
    FailureClass,
    Triage,
)
from raytrain_operator.status.triage.pods import (
    NODE_DISRUPTIONS,
    classify_pods,
    host_ports_advice,
    node_deleted,
    replica_failure_events,
    unschedulable_condition,
)
from raytrain_operator.status.triage.policy import (
    DEFAULT_POLICY,
    RetryPolicy,
    advice,
    merge_policy,
    retry_decision,
)
from raytrain_operator.status.triage.ray_memory import HEAD, RAY_MEMORY_QUOTE, WORKER
from raytrain_operator.status.triage.tracebacks import (
    TRACEBACK_LINES,
    exception_type,
    last_traceback_lines,
)

__all__ = [
    "CONFIG_REASONS",
    "DEFAULT_POLICY",
    "HEAD",
    "INFRASTRUCTURE",
    "NODE_DISRUPTIONS",
    "RAY_MEMORY_QUOTE",
    "TRACEBACK_LINES",
    "UNKNOWN_HINT",
    "WORKER",
    "Evidence",
    "FailureClass",
    "RetryPolicy",
    "Triage",
    "advice",
    "classify",
    "classify_pods",
    "config_problem",
    "credential_keys",
    "credentials_incomplete",
    "credentials_not_found",
    "exception_type",
    "head_fix",
    "head_out_of_memory",
    "host_ports_advice",
    "last_traceback_lines",
    "merge_policy",
    "node_deleted",
    "replica_failure_events",
    "retry_decision",
    "unschedulable_condition",
    "worker_fix",
]
