"""An attempt that ran out of memory names the pod that did (the head or a worker), the process
when it can be known, and the field that sizes that pod with its current value."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from _factories import meta
from test_status_machine import NOW, cond, rayjob, run
from test_triage import RAYJOB_FAILED, container, pod
from test_triage_machine import failed_report, tj

from raytrain_contract.timefmt import rfc3339
from raytrain_operator import k8s
from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES
from raytrain_operator.handlers import reconcile
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status.triage import Evidence, FailureClass, classify

HEAD_IP, WORKER_IP = "10.244.0.12", "10.244.0.13"
HEAD_FIELD = "spec.head.resources.limits.memory"
WORKER_FIELD = "spec.scaling.resourcesPerWorker.memory"
DEFAULT_HEAD_MEMORY = DEFAULT_HEAD_RESOURCES["limits"]["memory"]


def ray_pod(name: str, node_type: str, ip: str, **status: Any) -> dict[str, Any]:
    p = pod(name, node_type=node_type, **status)
    p["status"]["podIP"] = ip
    return p


HEAD = ray_pod("digits-0-abc-head-q7x", "head", HEAD_IP)
WORKERS = [
    ray_pod("digits-0-abc-worker-a1", "worker", WORKER_IP),
    ray_pod("digits-0-abc-worker-b2", "worker", "10.244.0.14"),
]

#: Ray's words (2.60, its raylet's format strings) when its memory monitor kills an actor, as
#: the driver's exception carries them: the ActorDiedError of Ray Train's controller, killed on
#: the head at the first report of `nn.Linear(10, 2)` with the head at 2Gi. The policy lists the
#: workers it considered; the one it killed is "Selected to kill".
RAY_LINES = """\
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: {cls}
\tactor_id: 7d1b0a43a81a1f1ee9bc6f5f02000000
\tpid: {pid}
\tnamespace: 5c1e9f3e-raytrain
\tip: {ip}
The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY \
Worker exit detail: 1 worker(s) were killed due to the node running low on memory. Memory on \
the node (IP: {ip}, ID: 4cb25bc084aeb5a31ca5402ad589ae042a71165a8e2dd8418fecee26) was 2.04GB \
used / 2.15GB limit (0.951000)
Ray killed 1 worker(s) based on the killing policy
Considered workers: [
(Task: job ID=02000000, lease ID=1f00000002000000ffffffffffffffffffffffffffffffffffffffffffffffff, \
task name=_StatsActor.__init__, required resources={{}}, pid=790, actual memory used=0.09GB, \
worker ID=2d6a0c1f5e3b4a79b8c0d1e2f3a4b5c6d7e8f90112233445566778899aabbcc)
Selected to kill: (Task: job ID=02000000, \
lease ID=2f00000002000000ffffffffffffffffffffffffffffffffffffffffffffffff, \
task name={cls}.__init__, required resources={{CPU: 0}}, pid={pid}, actual memory used={used}GB, \
worker ID=8150a4b5316a164c2932ec1389b38be165bf0e29465ff65328fa0162)
]
Top 10 memory users: PID\tMEM(GB)\tCOMMAND
{top}
Refer to the documentation on how to address the out of memory issue: \
https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/debug-memory.html."""

HEAD_TOP = """\
231\t0.43\tpython -m trainer_runtime
812\t0.38\tray::TrainController
95\t0.16\t/usr/local/bin/python -u /usr/local/lib/python3.12/site-packages/ray/dashboard/dashboa...
63\t0.12\t/usr/local/lib/python3.12/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp...
150\t0.09\tray::DashboardAgent"""

WORKER_TOP = """\
355\t0.71\tray::RayTrainWorker.run_train_fn
120\t0.09\tray::DashboardAgent
80\t0.05\t/usr/local/lib/python3.12/site-packages/ray/core/src/ray/raylet/raylet --raylet_s..."""


def runtime_report(text: str, keep: int = 8) -> str:
    """What the runtime reports: the exception's type and last line, then the end of its text
    (trainer_runtime/failure.py; with Ray's ten memory users, the IP's line is cut off)."""
    lines = text.splitlines()
    return f"ray.exceptions.ActorDiedError: {lines[-1]}\n" + "\n".join(lines[-keep:])


CONTROLLER_ON_HEAD = RAY_LINES.format(
    cls="TrainController", pid=812, ip=HEAD_IP, used="0.38", top=HEAD_TOP
)
TRAIN_WORKER = RAY_LINES.format(
    cls="RayTrainWorker", pid=355, ip=WORKER_IP, used="0.71", top=WORKER_TOP
)

#: A worker over its memory limit on a real pod: Ray's memory monitor killed it and Ray Train's
#: health check said so, the first lines of the raylet's text cut off (test_triage.py).
WORKER_HEALTH_CHECK = (
    "training failed: worker 0: ray.train.v2._internal.exceptions."
    "WorkerHealthCheckFailedError: Refer to the documentation on how to address the out of "
    "memory issue: https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/"
    "debug-memory.html. Consider provisioning more memory on this node or reducing task "
    "parallelism by requesting more CPUs per task."
)


def classify_(**kw: Any) -> Any:
    kw.setdefault("rayjob_status", RAYJOB_FAILED)
    kw.setdefault("worker_memory", "1Gi")
    kw.setdefault("head_memory", DEFAULT_HEAD_MEMORY)
    return classify(Evidence(**kw))


def failed(message: str) -> dict[str, Any]:
    return {"phase": "Failed", "message": message}


# ----------------------------------------------------------------- Ray's memory monitor


def test_ray_killing_the_controller_on_the_head_names_the_head_not_the_workers() -> None:
    # The smallest loop with the head at its default: the head ran out, not a worker.
    t = classify_(report=failed(CONTROLLER_ON_HEAD), pods=[HEAD, *WORKERS])
    assert t.failure_class is FailureClass.OOM_KILLED
    assert WORKER_FIELD not in t.message, t.message
    assert f"{HEAD_FIELD} (now {DEFAULT_HEAD_MEMORY})" in t.message
    assert "Ray head (pod digits-0-abc-head-q7x)" in t.message
    assert "process 812 (TrainController" in t.message


def test_the_head_is_known_from_what_ran_on_it_when_the_ip_is_cut_off() -> None:
    # The report keeps the end of Ray's text: the node's IP is gone, its memory users are not.
    report = runtime_report(CONTROLLER_ON_HEAD)
    assert HEAD_IP not in report
    t = classify_(report=failed(report), pods=[HEAD, *WORKERS])
    assert f"{HEAD_FIELD} (now {DEFAULT_HEAD_MEMORY})" in t.message, t.message
    assert WORKER_FIELD not in t.message


def test_ray_killing_a_training_worker_names_its_pod_and_the_worker_field() -> None:
    t = classify_(report=failed(TRAIN_WORKER), pods=[HEAD, *WORKERS])
    assert f"{WORKER_FIELD} (now 1Gi)" in t.message, t.message
    assert HEAD_FIELD not in t.message
    assert "Ray worker pod digits-0-abc-worker-a1" in t.message
    assert "process 355 (RayTrainWorker" in t.message
    # Without the pods (the operator may not list them) the process still says which.
    t = classify_(report=failed(runtime_report(TRAIN_WORKER)))
    assert f"{WORKER_FIELD} (now 1Gi)" in t.message and HEAD_FIELD not in t.message


def test_a_worker_rank_whose_health_check_saw_the_kill_is_a_worker() -> None:
    t = classify_(report=failed(WORKER_HEALTH_CHECK), pods=[HEAD, *WORKERS])
    assert f"{WORKER_FIELD} (now 1Gi)" in t.message and HEAD_FIELD not in t.message
    assert "the pod of Ray Train worker 0" in t.message


def test_the_head_ip_in_the_rayjob_status_places_the_kill() -> None:
    # KubeRay's message (the driver's log) has the IP; the runtime's report only the advice.
    rj = {**RAYJOB_FAILED, "message": f"Job failed: {CONTROLLER_ON_HEAD}"}
    t = classify_(report=failed("OutOfMemoryError: running low on memory"), rayjob_status=rj,
                  pods=[HEAD, *WORKERS])  # fmt: skip
    assert f"{HEAD_FIELD} (now {DEFAULT_HEAD_MEMORY})" in t.message, t.message
    assert WORKER_FIELD not in t.message


def test_pods_on_the_node_network_share_an_ip_and_do_not_decide() -> None:
    # hostNetwork: every pod on one node has the node's IP; the killed process decides.
    shared = [ray_pod(p["metadata"]["name"], n, HEAD_IP) for p, n in
              ((HEAD, "head"), (WORKERS[0], "worker"))]  # fmt: skip
    text = RAY_LINES.format(cls="RayTrainWorker", pid=355, ip=HEAD_IP, used="0.7", top="")
    t = classify_(report=failed(text), pods=shared)
    assert f"{WORKER_FIELD} (now 1Gi)" in t.message and HEAD_FIELD not in t.message


def test_when_nothing_says_which_pod_both_fields_are_named() -> None:
    text = "OutOfMemoryError: Task was killed due to the node running low on memory."
    t = classify_(report=failed(text), pods=[HEAD, *WORKERS], head_memory=None)
    assert t.reason == "OOMKilled"
    assert f"{WORKER_FIELD} (now 1Gi)" in t.message
    assert f"{HEAD_FIELD} (unset now)" in t.message


# ------------------------------------------------------------- the kernel's OOM killer


def oomkilled(name: str) -> dict[str, Any]:
    return container(name=name, state={"terminated": {"reason": "OOMKilled", "exitCode": 137}})


@pytest.mark.parametrize("head_memory", [DEFAULT_HEAD_MEMORY, "6Gi"])
def test_a_head_container_killed_by_the_kernel_names_the_head_and_its_limit(
    head_memory: str,
) -> None:
    head = ray_pod("digits-0-abc-head-q7x", "head", HEAD_IP, containers=[oomkilled("ray-head")])
    t = classify_(pods=[head, *WORKERS], head_memory=head_memory)
    assert t.pod == "digits-0-abc-head-q7x" and t.container == "ray-head"
    assert f"{HEAD_FIELD} (now {head_memory})" in t.message, t.message
    assert WORKER_FIELD not in t.message
    assert "the Ray head" in t.message and "whole container" in t.message


def test_a_worker_container_killed_by_the_kernel_names_the_worker_and_its_field() -> None:
    worker = ray_pod("digits-0-abc-worker-b2", "worker", "10.244.0.14",
                     containers=[oomkilled("ray-worker")])  # fmt: skip
    t = classify_(pods=[HEAD, worker])
    assert t.pod == "digits-0-abc-worker-b2"
    assert f"{WORKER_FIELD} (now 1Gi)" in t.message and HEAD_FIELD not in t.message
    assert "a Ray worker" in t.message


# ----------------------------------------------------------------- through the machine


HEAD_OOM_POD = ray_pod("digits-0-abc-head-q7x", "head", HEAD_IP, containers=[oomkilled("ray-head")])
SMALLEST = {"numWorkers": 2, "resourcesPerWorker": {"cpu": "1", "memory": "1Gi"}}


def test_the_failed_condition_names_the_head_default_when_the_head_is_left_unset() -> None:
    p = run(tj(scaling=SMALLEST), failed_report(CONTROLLER_ON_HEAD), rayjob(deployment="Running"),
            attempt_pods=[HEAD, *WORKERS])  # fmt: skip
    failed_ = cond(p, "Failed") or {}
    assert failed_["reason"] == "OOMKilled"
    assert f"{HEAD_FIELD} (now {DEFAULT_HEAD_MEMORY}, the default)" in failed_["message"]
    assert "resourcesPerWorker.memory (now 1Gi)" not in failed_["message"]
    rj = rayjob(deployment="Failed", job_status="FAILED")
    p = run(tj(scaling=SMALLEST), {"attempt": 0}, rj, attempt_pods=[HEAD_OOM_POD, *WORKERS])
    assert (
        f"{HEAD_FIELD} (now {DEFAULT_HEAD_MEMORY}, the default)"
        in (cond(p, "Failed") or {})["message"]
    )


def test_the_failed_condition_names_the_head_limit_the_spec_gives() -> None:
    head = {"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "6Gi"}}}
    rj = rayjob(deployment="Failed", job_status="FAILED")
    p = run(tj(scaling=SMALLEST, head=head), {"attempt": 0}, rj,
            attempt_pods=[HEAD_OOM_POD, *WORKERS])  # fmt: skip
    assert f"{HEAD_FIELD} (now 6Gi)" in (cond(p, "Failed") or {})["message"]
    no_limit = {"resources": {"requests": {"cpu": "1"}}}
    p = run(tj(scaling=SMALLEST, head=no_limit), {"attempt": 0}, rj,
            attempt_pods=[HEAD_OOM_POD, *WORKERS])  # fmt: skip
    assert f"{HEAD_FIELD} (unset now)" in (cond(p, "Failed") or {})["message"]


# ------------------------------------------------------------- while the cluster starts


def test_a_starting_cluster_killed_for_memory_names_the_spec_values_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pods carry no limit of their own here: only the spec can say what the field is now.
    worker = ray_pod("digits-0-abc-worker-b2", "worker", "10.244.0.14",
                     containers=[oomkilled("ray-worker")])  # fmt: skip
    seen: list[list[dict[str, Any]]] = [[HEAD, worker]]
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: seen[0])
    started = rfc3339(NOW - timedelta(seconds=30))
    rj = rayjob(deployment="Initializing", startTime=started)

    def problem(job: Any) -> tuple[str, str]:
        found = reconcile.cluster_problem(PassState(), rj, {}, meta(), 0, NOW, trainjob=job)
        assert found is not None and found[0] == "OOMKilled", found
        return found

    assert f"{WORKER_FIELD} (now 1Gi)" in problem(tj(scaling=SMALLEST))[1]
    seen[0] = [HEAD_OOM_POD, *WORKERS]
    message = problem(tj(scaling=SMALLEST))[1]
    assert f"{HEAD_FIELD} (now {DEFAULT_HEAD_MEMORY}, the default)" in message, message
    head = {"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "6Gi"}}}
    assert f"{HEAD_FIELD} (now 6Gi)" in problem(tj(scaling=SMALLEST, head=head))[1]
