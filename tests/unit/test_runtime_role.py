"""The per-job Role grants what the runtime calls and nothing more.

The runtime's Kubernetes calls are read from its source (every `*_namespaced_*` method of the
kubernetes client it uses); each maps to one (group, resource, verb), and the Role holds
exactly those: a new call in the runtime fails here until the Role and this table allow it."""

from __future__ import annotations

import re
from pathlib import Path

from _factories import meta

from raytrain_operator.builders.rbac import build_role

RUNTIME = Path(__file__).resolve().parents[2] / "trainer_runtime"

#: The client methods the runtime may call, and what each needs of the API server.
NEEDS = {
    # kube.py: the reporter's writes to the TrainJob's status.
    "patch_namespaced_custom_object_status": ("raytrain.dev", "trainjobs/status", "patch"),
    # kube.py: the reporter reads the TrainJob (annotations included) through its status.
    "get_namespaced_custom_object_status": ("raytrain.dev", "trainjobs/status", "get"),
    # drain.py: the preStop hook reads its own pod's DisruptionTarget condition.
    "read_namespaced_pod": ("", "pods", "get"),
}


def runtime_calls() -> set[str]:
    calls: set[str] = set()
    for path in RUNTIME.rglob("*.py"):
        calls |= set(re.findall(r"\.((?:[a-z]+_)+namespaced_[a-z_]+)\(", path.read_text()))
    return calls


def granted() -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for rule in build_role(meta())["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, resource, verb))
    return out


def test_every_call_of_the_runtime_is_known() -> None:
    calls = runtime_calls()
    assert "patch_namespaced_custom_object_status" in calls  # the scan finds them
    assert calls <= set(NEEDS), f"a new call of the runtime: add it to NEEDS and the Role: {calls}"


def test_the_role_grants_exactly_what_the_runtime_calls() -> None:
    assert granted() == {NEEDS[call] for call in runtime_calls()}


def test_the_trainjob_is_reachable_by_name_only() -> None:
    for rule in build_role(meta())["rules"]:
        if rule["apiGroups"] == ["raytrain.dev"]:
            assert rule["resourceNames"] == ["digits"], rule


def test_pods_are_read_one_at_a_time_never_listed_or_changed() -> None:
    """KubeRay names the pods (`<cluster>-head-<random>`), so the Role cannot name them: `get`
    of a pod by name is the least the hook can do with; no list, watch or write."""
    (pods,) = [r for r in build_role(meta())["rules"] if "pods" in r["resources"]]
    assert pods == {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
