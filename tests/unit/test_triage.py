"""Every class of failed attempt from objects as Kubernetes, KubeRay and the runtime report them."""

from __future__ import annotations

from typing import Any

import pytest

from raytrain_contract import checkpoints as ck
from raytrain_operator.status.triage import (
    DEFAULT_POLICY,
    Evidence,
    FailureClass,
    RetryPolicy,
    classify,
    exception_type,
    last_traceback_lines,
    replica_failure_events,
    retry_decision,
)
from trainer_runtime import failure

RAYJOB_FAILED = {
    "jobDeploymentStatus": "Failed",
    "jobStatus": "FAILED",
    "reason": "AppFailed",
    "message": "Job entrypoint command failed with exit code 1",
}

#: What torch 2.15 raised on rank 0 of a two-process gloo group whose rank 1 never joined the
#: all_reduce (timeout 3 s), measured on this machine's CPU.
GLOO_TIMEOUT = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]"
    " Timed out waiting 3000ms for recv operation to complete"
)
#: ProcessGroupNCCL's watchdog message (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp).
NCCL_TIMEOUT = (
    "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, "
    "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600021 "
    "milliseconds before timing out."
)

USER_TRACEBACK = """training failed: worker 0: KeyError: 'label'
Traceback (most recent call last):
  File "/app/examples/digits/train.py", line 41, in train_loop_per_worker
    y = batch["label"]
        ~~~~~^^^^^^^^^
KeyError: 'label'"""


def pod(
    name: str = "digits-0-abc-worker-x",
    *,
    node_type: str = "worker",
    containers: list[dict[str, Any]] | None = None,
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"ray.io/node-type": node_type}},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": status.pop("phase", "Running"), "containerStatuses": containers or []}
        | status,
    }


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "ray-worker", "image": "raytrain/trainer-runtime:0.1.0", **fields}


def classify_(**kw: Any) -> Any:
    kw.setdefault("rayjob_status", RAYJOB_FAILED)
    return classify(Evidence(**kw))


def test_oomkilled_worker_names_pod_container_exit_code_and_current_memory() -> None:
    oom = container(
        restartCount=1,
        state={"running": {"startedAt": "2026-11-22T08:01:00Z"}},
        lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    )
    t = classify_(pods=[pod(containers=[oom])], worker_memory="2Gi")
    assert t.failure_class is FailureClass.OOM_KILLED and t.reason == "OOMKilled"
    assert t.exit_code == 137 and t.pod == "digits-0-abc-worker-x"
    assert "ray-worker" in t.message and "137" in t.message
    assert "spec.scaling.resourcesPerWorker.memory (now 2Gi)" in t.message
    assert not t.infrastructure
    head = container(
        name="ray-head", state={"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    )
    t = classify_(pods=[pod("digits-0-abc-head-q", node_type="head", containers=[head])])
    assert t.reason == "OOMKilled" and "spec.head.resources" in t.message


@pytest.mark.parametrize(
    ("reason", "message", "permanent"),
    [
        (
            "ImagePullBackOff",
            'Back-off pulling image "registry.local/trainer:1"',
            False,
        ),
        (
            "ErrImagePull",
            'failed to pull and unpack image "docker.io/raytrain/trainer:nope": '
            "docker.io/raytrain/trainer:nope: not found",
            True,
        ),
        (
            "InvalidImageName",
            'Failed to apply default image tag "Raytrain/Trainer": couldn\'t parse image name',
            True,
        ),
    ],
)
def test_image_pull_failures(reason: str, message: str, permanent: bool) -> None:
    waiting = container(state={"waiting": {"reason": reason, "message": message}})
    t = classify_(pods=[pod(phase="Pending", containers=[waiting])])
    assert t.reason == "ImagePullFailed" and t.infrastructure
    assert reason in t.message and "raytrain/trainer-runtime:0.1.0" in t.message
    assert t.permanent is permanent
    assert retry_decision(t.failure_class, t.exit_code, permanent=t.permanent) is not permanent
    assert ("fix spec.image" in t.message) is permanent


def test_unschedulable_pod_carries_the_schedulers_message() -> None:
    words = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes"
    pending = pod(
        phase="Pending",
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": words}
        ],
    )
    t = classify_(pods=[pending])
    assert t.reason == "Unschedulable" and words in t.message and t.infrastructure


@pytest.mark.parametrize("host_network", [True, False])
def test_a_host_network_pod_refused_for_its_ports_is_told_one_pod_per_node(
    host_network: bool,
) -> None:
    """The scheduler's words seen on a real node for a second host-network worker of one job."""
    words = "0/5 nodes are available: 1 node(s) didn't have free ports for the requested pod ports"
    pending = pod(
        phase="Pending",
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": words}
        ],
    )
    pending["spec"]["hostNetwork"] = host_network
    t = classify_(pods=[pending])
    assert t.reason == "Unschedulable" and words in t.message
    assert ("spec.scaling.workersPerPod" in t.message) is host_network, t.message
    assert ("lower spec.scaling" in t.message) is not host_network, t.message


def test_a_quota_refusing_the_pods_is_unschedulable_and_says_quota() -> None:
    words = (
        'pods "digits-0-abc-worker-x" is forbidden: exceeded quota: gpu, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: "
        "requests.nvidia.com/gpu=4"
    )
    event = {
        "reason": "FailedCreate",
        "message": words,
        "involvedObject": {"kind": "RayCluster", "name": "digits-0-abc"},
    }
    t = classify_(events=[event])
    assert t.reason == "Unschedulable" and "ResourceQuota" in t.message and words in t.message
    # The RayCluster's ReplicaFailure, as the raycluster index keeps it, says the same.
    entries = [
        {
            "name": "digits-0-abc",
            "replicaFailure": {"reason": "FailedCreateWorkerPod", "message": words},
        }
    ]
    t = classify_(events=replica_failure_events(entries))
    assert t.reason == "Unschedulable" and "quota" in t.message


@pytest.mark.parametrize(
    "status",
    [
        {
            "phase": "Failed",
            "reason": "NodeLost",
            "message": "Node node-a which was running pod digits-0-abc-worker-x is unresponsive",
        },
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: ephemeral-storage.",
        },
        {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                }
            ],
        },
    ],
)
def test_node_lost(status: dict[str, Any]) -> None:
    t = classify_(pods=[pod(**status)])
    assert t.reason == "NodeLost" and t.infrastructure and "node-a" in t.message


def test_user_exception_has_type_and_last_traceback_lines() -> None:
    t = classify_(report={"phase": "Failed", "message": USER_TRACEBACK})
    assert t.reason == "UserException" and t.exception == "KeyError"
    assert 'y = batch["label"]' in t.message and 'train.py", line 41' in t.message
    assert not t.infrastructure
    assert retry_decision(t.failure_class, None) is False


#: KubeRay's message for a failed driver quotes the end of its log: here Ray's traceback of a
#: worker whose loop raised, through the runtime's wrappers (entrypoint.wrap_loop around
#: flush.flushed_before_raising and resume.with_seed), as the driver printed it on real pods.
DRIVER_LOG_WITH_WRAPPERS = """Job failed due to an application error, last available logs:
ray.train.v2.api.exceptions.WorkerGroupError: Training failed due to worker errors:
[Rank 0 Error Snippet]:
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/ray/train/v2/_internal/util.py", line 210, in __call__
    return self.fn(*args, **kwargs)
  File "/app/trainer_runtime/entrypoint.py", line 110, in loop_with_config
    return around(functools.partial(train_fn, config))
  File "/app/trainer_runtime/flush.py", line 117, in guarded
    return run()
  File "/app/trainer_runtime/entrypoint.py", line 110, in loop_with_config
    return around(functools.partial(train_fn, config))
  File "/app/trainer_runtime/resume.py", line 88, in seeded
    return run()
  File "/app/examples/digits/train.py", line 52, in train_loop_per_worker
    model = build_model(int(config["hidden"]))
                        ^^^^^^^^^^^^^^^^^^^^^
ValueError: invalid literal for int() with base 10: 'wide'"""


def test_a_quoted_driver_traceback_leaves_out_the_runtimes_wrapper_frames() -> None:
    """The operator's own quote of KubeRay's message keeps the traceback's head and the user's
    frames, not the runtime's wrappers, within the lines it keeps."""
    lines = last_traceback_lines(DRIVER_LOG_WITH_WRAPPERS)
    assert lines.startswith("Traceback (most recent call last):"), lines
    assert "ray/train/v2/_internal/util.py" in lines and 'train.py", line 52' in lines
    assert "trainer_runtime/" not in lines, lines
    t = classify_(rayjob_status=RAYJOB_FAILED | {"message": DRIVER_LOG_WITH_WRAPPERS}, report={})
    assert t.reason == "UserException" and t.exception == "ValueError"
    assert "trainer_runtime/" not in t.message and "Traceback" in t.message


def test_the_runtimes_one_line_message_still_names_the_exception() -> None:
    assert exception_type("training failed: worker 1: ValueError: bad lr") == "ValueError"
    assert (
        exception_type("entrypoint 'x:y' raised ModuleNotFoundError: no") == "ModuleNotFoundError"
    )
    assert exception_type("OOM") is None and exception_type("boom") is None
    t = classify_(report={"phase": "Failed", "message": "training failed: worker 1: ValueError: x"})
    assert t.reason == "UserException" and t.exception == "ValueError"


@pytest.mark.parametrize("text", [GLOO_TIMEOUT, NCCL_TIMEOUT])
def test_collective_timeouts(text: str) -> None:
    message = f"training failed: worker 0: {text}"
    t = classify_(report={"phase": "Failed", "message": message})
    assert t.reason == "CollectiveTimeout" and t.infrastructure
    assert retry_decision(t.failure_class, None) is True


def test_ray_system_errors_are_not_user_exceptions() -> None:
    died = (
        "training failed: worker 1: ActorDiedError: The actor died unexpectedly before "
        "finishing this task."
    )
    assert classify_(report={"phase": "Failed", "message": died}).reason == "Unknown"
    node = "training failed: worker 1: NodeDiedError: node 10.0.0.3 died"
    assert classify_(report={"phase": "Failed", "message": node}).reason == "NodeLost"
    ray_oom = (
        "training failed: worker 0: OutOfMemoryError: Task was killed due to the node running "
        "low on memory."
    )
    assert classify_(report={"phase": "Failed", "message": ray_oom}).reason == "OOMKilled"
    # As a worker over its memory limit on a real pod was reported: Ray's memory monitor killed
    # it and Ray Train's health check said so, the first lines of the raylet's text cut off.
    health = (
        "training failed: worker 0: ray.train.v2._internal.exceptions."
        "WorkerHealthCheckFailedError: Refer to the documentation on how to address the out of "
        "memory issue: https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/"
        "debug-memory.html. Consider provisioning more memory on this node or reducing task "
        "parallelism by requesting more CPUs per task. Set max_restarts and max_task_retries to "
        "enable retry when the task crashes due to OOM."
    )
    found = classify_(report={"phase": "Failed", "message": health}, worker_memory="1Gi")
    assert found.reason == "OOMKilled"
    assert "raise spec.scaling.resourcesPerWorker.memory (now 1Gi)" in found.message


def test_unknown_for_the_rest_keeps_what_was_said() -> None:
    t = classify_(report={"phase": "Failed", "message": "OOM"})
    assert t.reason == "Unknown" and "OOM" in t.message
    t = classify_(rayjob_status={"jobDeploymentStatus": "Failed", "message": "boom"})
    assert t.reason == "Unknown" and "boom" in t.message
    assert retry_decision(t.failure_class, None) is True


def test_pod_evidence_wins_over_what_the_runtime_said() -> None:
    oom = container(state={"terminated": {"reason": "OOMKilled", "exitCode": 137}})
    died = "training failed: worker 1: ActorDiedError: The actor died unexpectedly"
    t = classify_(pods=[pod(containers=[oom])], report={"phase": "Failed", "message": died})
    assert t.reason == "OOMKilled"


def test_default_policy_and_overrides() -> None:
    assert retry_decision(FailureClass.OOM_KILLED, 137) is False
    assert retry_decision(FailureClass.USER_EXCEPTION, 1) is False
    for cls in ("Unschedulable", "NodeLost", "CollectiveTimeout", "ImagePullFailed", "Unknown"):
        assert retry_decision(cls, None) is True, cls
    policy: RetryPolicy = {
        "classes": {**DEFAULT_POLICY["classes"], "OOMKilled": True},
        "exitCodes": {3: False},
    }
    assert retry_decision(FailureClass.OOM_KILLED, 137, policy) is True
    assert retry_decision(FailureClass.NODE_LOST, 3, policy) is False
    assert retry_decision("SomethingNew", None, policy) is True


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "training failed in the Ray Train controller: ray.train.v2._internal.exceptions."
            "WorkerGroupStartupTimeoutError: The worker group startup timed out after 30.0 s",
            "Unschedulable",
        ),
        (
            "training failed in the Ray Train controller: InsufficientClusterResourcesError: "
            "Insufficient cluster resources to launch training workers",
            "Unschedulable",
        ),
        ("training failed: PreemptionError: node n-1 was preempted", "NodeLost"),
        (
            "training failed: worker 0: BroadcastCollectiveTimeoutError: The collective operation"
            " timed out after 1800.00 seconds. The following ranks have not joined: [1]",
            "CollectiveTimeout",
        ),
        (
            "training failed: worker 0: UserExceptionWithTraceback: ZeroDivisionError: division",
            "UserException",
        ),
        (
            "training failed: worker 0: WorkerHealthCheckFailedError: the worker is unreachable",
            "Unknown",
        ),
    ],
)
def test_ray_trains_own_errors(message: str, reason: str) -> None:
    t = classify_(report={"phase": "Failed", "message": message})
    assert t.reason == reason, t
    if reason == "UserException":
        assert t.exception == "ZeroDivisionError"


def test_kuberays_words_make_a_user_exception_only_with_a_traceback() -> None:
    submitter = {
        "jobDeploymentStatus": "Failed",
        "reason": "AppFailed",
        "message": "Job submission failed: RuntimeError: the head is not reachable",
    }
    assert classify_(rayjob_status=submitter).reason == "Unknown"
    logged = {
        "jobDeploymentStatus": "Failed",
        "message": "Job entrypoint command failed with exit code 1, last available logs "
        "(truncated to 20,000 chars):\n" + USER_TRACEBACK,
    }
    found = classify_(rayjob_status=logged)
    assert found.reason == "UserException" and found.exception == "KeyError"


def test_an_exception_with_the_words_of_a_passing_fault_is_not_the_users() -> None:
    # What storage_target raises when the S3 endpoint does not answer (pyarrow's words).
    s3 = (
        "OSError: When getting information for bucket 'raytrain': AWS Error "
        "NETWORK_CONNECTION during HeadBucket operation: curlCode: 7, Couldn't connect to server"
    )
    assert classify_(report={"phase": "Failed", "message": s3}).reason == "Unknown"
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.csv'"
    assert classify_(report={"phase": "Failed", "message": missing}).reason == "UserException"


# ------------------------------------------------------------ no checkpoint to resume from

#: The driver's report when none of the run's checkpoints passes its check, in the contract's
#: own words (what trainer_runtime.manifests.check_run reports, then exits 2).
NO_CHECKPOINT_DRIVER = ck.none_usable_message(
    [
        ck.Verdict("s3://b/r/checkpoint_x", detail="file state.pt is missing"),
        ck.Verdict("s3://b/r/checkpoint_w", detail="file state.pt is 100 bytes, manifest: 9"),
    ],
    lambda uri: uri,
)
#: A worker's words when the checkpoint spec.resumeFrom names fails its check.
RESUME_FROM_FAILS = (
    f"{ck.NO_CHECKPOINT} spec.resumeFrom names s3://b/old/checkpoint_1, which fails its check: "
    "file model.pt is missing. Nothing was deleted. Name another checkpoint in spec.resumeFrom"
)


class NoUsableCheckpoint(RuntimeError):
    """Stands in for trainer_runtime.manifests' (which imports Ray): the same name as the
    runtime's failure message prints it."""


NoUsableCheckpoint.__module__ = "trainer_runtime.manifests"


def _worker_failure(message: str) -> str:
    """The runtime's message for a run whose worker 0 raised NoUsableCheckpoint: the headline,
    then the end of the traceback (trainer_runtime.failure, as for any worker's exception)."""
    try:
        raise NoUsableCheckpoint(message)
    except NoUsableCheckpoint as exc:
        raised = exc

    class WorkerGroupError(Exception):
        worker_failures = {0: raised}

    return failure.format_failure(WorkerGroupError("worker group failed"))


def test_the_drivers_no_checkpoint_is_checkpoint_unusable_and_never_retried() -> None:
    assert NO_CHECKPOINT_DRIVER.startswith(ck.NO_CHECKPOINT)
    t = classify_(report={"phase": "Failed", "message": NO_CHECKPOINT_DRIVER})
    assert t.failure_class is FailureClass.CHECKPOINT_UNUSABLE and t.reason == "CheckpointUnusable"
    assert t.permanent and not t.infrastructure and t.exception is None
    # Which checkpoints failed and why, in the runtime's words; then how to go on.
    assert "s3://b/r/checkpoint_x: file state.pt is missing" in t.message
    assert "s3://b/r/checkpoint_w: file state.pt is 100 bytes, manifest: 9" in t.message
    assert "none of the run's 2 checkpoint(s) passes its check" in t.message
    assert "spec.resumeFrom.checkpoint" in t.message and "new run" in t.message
    assert t.message.count("Nothing was deleted") == 1  # the runtime's advice is not repeated
    assert DEFAULT_POLICY["classes"]["CheckpointUnusable"] is False
    everything: RetryPolicy = {
        "classes": {c.value: True for c in FailureClass},
        "exitCodes": {2: True},  # the driver's exit code
    }
    assert retry_decision(t.failure_class, 2, everything, permanent=t.permanent) is False


def test_a_workers_no_usable_checkpoint_is_not_a_user_exception() -> None:
    text = _worker_failure(RESUME_FROM_FAILS)
    assert text.startswith(
        "training failed: worker 0: trainer_runtime.manifests.NoUsableCheckpoint: "
        "no checkpoint to resume from: spec.resumeFrom names s3://b/old/checkpoint_1"
    )
    assert "Traceback (most recent call last):" in text
    t = classify_(report={"phase": "Failed", "message": text})
    assert t.reason == "CheckpointUnusable" and t.permanent, t
    assert "Ray Train worker 0" in t.message
    assert "s3://b/old/checkpoint_1, which fails its check: file model.pt is missing" in t.message
    assert "Traceback" not in t.message and "_worker_failure" not in t.message


def test_only_that_workers_words_are_quoted() -> None:
    text = (
        "training failed: worker 1: trainer_runtime.manifests.NoUsableCheckpoint: "
        f"{NO_CHECKPOINT_DRIVER}; worker 2: trainer_runtime.manifests.NoUsableCheckpoint: "
        f"{NO_CHECKPOINT_DRIVER}"
    )
    t = classify_(report={"phase": "Failed", "message": text})
    assert t.reason == "CheckpointUnusable" and "Ray Train worker 1" in t.message
    assert t.message.count("s3://b/r/checkpoint_x") == 1 and "worker 2" not in t.message


def test_a_long_list_of_checkpoints_keeps_the_fix() -> None:
    verdicts = [ck.Verdict(f"s3://b/r/checkpoint_{i:04d}", detail="no manifest") for i in range(80)]
    t = classify_(report={"phase": "Failed", "message": ck.none_usable_message(verdicts, str)})
    assert t.reason == "CheckpointUnusable" and "... (cut)" in t.message
    assert t.message.endswith("(a new TrainJob gets a new run name)")
    assert len(t.message) < 3000


def test_the_driver_log_kuberay_quotes_is_checkpoint_unusable() -> None:
    logged = {
        "jobDeploymentStatus": "Failed",
        "message": "Job entrypoint command failed with exit code 2, last available logs "
        "(truncated to 20,000 chars):\n2026-12-03 12:21:07 ERROR trainer_runtime: "
        + NO_CHECKPOINT_DRIVER,
    }
    t = classify_(rayjob_status=logged)
    assert t.reason == "CheckpointUnusable" and "s3://b/r/checkpoint_x" in t.message


@pytest.mark.parametrize(
    "message",
    [
        USER_TRACEBACK,
        # A loop's own exception about its checkpoint is the loop's: not the runtime's words.
        "training failed: worker 0: RuntimeError: no checkpoint to resume from\n"
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 12, in train_loop_per_worker\n'
        '    raise RuntimeError("no checkpoint to resume from")\n'
        "RuntimeError: no checkpoint to resume from",
        "training failed: worker 0: KeyError: 'model_state'\n"
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 30, in train_loop_per_worker\n'
        '    model.load_state_dict(torch.load(path)["model_state"])\n'
        "KeyError: 'model_state'",
    ],
    ids=["keyerror", "own-words-without-colon", "checkpoint-load"],
)
def test_ordinary_exceptions_stay_user_exceptions(message: str) -> None:
    t = classify_(report={"phase": "Failed", "message": message})
    assert t.reason == "UserException" and not t.permanent, t
