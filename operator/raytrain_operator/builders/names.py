"""Deterministic names of everything a TrainJob owns, and the check that they all fit.

A child's name is a pure function of the TrainJob's name (and attempt), so creating a child twice
finds the first one instead of making a duplicate. KubeRay adds its own suffixes to the RayJob's
name (the RayCluster `<rayjob>-<5 random>`, its `<raycluster>-head-svc`, worker pods
`<raycluster>-<group>-worker-<5 random>`, the group left out of long ones), so the check covers
those too. tests/integration/test_names_server.py shows on KubeRay itself that the longest name
allowed is exact: one character more and KubeRay starts to cut the names it derives.
"""

from __future__ import annotations

import re

from raytrain_contract.api.v1alpha1 import MAX_NAME_LENGTH, NAME_PATTERN

#: Kubernetes' limit for names that become DNS labels (Services) and label values.
DNS_LABEL_MAX = 63
#: Longest attempt suffix we plan for: backoffLimit is at most 100, so attempts run 0..100.
MAX_ATTEMPT = 100
#: The one worker group of every RayJob.
WORKER_GROUP = "workers"
#: KubeRay's random suffix of a RayCluster created for a RayJob (`-` plus 5 characters).
RAYCLUSTER_SUFFIX_LEN = 6

#: A DNS-1035 label: Services (KubeRay's head Service starts with the TrainJob's name) need one.
_DNS_1035_LABEL = re.compile(NAME_PATTERN)


def rayjob_name(name: str, attempt: int) -> str:
    """RayJob of one attempt: `<name>-<attempt>`."""
    return f"{name}-{attempt}"


def contract_configmap_name(name: str) -> str:
    return f"{name}-contract"


def runtime_account_name(name: str) -> str:
    """ServiceAccount, Role and RoleBinding of the pods share this name."""
    return f"{name}-runtime"


def disruption_budget_name(name: str) -> str:
    """The PodDisruptionBudget over the job's Ray pods (shorter than KubeRay's pod names)."""
    return f"{name}-ray"


def network_policy_name(name: str) -> str:
    """The NetworkPolicy over the job's pods."""
    return f"{name}-ray"


def raycluster_name_example(rayjob: str) -> str:
    """The longest RayCluster name KubeRay derives from a RayJob name."""
    return rayjob + "-" + "x" * (RAYCLUSTER_SUFFIX_LEN - 1)


def all_names(name: str, attempt: int = MAX_ATTEMPT) -> dict[str, str]:
    """Every name derived from a TrainJob, including KubeRay's, at the given attempt."""
    rayjob = rayjob_name(name, attempt)
    cluster = raycluster_name_example(rayjob)
    return {
        "rayjob": rayjob,
        "raycluster": cluster,
        "head-service": f"{cluster}-head-svc",
        "rayjob-head-service": f"{rayjob}-head-svc",
        "worker-group": WORKER_GROUP,
        "contract-configmap": contract_configmap_name(name),
        "runtime-account": runtime_account_name(name),
    }


def name_problems(name: str) -> list[str]:
    """Why a TrainJob name cannot be used: empty when every derived name fits 63 characters."""
    problems: list[str] = []
    if len(name) > MAX_NAME_LENGTH:
        problems.append(
            f"metadata.name {name!r} has {len(name)} characters; at most {MAX_NAME_LENGTH} "
            "are allowed so that KubeRay's names fit. Choose a shorter name."
        )
    if not _DNS_1035_LABEL.match(name):
        problems.append(
            f"metadata.name {name!r} must be a DNS label that starts with a letter (DNS-1035: "
            "lower-case letters, digits and '-', starting with a letter and ending with a letter "
            "or digit) because it starts the names of Services. Choose such a name, e.g. "
            "digits-2."
        )
    for what, child in all_names(name).items():
        if len(child) > DNS_LABEL_MAX:
            problems.append(
                f"the {what} name {child!r} derived from metadata.name would have {len(child)} "
                f"characters (limit {DNS_LABEL_MAX}); choose a shorter TrainJob name"
            )
    return problems
