"""Failed attempts on real pods say why: a worker killed for memory, an image that is not there,
a node that takes the pods away. (A bug in the training loop: test_realpods_logs.py, where the
same failed run also shows its stored logs.)

The kernel's OOM kill, the kubelet's image pull and the taint manager's eviction exist only on a
real node, so these run with the real-pod fixtures of test_realpods.py (marker `realnode`,
inside e2e/netns/run.sh). Each asserts what the user reads: the Failed (or Reconciling)
condition's reason and message, and the attempt's Warning Event.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _wait import wait_for
from realpods import NODE, ON_REAL_NODE, OPERATOR_SELECTOR, SYSTEM_NS, condition
from test_realpods import (
    DIGITS,
    START_TIMEOUT,
    TRAIN_TIMEOUT,
    RealWorld,
    _apply_digits,
    _trainjob,
    _wait_checkpoint,
    real_world,
)

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(1800)]
__all__ = ["DIGITS", "real_world"]  # the module fixture, used by name


def _failed(world: RealWorld, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        tj = _trainjob(world, namespace, name)
        failed = condition(tj, "Failed")
        return tj if failed and failed.get("status") == "True" else None

    return wait_for(check, timeout=timeout, what=f"TrainJob {namespace}/{name} Failed")


def _attempt_event(
    world: RealWorld, namespace: str, name: str, reason: str, timeout: float = 60
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        events = world.cluster.get_json(
            "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
        )["items"]
        for event in events:
            if event["reason"] == reason and event["message"].startswith("attempt "):
                return dict(event)
        return None

    return wait_for(check, timeout=timeout, what=f"the attempt's {reason} Event")


def _scaling(world: RealWorld, namespace: str, name: str) -> dict[str, Any]:
    scaling: dict[str, Any] = _trainjob(world, namespace, name)["spec"]["scaling"]
    return scaling


def test_a_worker_over_its_memory_limit_is_oomkilled_and_not_retried(
    real_world: RealWorld, namespace: str
) -> None:
    # A 64 x 4,000,000 first layer is 1 GiB of float32 weights alone: over the 1Gi limit
    # trainjob_on_real_node gives each worker. No in-cluster restart either (maxFailures 0).
    _apply_digits(
        real_world, namespace, "oom", epochs=2, config={"epochs": 2, "hidden": 4_000_000},
        failure={"maxFailures": 0}, backoffLimit=1,
    )  # fmt: skip
    memory = _scaling(real_world, namespace, "oom")["resourcesPerWorker"]["memory"]
    tj = _failed(real_world, namespace, "oom", START_TIMEOUT + TRAIN_TIMEOUT)
    failed = condition(tj, "Failed") or {}
    assert failed["reason"] == "OOMKilled", json.dumps(tj["status"], indent=1)
    message = failed["message"]
    assert f"resourcesPerWorker.memory (now {memory})" in message, message
    assert "spec.head" not in message, message  # the worker ran out, not the head
    assert "Not retried" in message and "spec.backoffLimit is not spent" in message
    assert tj["status"]["restarts"] == 0 and tj["status"]["attempt"] == 0
    event = _attempt_event(real_world, namespace, "oom", "OOMKilled")
    assert event["type"] == "Warning" and "(workload)" in event["message"]


def test_a_head_too_small_for_ray_is_named_with_the_head_field_to_raise(
    real_world: RealWorld, namespace: str
) -> None:
    # 1Gi holds the driver, Ray Train's controller and Ray's own processes of the smallest job
    # on no machine we measured (about 2.2 GiB: the default is 4Gi); the workers are fine. The
    # kernel kills a process inside the head's container, not its first one, so the pod never
    # says OOMKilled: the watcher beside the driver records the kill (status.outOfMemory).
    small = {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    _apply_digits(
        real_world, namespace, "head-oom", epochs=2, backoffLimit=0,
        head={**ON_REAL_NODE, "resources": small},
    )  # fmt: skip
    tj = _failed(real_world, namespace, "head-oom", START_TIMEOUT + TRAIN_TIMEOUT)
    failed = condition(tj, "Failed") or {}
    message = failed.get("message", "")
    assert failed.get("reason") == "OOMKilled", json.dumps(tj["status"], indent=1)
    assert "spec.head.resources.limits.memory (now 1Gi)" in message, message
    assert "resourcesPerWorker.memory" not in message, message
    assert "the Ray head (pod head-oom-0-" in message, message
    seen = tj["status"]["outOfMemory"]
    assert seen["attempt"] == 0 and seen["kills"] >= 1 and seen["limit"] == "1024Mi", seen
    assert seen.get("process") and f"the kernel killed {seen['process']}" in message, message


def test_an_image_that_is_not_on_the_node_says_so_and_the_deadline_names_it(
    real_world: RealWorld, namespace: str
) -> None:
    # The real node has only the images the tests imported; with pull policy Never the kubelet
    # says ErrImageNeverPull at once (no registry is reachable from the namespace anyway).
    image = "raytrain/trainer-runtime:no-such-tag"
    _apply_digits(
        real_world, namespace, "noimage", image=image, imagePullPolicy="Never",
        activeDeadlineSeconds=60,
    )  # fmt: skip

    def reconciling() -> dict[str, Any] | None:
        c = condition(_trainjob(real_world, namespace, "noimage"), "Reconciling")
        return c if c and c.get("reason") == "ImagePullFailed" else None

    pending = wait_for(reconciling, START_TIMEOUT, "Reconciling ImagePullFailed")
    assert image in pending["message"] and "fix spec.image" in pending["message"]
    tj = _failed(real_world, namespace, "noimage", 300)
    failed = condition(tj, "Failed") or {}
    assert failed["reason"] == "DeadlineExceeded"
    assert "While it ran, ImagePullFailed" in failed["message"], failed["message"]


TAINT = "raytrain.dev/triage-node-lost"


def _what_happened(world: RealWorld, namespace: str, name: str) -> str:
    """The job's pods, RayJob, status and Events, for a failure message."""
    cluster = world.cluster
    pods = [
        {
            "name": p["metadata"]["name"],
            "phase": p.get("status", {}).get("phase"),
            "reason": p.get("status", {}).get("reason"),
            "deleting": p["metadata"].get("deletionTimestamp"),
            "node": p.get("spec", {}).get("nodeName"),
            "disruption": [
                c
                for c in p.get("status", {}).get("conditions", [])
                if c.get("type") == "DisruptionTarget"
            ],
        }
        for p in cluster.get_json("pods", "-n", namespace)["items"]
    ]
    rayjobs = [
        {"name": r["metadata"]["name"], "status": r.get("status", {})}
        for r in cluster.get_json("rayjobs", "-n", namespace)["items"]
    ]
    events = [
        f"{e['involvedObject']['kind']}/{e['involvedObject']['name']} {e['reason']}: "
        f"{e['message'][:300]}"
        for e in cluster.get_json("events", "-n", namespace)["items"]
    ]
    status = _trainjob(world, namespace, name).get("status", {})
    return json.dumps(
        {"pods": pods, "rayjobs": rayjobs, "status": status, "events": events[-40:]}, indent=1
    )


#: From the taint's removal: the Ray pods come back, KubeRay finds the driver gone and fails
#: the RayJob, and the operator reads it.
NODE_LOST_TIMEOUT = 600


@pytest.mark.realpods_faults
@pytest.mark.realpods_second_cluster
def test_pods_the_node_takes_away_are_node_lost_and_resumed_as_a_preemption(
    real_world: RealWorld, namespace: str
) -> None:
    """A NoExecute taint makes the taint manager delete the Ray pods (DisruptionTarget
    DeletionByTaintManager), as when the node lifecycle controller gives up on a node. The
    operator's own pod tolerates the taint for the test's length, so it keeps running.

    While the taint stays, KubeRay's new pods cannot be placed and the status says so; once it
    is gone, the attempt whose head the node took is NodeLost, an infrastructure cause, and is
    retried as a preemption (status.preemptions, spec.disruption.maxPreemptions), spending no
    spec.backoffLimit."""
    cluster = real_world.cluster
    deployment = cluster.get_json("deployment", "-n", SYSTEM_NS, "-l", OPERATOR_SELECTOR)["items"][
        0
    ]["metadata"]["name"]
    tolerations = cluster.get_json("deployment", deployment, "-n", SYSTEM_NS)["spec"]["template"][
        "spec"
    ].get("tolerations", [])
    patched = [*tolerations, {"key": TAINT, "operator": "Exists", "effect": "NoExecute"}]
    spec = {"spec": {"template": {"spec": {"tolerations": patched}}}}
    cluster.kubectl("patch", "deployment", deployment, "-n", SYSTEM_NS, "-p", json.dumps(spec))
    cluster.kubectl("rollout", "status", f"deployment/{deployment}", "-n", SYSTEM_NS, timeout=300)
    tainted = False
    try:
        _apply_digits(real_world, namespace, "lost", epochs=200, backoffLimit=1)
        # Training under way (a checkpoint stored), not a cluster still starting: a head lost
        # before the job was submitted is only recreated by KubeRay.
        _wait_checkpoint(real_world, namespace, "lost", 1)
        cluster.kubectl("taint", "node", NODE, f"{TAINT}=yes:NoExecute")
        tainted = True
        try:
            # The head's preStop hook records what took it; the status says it at once.
            wait_for(
                lambda: (
                    (_trainjob(real_world, namespace, "lost")["status"].get("disrupted") or {}).get(
                        "reason"
                    )
                    == "DeletionByTaintManager"
                ),
                120,
                "status.disrupted naming the taint manager",
            )
            cluster.kubectl("taint", "node", NODE, f"{TAINT}:NoExecute-")
            tainted = False
            event = _attempt_event(real_world, namespace, "lost", "NodeLost", NODE_LOST_TIMEOUT)
            tj = wait_for(
                lambda: (
                    (t := _trainjob(real_world, namespace, "lost"))["status"].get("preemptions")
                    and t
                ),
                60,
                "the NodeLost attempt retried as a preemption (status.preemptions 1)",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_what_happened(real_world, namespace, 'lost')}") from exc
        assert "(infrastructure)" in event["message"]
        assert "DeletionByTaintManager" in event["message"], event["message"]
        assert tj["status"]["preemptions"] == 1, tj["status"]
        assert tj["status"].get("restarts", 0) == 0, tj["status"]
    finally:
        if tainted:
            cluster.kubectl("taint", "node", NODE, f"{TAINT}:NoExecute-")
        spec = {"spec": {"template": {"spec": {"tolerations": tolerations}}}}
        cluster.kubectl("patch", "deployment", deployment, "-n", SYSTEM_NS, "-p", json.dumps(spec))
