"""The job's answer to voluntary disruptions: a PodDisruptionBudget over its Ray pods.

A node drain (`kubectl drain`, a cluster autoscaler's scale-down, a node upgrade) asks the
Eviction API for every pod on the node at once; without a budget, a node that holds several
workers, or a drain of several nodes, takes them all in the same second and the attempt loses
every worker before any of them can checkpoint. The budget lets one pod of the job go at a
time: the API server refuses the next eviction (429) until the first pod's replacement is
Ready, and the drain retries. The budget selects by the TrainJob's label and the head and
worker roles (not the submitter, whose eviction costs nothing) and by no attempt, so one budget
covers every attempt and lives as long as the TrainJob.

It says `minAvailable`, the pod count less one, not `maxUnavailable: 1`: the Ray pods belong to
a RayCluster, which has no scale subresource, and for such pods the disruption controller
accepts only an integer minAvailable (with maxUnavailable it cannot count the expected pods,
allows no disruption at all, and a drain would wait forever).
"""

from __future__ import annotations

from typing import Any

from raytrain_contract.api.v1alpha1 import DisruptionSpec, TrainJob
from raytrain_contract.meta import LABEL_ROLE, LABEL_TRAINJOB, Meta, child_metadata
from raytrain_operator.builders.names import disruption_budget_name
from raytrain_operator.builders.rayjob import worker_replicas

PDB_API_VERSION = "policy/v1"
#: Pods of the job a drain may take at once: the job survives losing one worker (Ray Train
#: restarts the worker group from the latest checkpoint); a drain waits for its replacement.
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
    # The head and the fewest workers the cluster runs: an autoscaled cluster that has grown
    # lets the extra workers go too, and one at its minimum never blocks a drain for good.
    _, min_workers, _ = worker_replicas(trainjob)
    min_available = 1 + min_workers - MAX_UNAVAILABLE
    return {
        "apiVersion": PDB_API_VERSION,
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(meta, disruption_budget_name(meta.name)),
        "spec": {
            "minAvailable": min_available,
            "selector": pod_selector(meta),
            # A pod that is not Ready (Pending, crash-looping) may always be evicted: a job
            # that cannot start must not hold a node drain up forever.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
