"""The job's answer to voluntary disruptions: a PodDisruptionBudget over its Ray pods.

A node drain (`kubectl drain`, a cluster autoscaler's scale-down, a node upgrade) asks the
Eviction API for every pod on the node at once; without a budget, a node that holds several
workers, or a drain of several nodes, takes them all in the same second and the attempt loses
every worker before any of them can checkpoint. With `maxUnavailable: 1` the API server
refuses a second eviction (429) while one pod of the job is gone or not Ready; the drain
retries until the first pod is replaced. The budget selects by the TrainJob's label and the
head and worker roles (not the submitter, whose eviction costs nothing) and by no attempt, so
one budget covers every attempt and lives as long as the TrainJob.
"""

from __future__ import annotations

from typing import Any

from raytrain_operator.api.v1alpha1 import DisruptionSpec, TrainJob
from raytrain_operator.builders.meta import LABEL_ROLE, LABEL_TRAINJOB, Meta, child_metadata
from raytrain_operator.builders.names import disruption_budget_name

PDB_API_VERSION = "policy/v1"
#: One pod of the job at a time: the job survives losing one (Ray Train restarts the worker
#: group from the latest checkpoint), and a drain waits for its replacement before the next.
MAX_UNAVAILABLE = 1
RAY_ROLES = ("head", "worker")


def disruption(trainjob: TrainJob) -> DisruptionSpec:
    """spec.disruption, or its defaults when unset."""
    return trainjob.spec.disruption or DisruptionSpec()


def pod_selector(meta: Meta) -> dict[str, Any]:
    """The job's head and worker pods, whatever their attempt (builders/pods.py labels them)."""
    return {
        "matchLabels": {LABEL_TRAINJOB: meta.name},
        "matchExpressions": [
            {"key": LABEL_ROLE, "operator": "In", "values": list(RAY_ROLES)},
        ],
    }


def build_pod_disruption_budget(trainjob: TrainJob, meta: Meta) -> dict[str, Any] | None:
    """The PodDisruptionBudget, or None when spec.disruption.podDisruptionBudget is false."""
    if not disruption(trainjob).pod_disruption_budget:
        return None
    return {
        "apiVersion": PDB_API_VERSION,
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(meta, disruption_budget_name(meta.name)),
        "spec": {
            "maxUnavailable": MAX_UNAVAILABLE,
            "selector": pod_selector(meta),
            # A pod that is not Ready (Pending, crash-looping) may always be evicted: a job
            # that cannot start must not hold a node drain up forever.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
