"""A user's first `helm install` and `kubectl apply`, on real pods.

The operator runs as a pod installed by our chart; KubeRay starts a real Ray head and two real
workers from the trainer-runtime image built from our Dockerfile; KubeRay's submitter submits the
driver; checkpoints land in MinIO. Then faults a user meets: a worker pod deleted mid-training,
the head pod deleted mid-training, and a suspend and resume; pods of another namespace and of
the job's own trying the training cluster's head (its NetworkPolicy, then Ray's token). A
shared ReadWriteMany volume holds the checkpoints of every pod, and a Tune search runs two
trials. examples/resumable.yaml goes on at its saved batch after a worker pod is deleted, a
worker on the node's network trains, each worker's container gets the device it claims through
DRA (the node runs Kubernetes' example DRA driver), Ray's autoscaler scales an elastic job
through the chart's admission policy (and, under Kueue, in workload slices), and the
Transformers and Lightning examples run as written in the image with their packages.

Needs the real node (marker `realnode`), so it runs only inside the network namespace that
`make test` creates (e2e/netns/run.sh). The fault tests also carry the marker `realpods_faults`
(`make test-faults` runs only them); with RAYTRAIN_FAULT_RECORD set they append what they
measured there (benchmarks/realpod_faults.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _wait import guarded, wait_for
from conftest import ENABLED_LABEL, REPO, KubeCluster, uses_frameworks_image
from kueue import SLICES, running
from realpods import (
    BUCKET,
    DRA_DRIVER,
    NODE,
    ON_REAL_NODE,
    OPERATOR_SELECTOR,
    SYSTEM_NS,
    Images,
    Minio,
    assert_node_whole,
    bind_claim,
    built_images,
    condition,
    dra_device_class,
    expose_minio,
    import_archive,
    import_images,
    install_chart,
    operator_restart_check,
    pods_of,
    shared_volume,
    start_minio,
    trainjob_on_real_node,
    wait_condition,
)

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(1800)]

DIGITS = REPO / "examples" / "digits.yaml"
# Generous: a Ray head and two workers start in ~20 s on an idle 2-core machine, the digits
# loop trains an epoch in a few seconds; CI machines are shared.
START_TIMEOUT = 600
TRAIN_TIMEOUT = 900
# Epochs of the fault tests: enough that a fault lands mid-training and a suspend has time to
# take its checkpoint. A digits epoch on two real workers takes about 0.15 s, more on a busy
# machine: its report waits for the runtime's 0.1 s poll (200 epochs ended in about 30 s, at
# times before a deleted worker pod was gone).
FAULT_EPOCHS = 600


@dataclass(frozen=True)
class RealWorld:
    cluster: KubeCluster
    images: Images
    minio: Minio


@pytest.fixture(scope="module")
def real_world(kube_cluster: KubeCluster) -> Iterator[RealWorld]:
    if not os.environ.get("RAYTRAIN_NETNS"):
        pytest.fail(
            "the real-pod tests run inside the cluster's network namespace: "
            "bash e2e/netns/run.sh python -m pytest -m realnode (make test does this)",
            pytrace=False,
        )
    nodes = kube_cluster.get_json("nodes")["items"]
    assert NODE in {n["metadata"]["name"] for n in nodes}, "the cluster has no real node"
    assert_node_whole()
    images = built_images()
    import_images(images)
    minio = start_minio()
    try:
        expose_minio(kube_cluster, minio)
        install_chart(kube_cluster, images)
        # Every test here waits on the chart's operator: should its pod crash, the waits end
        # with its exit and log instead of at their deadlines.
        with guarded(operator_restart_check(kube_cluster)):
            yield RealWorld(kube_cluster, images, minio)
    finally:
        # The chart's operator watches every namespace: stop it, so that the tests after this
        # module see only the operators they start themselves.
        kube_cluster.kubectl(
            "delete", "deployment", "-n", SYSTEM_NS,
            "-l", OPERATOR_SELECTOR, "--wait=true", "--timeout=120s",
            check=False, timeout=180,
        )  # fmt: skip
        minio.stop()


def _apply_digits(
    world: RealWorld, namespace: str, name: str, placement: str | None = None, **overrides: Any
) -> None:
    for doc in trainjob_on_real_node(DIGITS, name=name, **overrides):
        if placement and doc.get("kind") == "TrainJob":
            doc["spec"]["scaling"]["placementStrategy"] = placement
        world.cluster.apply(doc, namespace=namespace)


def _trainjob(world: RealWorld, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = world.cluster.get_json("trainjob", name, "-n", namespace)
    return obj


def _ray_pods(world: RealWorld, namespace: str, cluster_name: str) -> list[dict[str, Any]]:
    return pods_of(world.cluster, namespace, f"ray.io/cluster={cluster_name}")


def _running_ray_pods(world: RealWorld, namespace: str, name: str) -> list[dict[str, Any]] | None:
    tj = _trainjob(world, namespace, name)
    cluster_name = tj.get("status", {}).get("rayClusterName")
    if not cluster_name:
        return None
    pods = _ray_pods(world, namespace, cluster_name)
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    return running if len(running) >= 3 else None


def _checkpoints(world: RealWorld, run_name: str) -> set[str]:
    # Directories only: Ray Train keeps a checkpoint_manager_snapshot.json beside them.
    parts = [k.split("/") for k in world.minio.keys(f"checkpoints/{run_name}/")]
    return {p[2] for p in parts if len(p) > 3 and p[2].startswith("checkpoint_")}


def _json_lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file another process is still appending to."""
    out: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a line still being written
    return out


def _metric(tj: dict[str, Any], name: str) -> str | None:
    for m in tj.get("status", {}).get("trainerStatus", {}).get("metrics", []):
        if m.get("name") == name:
            return str(m.get("value"))
    return None


def test_the_operator_runs_as_a_pod_on_the_real_node(real_world: RealWorld) -> None:
    pods = pods_of(real_world.cluster, SYSTEM_NS, OPERATOR_SELECTOR)
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    pod = pods[0]
    assert pod["spec"]["nodeName"] == NODE
    assert pod["status"]["phase"] == "Running"
    (container,) = pod["status"]["containerStatuses"]
    # Ready is the chart's readiness probe: kopf ran its start-up handlers and serves /healthz.
    assert container["ready"] is True
    assert container["restartCount"] == 0, container.get("lastState")
    assert container["image"].endswith(real_world.images.operator_image.split("/", 1)[1])


CACHE = {"name": "dataset-cache", "emptyDir": {"sizeLimit": "1Gi"}}
CACHE_MOUNT = {"name": "dataset-cache", "mountPath": "/cache"}
# A RuntimeClass naming the real node's containerd handler (e2e/realnode/node.sh): the kubelet
# refuses a pod whose class it cannot resolve to a handler, so a worker that runs proves the
# field reached it. The pull Secret is only carried: the images are imported on the node, and a
# kubelet uses pull credentials only when it pulls.
RUNTIME_CLASS = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "raytrain-test-runc"},
    "handler": "runc",
}
PULL_SECRET = "registry-login"


def _through_a_template(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The example's TrainJob split the way a platform team would: a ClusterTrainJobTemplate
    (`name`) with the image, loop, storage, placement, a dataset-cache volume and a runtime
    class on the workers (the class is a cluster administrator's grant: a namespaced
    TrainJobTemplate could not give it), and a job that sets only its config and its number of
    workers."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if doc.get("kind") != "TrainJob":
            out.append(doc)
            continue
        spec = doc["spec"]
        defaults = {k: v for k, v in spec.items() if k not in ("config", "scaling")}
        defaults["scaling"] = {k: v for k, v in spec["scaling"].items() if k != "numWorkers"}
        defaults["workerTemplate"] = {
            **spec["workerTemplate"], "volumes": [CACHE], "volumeMounts": [CACHE_MOUNT],
            "runtimeClassName": RUNTIME_CLASS["metadata"]["name"],
            "imagePullSecrets": [{"name": PULL_SECRET}],
        }  # fmt: skip
        out.append({
            "apiVersion": "raytrain.dev/v1alpha1",
            "kind": "ClusterTrainJobTemplate",
            "metadata": {"name": name},
            "spec": defaults,
        })  # fmt: skip
        job = {
            "template": {"kind": "ClusterTrainJobTemplate", "name": name},
            "config": spec["config"],
            "scaling": {"numWorkers": spec["scaling"]["numWorkers"]},
        }
        out.append({**doc, "spec": job})
    return out


def test_digits_trains_to_succeeded_on_real_pods(
    real_world: RealWorld, namespace: str, request: pytest.FixtureRequest
) -> None:
    """The digits example, its defaults in a ClusterTrainJobTemplate (docs/templates.md): the job's
    pods run with what the template gives, the pod surface among it (a volume, a RuntimeClass,
    an image pull Secret), and its credentials Secret is created only after the job stalled
    for it. Then what a user does next: reads the finished run's stored metrics
    history and log, and continues it in a new TrainJob (spec.resumeFrom)."""
    cluster = real_world.cluster
    cluster.apply(RUNTIME_CLASS)
    auth = base64.b64encode(b"raytrain:not-used").decode()
    config = json.dumps({"auths": {"registry.invalid": {"auth": auth}}})
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": PULL_SECRET},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": config},
        },
        namespace=namespace,
    )
    defaults = f"{namespace}-digits-defaults"
    request.addfinalizer(
        lambda: cluster.kubectl(
            "delete", "clustertrainjobtemplate", defaults, "--ignore-not-found", check=False
        )
    )
    split = _through_a_template(trainjob_on_real_node(DIGITS, name="digits", epochs=3), defaults)
    (credentials,) = [d for d in split if d["kind"] == "Secret"]
    for doc in split:
        if doc["kind"] == "ClusterTrainJobTemplate":
            cluster.apply(doc)
        elif doc is not credentials:
            cluster.apply(doc, namespace=namespace)

    # The credentials Secret comes last (a GitOps sync out of order, a Secret another tool
    # makes). The operator reads no Secret (the chart's default): the kubelet finds it
    # missing, and the job says which field names it. Nothing is deleted meanwhile, and the
    # attempt goes on once the Secret exists, with no retry spent.
    stalled = condition(
        wait_condition(cluster, namespace, "digits", "Stalled", START_TIMEOUT), "Stalled"
    )
    assert stalled is not None and stalled["reason"] == "CredentialsNotFound", stalled
    assert stalled["message"].startswith(
        "spec.storage.s3.credentialsSecret.name: Secret 'digits-s3' does not exist in namespace"
    ), stalled
    assert "CreateContainerConfigError" in stalled["message"], stalled
    cluster.apply(credentials, namespace=namespace)

    running = wait_for(
        lambda: _running_ray_pods(real_world, namespace, "digits"),
        timeout=START_TIMEOUT,
        what="a Ray head and two workers Running",
    )
    assert {p["spec"]["nodeName"] for p in running} == {NODE}
    roles = sorted(p["metadata"]["labels"].get("ray.io/node-type", "") for p in running)
    assert roles.count("head") == 1 and roles.count("worker") == 2, roles
    for pod in running:
        if pod["metadata"]["labels"].get("ray.io/node-type") != "worker":
            continue
        assert CACHE in pod["spec"]["volumes"], pod["spec"]["volumes"]
        ray = next(c for c in pod["spec"]["containers"] if c["name"] == "ray-worker")
        assert {"name": "dataset-cache", "mountPath": "/cache"} in [
            {k: m[k] for k in ("name", "mountPath")} for m in ray["volumeMounts"]
        ]
        assert pod["spec"].get("runtimeClassName") == RUNTIME_CLASS["metadata"]["name"]
        assert {"name": PULL_SECRET} in pod["spec"].get("imagePullSecrets", [])
    kept = _trainjob(real_world, namespace, "digits")["status"]["template"]
    assert (kept["kind"], kept["name"]) == ("ClusterTrainJobTemplate", defaults)

    # What a user types to wait for the end.
    waited = cluster.kubectl(
        "wait",
        "trainjob/digits",
        "-n",
        namespace,
        "--for=condition=Succeeded",
        f"--timeout={TRAIN_TIMEOUT}s",
        check=False,
        timeout=TRAIN_TIMEOUT + 60,
    )
    tj = _trainjob(real_world, namespace, "digits")
    assert waited.returncode == 0, (waited.stderr, json.dumps(tj.get("status"), indent=1))

    status = tj["status"]
    trainer = status["trainerStatus"]
    assert trainer["progressPercentage"] == 100
    assert trainer["epoch"] == 2
    # Goodput of a run with no fault: one cluster, succeeded, its time allocated and nothing
    # lost; the productive part (first report to last) lies within it; no GPU anywhere.
    goodput = status["goodput"]
    (ledger,) = goodput["clusters"]
    assert ledger["outcome"] == "Succeeded" and ledger["gpus"] == 0, goodput
    assert goodput["allocatedSeconds"] > 0, goodput
    assert 0 <= goodput["productiveSeconds"] <= goodput["allocatedSeconds"], goodput
    assert goodput["lostSeconds"] == 0 and goodput["lostToRestartSeconds"] == 0, goodput
    assert goodput["allocatedGPUSeconds"] == 0, goodput
    assert float(_metric(tj, "accuracy") or 0) > 0.5
    run_name = trainer.get("runName") or status["checkpoint"]["latestURI"].split("/")[-2]
    latest = status["checkpoint"]["latestURI"]
    assert latest.startswith(f"s3://raytrain/checkpoints/{run_name}/checkpoint_")
    # numToKeep: 2 in the example: two checkpoints stay in the bucket.
    assert len(_checkpoints(real_world, run_name)) == 2

    def driver_log() -> subprocess.CompletedProcess[str]:
        logs = _logs(real_world, namespace, "digits")
        assert logs.returncode == 0, logs.stderr
        return logs

    # KubeRay's submitter pod follows the driver's log and may be a few seconds behind the
    # status: the driver's last line can reach it after the job shows Succeeded.
    logs = wait_for(
        lambda: out if f"run {run_name} finished" in (out := driver_log()).stdout else None,
        timeout=60,
        what="the driver's last line in raytrain logs",
        interval=2.0,
    )
    assert f"run {run_name}, attempt 0: 2 workers" in logs.stdout, logs.stdout[-3000:]
    assert "b'" not in logs.stdout.splitlines()[0], logs.stdout[:300]

    # The finished run's metrics history and driver log stay in storage (raytrain logs reads
    # them through a reader pod), and a new TrainJob, a run of its own, goes on from its latest
    # checkpoint (spec.resumeFrom).
    metrics = _logs(real_world, namespace, "digits", "--metrics")
    assert metrics.returncode == 0, metrics.stderr
    lines = [json.loads(x) for x in metrics.stdout.splitlines()]
    assert [r["epoch"] for r in lines] == [0, 1, 2]
    assert all(r["checkpoint"].startswith("s3://raytrain/checkpoints/") for r in lines)
    stored = _logs(real_world, namespace, "digits", "--attempt", "0")
    assert stored.returncode == 0, stored.stderr
    assert f"run {run_name} finished" in stored.stdout
    _apply_digits(real_world, namespace, "more", epochs=5, resumeFrom={"trainJob": "digits"})
    # Once the new job has recorded where it starts, the old one may go (and free its cluster:
    # the node has room for one at a time).
    wait_for(
        lambda: _trainjob(real_world, namespace, "more").get("status", {}).get("resumedFrom"),
        timeout=120,
        what="status.resumedFrom of the new job",
    )
    cluster.kubectl("delete", "trainjob", "digits", "-n", namespace, "--wait=false")
    waited = cluster.kubectl(
        "wait", "trainjob/more", "-n", namespace, "--for=condition=Succeeded",
        f"--timeout={START_TIMEOUT + TRAIN_TIMEOUT}s", check=False,
        timeout=START_TIMEOUT + TRAIN_TIMEOUT + 60,
    )  # fmt: skip
    more = _trainjob(real_world, namespace, "more")
    assert waited.returncode == 0, (waited.stderr, json.dumps(more.get("status"), indent=1))
    assert more["status"]["resumedFrom"] == latest
    assert more["status"]["runName"] not in latest
    continued = _logs(real_world, namespace, "more", "--metrics")
    assert continued.returncode == 0, continued.stderr
    assert [json.loads(x)["epoch"] for x in continued.stdout.splitlines()] == [3, 4]
    driver = _logs(real_world, namespace, "more", "--attempt", "0")
    assert f"the run starts from {latest} (spec.resumeFrom)" in driver.stdout, driver.stdout


def _logs(world: RealWorld, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`raytrain logs ARGS -n NAMESPACE`, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "raytrain.cli", "logs", *args, "-n", namespace],
        env=world.cluster.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _record(
    fault: str,
    at_epoch: int,
    resumed_at: int,
    seconds: float,
    new_rayjob: bool,
    unregistered: int | None = None,
) -> None:
    """Append one fault's measurements to $RAYTRAIN_FAULT_RECORD (benchmarks/realpod_faults.py).

    ``at_epoch`` is the last epoch reported when the fault was injected; digits checkpoints
    every epoch, so the checkpoint interval is one epoch. Where a test gives ``unregistered``
    (the checkpoints in storage that no report registered), ``at_epoch`` is the last epoch the
    driver registered before the fault (its metrics.jsonl, not the throttled status).
    """
    path = os.environ.get("RAYTRAIN_FAULT_RECORD")
    if path:
        numbers = {
            "fault": fault,
            "reported_epoch_at_fault": at_epoch,
            "resumed_at_epoch": resumed_at,
            "epochs_redone": max(0, at_epoch + 1 - resumed_at),
            "checkpoint_interval_epochs": 1,
            "seconds_to_first_resumed_report": round(seconds, 1),
            "new_rayjob": new_rayjob,
            "checkpoints_never_registered": unregistered,
        }
        with open(path, "a") as out:
            out.write(json.dumps(numbers) + "\n")


def _start_epoch(tj: dict[str, Any]) -> int:
    return int(float(_metric(tj, "start_epoch") or 0))


def _watch_resume(
    world: RealWorld, namespace: str, name: str, faulted_at: float, timeout: float
) -> tuple[float, int]:
    """Seconds from the fault to the first report of a resumed run, and the epoch it resumed at.

    A resumed run reports ``start_epoch`` > 0 (digits checkpoints every epoch); its first
    report comes after its first epoch, so the time includes one epoch of training.
    """
    tj = wait_for(
        lambda: t if _start_epoch(t := _trainjob(world, namespace, name)) > 0 else None,
        timeout=timeout,
        what=f"a report of {name}'s resumed run (start_epoch > 0)",
        interval=1.0,
    )
    return time.monotonic() - faulted_at, _start_epoch(tj)


def _assert_same_attempt(
    world: RealWorld, namespace: str, name: str, before: dict[str, Any]
) -> None:
    """The TrainJob still runs its first attempt: the RayJob it had before a fault, no retry
    counted, and its Running condition true."""
    now = _trainjob(world, namespace, name)
    status = now["status"]
    assert status.get("restarts", 0) == 0, status
    assert status["rayJobName"] == before["status"]["rayJobName"], status
    running = condition(now, "Running")
    assert running and running["status"] == "True", status.get("conditions")


def _end(world: RealWorld, namespace: str, name: str) -> None:
    """Delete a TrainJob whose run the test no longer needs, and wait until it is gone: its
    pods stop at once (a deleted pod without a disruption skips the drain) and do not hold the
    real node's CPUs into the next test."""
    world.cluster.kubectl(
        "delete", "trainjob", name, "-n", namespace, "--wait=true", "--timeout=120s", timeout=180
    )


def _wait_checkpoint(world: RealWorld, namespace: str, name: str, count: int) -> dict[str, Any]:
    return wait_for(
        lambda: (
            tj
            if (tj := _trainjob(world, namespace, name))
            .get("status", {})
            .get("checkpoint", {})
            .get("count", 0)
            >= count
            else None
        ),
        timeout=START_TIMEOUT + TRAIN_TIMEOUT,
        what=f"{count} checkpoint(s) of {name}",
    )


@pytest.mark.realpods_faults
def test_a_deleted_worker_pod_resumes_from_the_latest_checkpoint(
    real_world: RealWorld, namespace: str
) -> None:
    cluster = real_world.cluster
    # Enough epochs that the delete lands mid-training. SPREAD puts one training worker on each
    # worker pod (the head has no CPUs for them), so the deleted pod always holds one; with the
    # default PACK both could share the other pod and the delete would hit an idle Ray node.
    _apply_digits(real_world, namespace, "worker-kill", epochs=FAULT_EPOCHS, placement="SPREAD")
    tj = _wait_checkpoint(real_world, namespace, "worker-kill", 1)
    ray_cluster = tj["status"]["rayClusterName"]
    workers = [
        p
        for p in _ray_pods(real_world, namespace, ray_cluster)
        if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
    ]
    victim = workers[0]["metadata"]["name"]
    before = _trainjob(real_world, namespace, "worker-kill")["status"]["trainerStatus"]["epoch"]
    faulted_at = time.monotonic()
    cluster.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
    assert before < FAULT_EPOCHS - 1, "training ended before the fault: raise FAULT_EPOCHS"

    seconds, resumed_at = _watch_resume(
        real_world, namespace, "worker-kill", faulted_at, TRAIN_TIMEOUT
    )
    # At most the epoch in flight is redone: the run resumes after the last reported epoch
    # (every epoch is checkpointed), not from an earlier one.
    assert resumed_at >= before + 1, (before, resumed_at)
    _record("worker pod deleted", before, resumed_at, seconds, new_rayjob=False)
    # Ray Train restarted the worker group inside the same cluster (failure.maxFailures): the
    # resumed run reports through the same RayJob, and no retry is counted. The run is not
    # trained on to its end: the tests of make test-faults take theirs to Succeeded.
    _assert_same_attempt(real_world, namespace, "worker-kill", tj)
    _end(real_world, namespace, "worker-kill")


# Run in a worker pod's container: SIGKILL the Ray Train worker processes there (Ray titles an
# actor's process `ray::<class>...`), print how many and when (the pod's clock is this host's).
# The pod and its raylet stay.
KILL_TRAIN_WORKERS = """
import os, signal, time
killed = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read().startswith(b"ray::RayTrainWorker") and int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
    except OSError:
        pass
print(killed, time.time())
"""


@pytest.mark.realpods_faults
@pytest.mark.realpods_sigkill
def test_a_training_worker_sigkilled_mid_epoch_resumes_after_the_last_registered_epoch(
    real_world: RealWorld, namespace: str
) -> None:
    """A training worker's process SIGKILLed while it trains (no SIGTERM, nothing runs on the
    way out, its pod stays): Ray Train restarts the group in the same pods, no new RayJob, and
    the run goes on at the epoch after the last one the driver registered before the kill.

    The positions and times come from the attempt's metrics.jsonl in MinIO: every report the
    driver registered, on the driver's clock (the pods run on this host: the same clock as the
    kill's). Checkpoints written but never registered (trained, then lost with the kill) are
    counted for the record; that a rank waits for its report to be taken before it trains on
    (docs/failures.md) is what keeps them to the epoch in flight.
    """
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, "sigkill", epochs=FAULT_EPOCHS, placement="SPREAD")
    tj = _wait_checkpoint(real_world, namespace, "sigkill", 3)
    workers = [
        p
        for p in _ray_pods(real_world, namespace, tj["status"]["rayClusterName"])
        if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
    ]
    victim = workers[0]["metadata"]["name"]
    faulted_at = time.monotonic()
    killed, at = cluster.kubectl(
        "exec", victim, "-n", namespace, "-c", "ray-worker", "--",
        "python", "-c", KILL_TRAIN_WORKERS,
    ).stdout.split()  # fmt: skip
    assert killed == "1", f"SIGKILLed {killed} RayTrainWorker processes in {victim}, not 1"
    killed_at = float(at)

    seconds, _ = _watch_resume(real_world, namespace, "sigkill", faulted_at, TRAIN_TIMEOUT)
    done = wait_condition(cluster, namespace, "sigkill", "Succeeded", TRAIN_TIMEOUT)
    status = done["status"]
    assert status.get("restarts", 0) == 0  # the same cluster, the same attempt
    assert status["trainerStatus"]["epoch"] == FAULT_EPOCHS - 1

    run_name = (
        status["trainerStatus"].get("runName") or (status["checkpoint"]["latestURI"].split("/")[-2])
    )
    body = (
        real_world.minio.client()
        .get_object(Bucket=BUCKET, Key=f"checkpoints/{run_name}/attempt-0/metrics.jsonl")["Body"]
        .read()
        .decode()
    )
    reports = [json.loads(line) for line in body.splitlines() if line.strip()]
    reports = [r for r in reports if "metrics" in r]
    before = [r for r in reports if r["time"] <= killed_at]
    after = [r for r in reports if int(float(r["metrics"]["start_epoch"])) > 0]
    assert before and after, (len(before), len(after))
    last = before[-1]
    assert int(last["metrics"]["epoch"]) < FAULT_EPOCHS - 1, "training ended before the kill"
    resumed_at = int(float(after[0]["metrics"]["start_epoch"]))
    # Nothing the driver had registered is trained again: the run resumes after the last
    # report before the kill (or after one the poll took just as the process died).
    assert resumed_at >= int(last["metrics"]["epoch"]) + 1, (last, after[0])

    registered = {str(r["checkpoint"]).rstrip("/").split("/")[-1] for r in reports}
    _record(
        "training worker SIGKILLed",
        int(last["metrics"]["epoch"]),
        resumed_at,
        seconds,
        new_rayjob=False,
        unregistered=len(_checkpoints(real_world, run_name) - registered),
    )


@pytest.mark.realpods_faults
@pytest.mark.realpods_second_cluster
def test_a_deleted_head_pod_retries_and_continues_from_the_latest_checkpoint(
    real_world: RealWorld, namespace: str
) -> None:
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, "head-kill", epochs=FAULT_EPOCHS)
    tj = _wait_checkpoint(real_world, namespace, "head-kill", 1)
    first_rayjob = tj["status"]["rayJobName"]
    ray_cluster = tj["status"]["rayClusterName"]
    (head,) = [
        p
        for p in _ray_pods(real_world, namespace, ray_cluster)
        if p["metadata"]["labels"].get("ray.io/node-type") == "head"
    ]
    before = _trainjob(real_world, namespace, "head-kill")["status"]["trainerStatus"]["epoch"]
    faulted_at = time.monotonic()
    cluster.kubectl("delete", "pod", head["metadata"]["name"], "-n", namespace, "--wait=false")
    assert before < FAULT_EPOCHS - 1, "training ended before the fault: raise FAULT_EPOCHS"

    seconds, resumed_at = _watch_resume(
        real_world, namespace, "head-kill", faulted_at, START_TIMEOUT + TRAIN_TIMEOUT
    )
    assert resumed_at >= before + 1, (before, resumed_at)
    _record("head pod deleted", before, resumed_at, seconds, new_rayjob=True)

    done = wait_condition(
        cluster, namespace, "head-kill", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT
    )
    status = done["status"]
    assert status["restarts"] >= 1
    assert status["rayJobName"] != first_rayjob
    assert status["trainerStatus"]["epoch"] == FAULT_EPOCHS - 1
    # The next attempt's run resumed: it started past epoch 0.
    assert int(float(_metric(done, "start_epoch") or 0)) >= 1


@pytest.mark.realpods_faults
@pytest.mark.realpods_second_cluster
def test_suspend_takes_a_checkpoint_removes_the_pods_and_resume_continues(
    real_world: RealWorld, namespace: str
) -> None:
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, "pause", epochs=FAULT_EPOCHS)
    tj = _wait_checkpoint(real_world, namespace, "pause", 1)
    ray_cluster = tj["status"]["rayClusterName"]
    cluster.kubectl(
        "patch", "trainjob", "pause", "-n", namespace, "--type=merge", "-p",
        '{"spec":{"suspend":true}}',
    )  # fmt: skip
    wait_condition(cluster, namespace, "pause", "Suspended", START_TIMEOUT)
    wait_for(
        lambda: not _ray_pods(real_world, namespace, ray_cluster),
        timeout=START_TIMEOUT,
        what="the suspended job's Ray pods gone",
    )
    suspended = _trainjob(real_world, namespace, "pause")
    assert suspended["status"]["checkpoint"]["count"] >= 1

    resumed_from = suspended["status"]["trainerStatus"]["epoch"]
    faulted_at = time.monotonic()
    cluster.kubectl(
        "patch", "trainjob", "pause", "-n", namespace, "--type=merge", "-p",
        '{"spec":{"suspend":false}}',
    )  # fmt: skip
    seconds, resumed_at = _watch_resume(
        real_world, namespace, "pause", faulted_at, START_TIMEOUT + TRAIN_TIMEOUT
    )
    # Nothing reported is redone: the run resumes after the last epoch the status showed. It
    # may resume later still: digits checkpoints every epoch, and an epoch that ended between
    # the handshake's answer and the pods' removal is on storage before its report (throttled)
    # reached the status. That checkpoint is the newest, so the run rightly goes on from it.
    assert resumed_at >= resumed_from + 1, (resumed_from, resumed_at)
    _record("suspend, then resume", resumed_from, resumed_at, seconds, new_rayjob=True)
    done = wait_condition(cluster, namespace, "pause", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT)
    assert done["status"]["trainerStatus"]["epoch"] == FAULT_EPOCHS - 1
    assert int(float(_metric(done, "start_epoch") or 0)) >= 1
    suspended_cond = condition(done, "Suspended")
    assert suspended_cond is None or suspended_cond["status"] == "False"


DIGITS_PVC = REPO / "examples" / "digits-pvc.yaml"


def test_a_shared_volume_holds_every_pods_checkpoints(
    real_world: RealWorld, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """examples/digits-pvc.yaml as written: a ReadWriteMany claim mounted on every pod.

    The claim binds to a hostPath PersistentVolume on the real node (the one node every pod
    runs on, so all of them share the directory as they would share an NFS export).
    """
    cluster = real_world.cluster
    share = tmp_path_factory.mktemp("rwx")
    share.chmod(0o777)  # the pods run as uid 1000 (builders/pods.py)
    pv_name = f"{namespace}-share"
    cluster.apply(shared_volume(pv_name, share, namespace, "digits-checkpoints"))
    try:
        for doc in trainjob_on_real_node(DIGITS_PVC, epochs=3):
            bind_claim(doc, pv_name)
            cluster.apply(doc, namespace=namespace)
        done = wait_condition(
            cluster, namespace, "digits-pvc", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT
        )
        status = done["status"]
        assert status["trainerStatus"]["epoch"] == 2
        latest = status["checkpoint"]["latestURI"]
        # The URI is the path inside the pods; the same files are in the node's directory.
        assert latest.startswith("/mnt/raytrain/"), latest
        on_node = share / latest.removeprefix("/mnt/raytrain/")
        assert (on_node / "state.pt").is_file(), sorted(p.name for p in share.rglob("*"))[:50]
        # Ray's checkpoint_manager_snapshot.json sits beside the checkpoint directories.
        kept = [
            p for p in on_node.parent.iterdir() if p.is_dir() and p.name.startswith("checkpoint_")
        ]
        assert len(kept) == 2, kept  # numToKeep: 2
    finally:
        cluster.kubectl("delete", "trainjob", "--all", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", "pv", pv_name, "--wait=false", check=False)


# The two framework examples: each file, its claim, the metric its checkpoints are scored by.
FRAMEWORK_EXAMPLES = {
    "hf-transformers": ("hf-transformers-checkpoints", "eval_loss"),
    "lightning-digits": ("lightning-digits-checkpoints", "val_accuracy"),
}


@uses_frameworks_image
@pytest.mark.realpods_frameworks
@pytest.mark.parametrize("example", sorted(FRAMEWORK_EXAMPLES))
def test_a_framework_example_trains_in_the_frameworks_image(
    real_world: RealWorld, namespace: str, tmp_path_factory: pytest.TempPathFactory, example: str
) -> None:
    """examples/hf-transformers.yaml and examples/lightning-digits.yaml as written, in the image
    the Dockerfile's trainer-runtime-frameworks target builds: the Transformers Trainer (and
    Lightning's Trainer) under Ray Train on a real head and two real workers, their reports and
    checkpoints reaching the status, the checkpoints on the ReadWriteMany claim.

    The claim binds to a hostPath PersistentVolume on the real node; three epochs instead of
    the example's four or five, so that ``numToKeep: 2`` has one to remove.
    """
    cluster = real_world.cluster
    import_archive(real_world.images.frameworks_archive)
    claim, metric = FRAMEWORK_EXAMPLES[example]
    share = tmp_path_factory.mktemp(example)
    share.chmod(0o777)  # the pods run as uid 1000 (builders/pods.py)
    pv_name = f"{namespace}-{example}"
    cluster.apply(shared_volume(pv_name, share, namespace, claim))
    try:
        for doc in trainjob_on_real_node(REPO / "examples" / f"{example}.yaml", epochs=3):
            if not bind_claim(doc, pv_name):
                # The example's memory (the frameworks' imports need more than digits').
                doc["spec"]["scaling"]["resourcesPerWorker"]["memory"] = "2Gi"
            cluster.apply(doc, namespace=namespace)
        running = wait_for(
            lambda: _running_ray_pods(real_world, namespace, example),
            timeout=START_TIMEOUT,
            what="a Ray head and two workers Running",
        )
        # The example names raytrain/trainer-runtime-frameworks:<version>; containerd has it as
        # docker.io/... from the archive, and nothing is pulled.
        images = {c["image"] for p in running for c in p["spec"]["containers"]}
        assert images == {real_world.images.frameworks_image.removeprefix("docker.io/")}, images
        done = wait_condition(cluster, namespace, example, "Succeeded", TRAIN_TIMEOUT)
        status = done["status"]
        trainer = status["trainerStatus"]
        assert trainer["epoch"] == 2 and trainer["progressPercentage"] == 100, trainer
        assert _metric(done, metric) is not None, trainer.get("metrics")
        latest = status["checkpoint"]["latestURI"]
        assert latest.startswith("/mnt/raytrain/"), latest
        on_node = share / latest.removeprefix("/mnt/raytrain/")
        assert any(on_node.iterdir()), f"{on_node} is empty"
        kept = [
            p for p in on_node.parent.iterdir() if p.is_dir() and p.name.startswith("checkpoint_")
        ]
        assert len(kept) == 2, kept  # numToKeep: 2 of three
        assert status["checkpoint"]["bestURI"] in {
            f"/mnt/raytrain/{p.relative_to(share)}" for p in kept
        }
    finally:
        cluster.kubectl("delete", "trainjob", "--all", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", "pv", pv_name, "--wait=false", check=False)


@pytest.mark.long
def test_a_worker_on_the_hosts_network_trains_behind_the_jobs_network_policy(
    real_world: RealWorld, namespace: str
) -> None:
    """`workerTemplate.hostNetwork: true` (NCCL over the node's own interfaces): the worker pod
    has the node's address, Ray listens on it (the kubelet's probes pass), the worker finds the
    head's Service through the cluster's DNS and reaches the head through the job's
    NetworkPolicy, and the job trains.

    One worker: a second host-network Ray pod of the job on the same node would claim the same
    host ports (KubeRay's metrics port), and the scheduler keeps it Pending; the status says
    so (see the second half).
    """
    cluster = real_world.cluster
    # The job's own hostNetwork is refused: the chart's default grants it to no job.
    for doc in trainjob_on_real_node(DIGITS, name="hostnet", epochs=2):
        if doc["kind"] == "TrainJob":
            doc["spec"]["workerTemplate"]["hostNetwork"] = True
            doc["spec"]["scaling"]["numWorkers"] = 1
        cluster.apply(doc, namespace=namespace)
    refused = condition(
        wait_condition(cluster, namespace, "hostnet", "Stalled", START_TIMEOUT), "Stalled"
    )
    assert refused is not None and refused["reason"] == "OverrideForbidden", refused
    assert "podOverrides.allowHostNetwork" in refused["message"], refused
    cluster.kubectl("delete", "trainjob", "hostnet", "-n", namespace, "--wait=true")

    # A cluster administrator's ClusterTrainJobTemplate grants it to the jobs that name it.
    grant = f"{namespace}-hostnet"
    cluster.apply(
        {
            "apiVersion": "raytrain.dev/v1alpha1",
            "kind": "ClusterTrainJobTemplate",
            "metadata": {"name": grant},
            "spec": {"workerTemplate": {"hostNetwork": True}},
        }
    )
    try:
        for doc in trainjob_on_real_node(DIGITS, name="hostnet", epochs=2):
            if doc["kind"] == "TrainJob":
                doc["spec"]["template"] = {"name": grant}
                doc["spec"]["scaling"]["numWorkers"] = 1
            cluster.apply(doc, namespace=namespace)
        done = wait_condition(
            cluster, namespace, "hostnet", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT
        )
        assert done["status"]["trainerStatus"]["epoch"] == 1
        assert float(_metric(done, "accuracy") or 0) > 0.3

        # Two host-network workers on the one node: the second cannot be placed, and the
        # TrainJob says why instead of waiting in silence.
        for doc in trainjob_on_real_node(DIGITS, name="hostnet2", epochs=2):
            if doc["kind"] == "TrainJob":
                doc["spec"]["template"] = {"name": grant}
                cluster.apply(doc, namespace=namespace)

        def unschedulable() -> str | None:
            c = condition(_trainjob(real_world, namespace, "hostnet2"), "Reconciling")
            if c and c.get("reason") == "Unschedulable":
                return str(c.get("message"))
            return None

        message = wait_for(unschedulable, timeout=START_TIMEOUT, what="hostnet2 Unschedulable")
        assert "free ports" in message and "spec.scaling.workersPerPod" in message, message
        cluster.kubectl(
            "delete", "trainjob", "hostnet2", "-n", namespace, "--wait=true", check=False
        )
    finally:
        cluster.kubectl(
            "delete", "clustertrainjobtemplate", grant, "--ignore-not-found", check=False
        )


# Long enough that both workers are checked while the job still trains.
DRA_EPOCHS = 40


@pytest.mark.long
def test_a_device_claimed_through_dra_reaches_each_worker_container(
    real_world: RealWorld, namespace: str
) -> None:
    """`workerTemplate.resourceClaims` naming a ResourceClaimTemplate (the shape of a NIC or a
    GPU claimed through DRA): each worker pod gets a claim of its own, the scheduler allocates it
    one of the real node's DRA devices, the kubelet has the driver prepare it, and containerd
    applies the driver's CDI spec to the Ray container, which then holds the configuration the
    DeviceClass and the claim carry. The head claims nothing. The job trains to Succeeded."""
    cluster = real_world.cluster
    device_class = f"{namespace}-nic"
    cluster.apply(dra_device_class(device_class, {"fabric": "realnode"}))
    try:
        cluster.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "nic"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "port", "exactly": {"deviceClassName": device_class}}
                            ],
                            "config": [
                                {
                                    "requests": ["port"],
                                    "opaque": {
                                        "driver": DRA_DRIVER,
                                        "parameters": {"NCCL_IB_HCA": "mlx5_0"},
                                    },
                                }
                            ],
                        }
                    }
                },
            },
            namespace=namespace,
        )
        for doc in trainjob_on_real_node(DIGITS, name="dra", epochs=DRA_EPOCHS):
            if doc["kind"] == "TrainJob":
                doc["spec"]["workerTemplate"]["resourceClaims"] = [
                    {"name": "nic", "resourceClaimTemplateName": "nic"}
                ]
            cluster.apply(doc, namespace=namespace)

        pods = wait_for(
            lambda: _running_ray_pods(real_world, namespace, "dra"),
            timeout=START_TIMEOUT,
            what="the dra job's head and two workers Running",
        )
        workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        head = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        assert len(workers) == 2 and len(head) == 1, [p["metadata"]["name"] for p in pods]
        assert not head[0]["spec"].get("resourceClaims"), head[0]["spec"].get("resourceClaims")

        claims = {
            c["metadata"]["name"]: c
            for c in cluster.get_json("resourceclaims", "-n", namespace)["items"]
        }
        devices = set()
        for pod in workers:
            name = pod["metadata"]["name"]
            (status,) = pod["status"]["resourceClaimStatuses"]
            assert status["name"] == "nic", status
            claim = claims[status["resourceClaimName"]]
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert (result["driver"], result["pool"]) == (DRA_DRIVER, NODE), result
            devices.add(result["device"])
            assert name in {r["name"] for r in claim["status"]["reservedFor"]}, claim["status"]
            env = cluster.kubectl(
                "exec", name, "-n", namespace, "-c", "ray-worker", "--",
                "printenv", "user_NCCL_IB_HCA", "admin_fabric",
            ).stdout.split()  # fmt: skip
            assert env == ["mlx5_0", "realnode"], (name, env)
        assert len(devices) == 2, devices  # a device each

        done = wait_condition(cluster, namespace, "dra", "Succeeded", TRAIN_TIMEOUT)
        assert done["status"]["trainerStatus"]["epoch"] == DRA_EPOCHS - 1
    finally:
        cluster.kubectl("delete", "trainjob", "dra", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", "deviceclass", device_class, "--ignore-not-found", check=False)


# Long enough that the second worker comes up while the job trains (the autoscaler acts within
# seconds of Ray Train's resource request; Ray Train resizes after 60 s).
ELASTIC_EPOCHS = 30


def test_rays_autoscaler_scales_an_elastic_job_under_the_runtime_scope_policy(
    real_world: RealWorld, namespace: str
) -> None:
    """`scaling.minWorkers: 1, maxWorkers: 2`: KubeRay starts one worker and Ray's autoscaler in
    the head pod. Ray Train asks for two workers; the autoscaler scales the RayCluster with the
    token of the job's per-job account, which the chart's runtime-scope admission policy (on by
    default) admits for the job's own cluster alone. The second worker starts and the job
    trains to Succeeded."""
    cluster = real_world.cluster
    policies = cluster.get_json("validatingadmissionpolicies")["items"]
    assert [p for p in policies if p["metadata"]["name"].endswith("-runtime-scope")], [
        p["metadata"]["name"] for p in policies
    ]
    for doc in trainjob_on_real_node(DIGITS, name="elastic", epochs=ELASTIC_EPOCHS):
        if doc["kind"] == "TrainJob":
            scaling = doc["spec"]["scaling"]
            del scaling["numWorkers"]
            scaling.update(minWorkers=1, maxWorkers=2)
        cluster.apply(doc, namespace=namespace)

    def raycluster() -> dict[str, Any] | None:
        name = _trainjob(real_world, namespace, "elastic").get("status", {}).get("rayClusterName")
        if not name:
            return None
        obj: dict[str, Any] = cluster.get_json("rayclusters.ray.io", "-n", namespace, name)
        return obj

    first = wait_for(raycluster, timeout=START_TIMEOUT, what="elastic's RayCluster")
    group = first["spec"]["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["maxReplicas"]) == (1, 2), group
    assert first["spec"]["enableInTreeAutoscaling"] is True

    def scaled_up() -> dict[str, Any] | None:
        obj = raycluster()
        return obj if obj and obj["spec"]["workerGroupSpecs"][0]["replicas"] == 2 else None

    wait_for(scaled_up, timeout=START_TIMEOUT, what="Ray's autoscaler to scale elastic to 2")

    def two_workers() -> list[dict[str, Any]] | None:
        pods = _running_ray_pods(real_world, namespace, "elastic") or []
        workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        return workers if len(workers) == 2 else None

    wait_for(two_workers, timeout=START_TIMEOUT, what="two elastic workers Running")
    done = wait_condition(cluster, namespace, "elastic", "Succeeded", TRAIN_TIMEOUT)
    assert done["status"]["trainerStatus"]["epoch"] == ELASTIC_EPOCHS - 1
    head = cluster.get_json(
        "pods", "-n", namespace, "-l", "raytrain.dev/trainjob=elastic,ray.io/node-type=head"
    )["items"]
    if head:
        log = cluster.kubectl(
            "logs", head[0]["metadata"]["name"], "-n", namespace, "-c", "autoscaler", check=False
        ).stdout
        assert "Forbidden" not in log, log[-3000:]


@pytest.mark.long
def test_kueue_admits_an_elastic_jobs_growth_as_a_workload_slice(
    real_world: RealWorld, namespace: str, tmp_path: Path
) -> None:
    """`scaling.kueueWorkloadSlices` in a Kueue queue (Kueue v0.19, its
    ElasticJobsViaWorkloadSlices gate on): Kueue admits the job at one worker. Ray Train asks
    for two; Ray's autoscaler raises the worker group's replicas; Kueue admits a slice of two
    workers and lets the second worker pod, gated until then, be scheduled. The job trains to
    Succeeded in its first attempt."""
    cluster = real_world.cluster
    name = "slices"

    def worker_counts(admitted: bool) -> list[int]:
        found = []
        for w in cluster.get_json("workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
            conditions = (w.get("status") or {}).get("conditions") or []
            if admitted and not any(
                c["type"] == "Admitted" and c["status"] == "True" for c in conditions
            ):
                continue
            found += [p["count"] for p in w["spec"]["podSets"] if p["name"] == "workers"]
        return found

    with running(cluster, namespace, tmp_path, SLICES) as kueue:
        kueue.queues(cpu="8", memory="64Gi")
        try:
            for doc in trainjob_on_real_node(DIGITS, name=name, epochs=ELASTIC_EPOCHS):
                if doc["kind"] == "TrainJob":
                    scaling = doc["spec"]["scaling"]
                    del scaling["numWorkers"]
                    scaling.update(minWorkers=1, maxWorkers=2, kueueWorkloadSlices=True)
                    doc["spec"]["queueName"] = "team"
                cluster.apply(doc, namespace=namespace)

            wait_for(
                lambda: 1 in worker_counts(admitted=True),
                timeout=START_TIMEOUT,
                what="Kueue to admit the first slice, of one worker",
            )
            wait_for(
                lambda: 2 in worker_counts(admitted=True),
                timeout=START_TIMEOUT,
                what="Ray's autoscaler to ask for two workers and Kueue to admit that slice",
            )

            def two_workers() -> list[dict[str, Any]] | None:
                pods = _running_ray_pods(real_world, namespace, name) or []
                workers = [
                    p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
                ]
                return workers if len(workers) == 2 else None

            wait_for(two_workers, timeout=START_TIMEOUT, what="two workers Running")
            done = wait_condition(cluster, namespace, name, "Succeeded", TRAIN_TIMEOUT)
            assert done["status"]["trainerStatus"]["epoch"] == ELASTIC_EPOCHS - 1
            assert done["status"].get("restarts", 0) == 0 and done["status"]["attempt"] == 0
        finally:
            cluster.kubectl("delete", "trainjob", name, "-n", namespace, "--wait=true", check=False)


RESUMABLE = REPO / "examples" / "resumable.yaml"
# Enough epochs (22 steps each per worker, a checkpoint every 5 steps and at each epoch's end)
# that the delete lands mid-training.
RESUMABLE_EPOCHS = 40


@pytest.mark.realpods_faults
@pytest.mark.realpods_mid_epoch
def test_the_resumable_example_goes_on_at_its_saved_batch_after_a_worker_pod_is_deleted(
    real_world: RealWorld, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """examples/resumable.yaml as written (its ReadWriteMany claim on a hostPath volume of the
    real node), a checkpoint every 5 steps: a worker pod deleted mid-training, Ray Train restarts
    the worker group, and the loop goes on at the position of the last checkpoint that reached
    the driver (an epoch and a batch in it), not at an epoch's start or at the beginning.

    The positions come from the attempt's metrics.jsonl on the volume: every report the driver
    registered, in order, each with the position it was trained from (`start_epoch`,
    `start_batch`) and the one it saved (`epoch`, `batch`).
    """
    cluster = real_world.cluster
    share = tmp_path_factory.mktemp("resumable")
    share.chmod(0o777)  # the pods run as uid 1000 (builders/pods.py)
    pv_name = f"{namespace}-resumable"
    cluster.apply(shared_volume(pv_name, share, namespace, "resumable-checkpoints"))
    try:
        for doc in trainjob_on_real_node(RESUMABLE, epochs=RESUMABLE_EPOCHS):
            if not bind_claim(doc, pv_name):
                doc["spec"]["config"]["checkpoint_every"] = 5
                # Paced, so the delete lands while it trains: each report waits only for the
                # runtime's 0.1 s poll, and the bare loop would end in about 25 s.
                doc["spec"]["config"]["step_seconds"] = 0.1
                # One training worker on each worker pod, so the deleted pod holds one.
                doc["spec"]["scaling"]["placementStrategy"] = "SPREAD"
            cluster.apply(doc, namespace=namespace)
        tj = _wait_checkpoint(real_world, namespace, "resumable", 3)
        workers = [
            p
            for p in _ray_pods(real_world, namespace, tj["status"]["rayClusterName"])
            if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
        ]
        cluster.kubectl("delete", "pod", workers[0]["metadata"]["name"], "-n", namespace,
                        "--wait=false")  # fmt: skip

        def after_a_restart() -> tuple[list[dict[str, Any]], list[tuple[int, int]]] | None:
            logs = list(share.glob("*/attempt-0/metrics.jsonl"))
            if not logs:
                return None
            reports = [r["metrics"] for r in _json_lines(logs[0]) if "metrics" in r]
            starts = [(int(r["start_epoch"]), int(r["start_batch"])) for r in reports]
            moved = any(starts[i] != starts[i - 1] for i in range(1, len(starts)))
            return (reports, starts) if moved else None

        # The run is followed until the restarted group has reported, not to its end.
        reports, starts = wait_for(
            after_a_restart,
            timeout=TRAIN_TIMEOUT,
            what="a report of the restarted worker group in metrics.jsonl",
            interval=2.0,
        )
        _assert_same_attempt(real_world, namespace, "resumable", tj)
        assert starts[0] == (0, 0), starts[:3]
        restarts = [i for i in range(1, len(starts)) if starts[i] != starts[i - 1]]
        for i in restarts:
            saved = reports[i - 1]
            # Where the last registered checkpoint stood: the batch after it, in the same
            # epoch, or the next epoch's start when it was the epoch's last.
            assert starts[i] in {
                (int(saved["epoch"]), int(saved["batch"])),
                (int(saved["epoch"]) + 1, 0),
            }, (starts[i], saved)
    finally:
        cluster.kubectl("delete", "trainjob", "--all", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", "pv", pv_name, "--wait=false", check=False)


DIGITS_DATA = REPO / "examples" / "digits-data.yaml"


def test_a_parquet_table_in_minio_is_read_by_ray_data_across_the_worker_pods(
    real_world: RealWorld, namespace: str, tmp_path: Path
) -> None:
    """examples/digits-data.yaml: each worker pod trains on its half of the table."""
    from examples.digits.data import write

    rows = write(str(tmp_path / "digits"))
    prefix = f"tables/{namespace}/digits"
    client = real_world.minio.client()
    for part in sorted((tmp_path / "digits").iterdir()):
        client.upload_file(str(part), BUCKET, f"{prefix}/{part.name}")
    cluster = real_world.cluster
    for doc in trainjob_on_real_node(DIGITS_DATA, epochs=2):
        if doc["kind"] == "TrainJob":
            doc["spec"]["datasets"]["train"]["uri"] = f"s3://{BUCKET}/{prefix}/"
            # The example's 2Gi, not the 1Gi of the other tests: Ray Data's read tasks run in
            # the worker pods beside a training worker (about 0.5 GB), and at 1Gi Ray's memory
            # monitor killed them over and over.
            doc["spec"]["scaling"]["resourcesPerWorker"]["memory"] = "2Gi"
        cluster.apply(doc, namespace=namespace)
    done = wait_condition(
        cluster, namespace, "digits-data", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT
    )
    trainer = done["status"]["trainerStatus"]
    metrics = {m["name"]: float(m["value"]) for m in trainer["metrics"]}
    # Rank 0's report: half the rows (streaming_split(equal=True) drops at most one).
    assert metrics["rows"] in (rows // 2, (rows - 1) // 2), (metrics, rows)
    assert trainer["epoch"] == 1 and metrics["accuracy"] > 0.5, trainer  # chance: 0.1


def test_a_tune_search_runs_two_trials_on_real_pods(real_world: RealWorld, namespace: str) -> None:
    """Two trials, one after the other, each a TorchTrainer on the worker pods.

    Each trial's driver and its TorchTrainer controller run on the head, which advertises no
    CPU; on a 1 GiB worker pod beside a training worker they went over its memory limit.
    """
    cluster = real_world.cluster
    tune = {
        "paramSpace": {"lr": {"grid": [0.05, 0.2]}},
        "numSamples": 1,
        "metric": "accuracy",
        "mode": "max",
        "maxConcurrentTrials": 1,
    }
    for doc in trainjob_on_real_node(DIGITS, name="search", epochs=2, tune=tune):
        cluster.apply(doc, namespace=namespace)
    done = wait_condition(cluster, namespace, "search", "Succeeded", START_TIMEOUT + TRAIN_TIMEOUT)
    trainer = done["status"]["trainerStatus"]
    assert trainer["message"].startswith("best trial of 2: accuracy="), trainer
    assert trainer["step"] == 4, trainer  # 2 trials x 2 epochs, through one reporter


# What another pod tries against a training cluster's head: the dashboard's job API (submitting
# code there runs it on the cluster) and a TCP connection to the GCS. The name is resolved
# first, so an address that cannot be reached is told apart from a name that does not resolve.
INTRUDER = r"""
import json, socket, sys, time, urllib.error, urllib.request
head, patience = sys.argv[1], float(sys.argv[2])
out = {"resolved": False}
try:
    ip = socket.gethostbyname(head)
    out["resolved"] = True
except OSError as exc:
    print("RESULT " + json.dumps(out | {"error": str(exc)}), flush=True)
    sys.exit(0)
def call(request):
    try:
        urllib.request.urlopen(request, timeout=3)
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return "unreachable"
def gcs():
    try:
        socket.create_connection((ip, 6379), timeout=3).close()
        return "open"
    except OSError:
        return "unreachable"
body = json.dumps({"entrypoint": "echo intruder"}).encode()
submit = urllib.request.Request(
    f"http://{ip}:8265/api/jobs/", data=body, headers={"Content-Type": "application/json"}
)
# A policy reaches a new pod's address a few seconds after the pod starts: try until something
# answers or the patience runs out.
deadline = time.monotonic() + patience
while True:
    out |= {"dashboard": call(f"http://{ip}:8265/api/jobs/"), "submit": call(submit), "gcs": gcs()}
    if "unreachable" not in out.values() or time.monotonic() > deadline:
        break
    time.sleep(2)
print("RESULT " + json.dumps(out), flush=True)
"""


#: How long a refused pod keeps trying: well past the time the policy takes to reach a new pod.
INTRUDER_PATIENCE = 40


def _intruder(real_world: RealWorld, name: str, namespace: str, head: str, **labels: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            **ON_REAL_NODE,
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
            "containers": [
                {
                    "name": "intruder",
                    "image": real_world.images.runtime_image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", INTRUDER, head, str(INTRUDER_PATIENCE)],
                    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                }
            ],
        },
    }
    real_world.cluster.apply(pod)


def _intruder_result(cluster: KubeCluster, name: str, namespace: str) -> dict[str, Any]:
    phase = wait_for(
        lambda: (
            p
            if (p := cluster.get_json("pod", name, "-n", namespace)["status"].get("phase"))
            in ("Succeeded", "Failed")
            else None
        ),
        timeout=START_TIMEOUT,
        what=f"the pod {namespace}/{name} to finish",
    )
    logs = cluster.kubectl("logs", name, "-n", namespace).stdout
    assert phase == "Succeeded", logs
    result: dict[str, Any] = json.loads(logs.split("RESULT ", 1)[1].splitlines()[0])
    return result


# What a pod that mounts the host's /proc reads of other tenants' processes: every environment
# entry of every process it may open, hashed, checked against the digest of the one asked for.
HOST_PROC = r"""
import glob, hashlib, json, sys
wanted, seen, opened = sys.argv[1], 0, 0
for path in glob.glob("/host/proc/[0-9]*/environ"):
    try:
        entries = open(path, "rb").read().split(b"\0")
    except OSError:
        continue
    opened += 1
    seen += any(hashlib.sha256(e).hexdigest() == wanted for e in entries)
print("RESULT " + json.dumps({"opened": opened, "found": seen}), flush=True)
"""


def _tenant(cluster: KubeCluster, namespace: str) -> list[str]:
    """A tenant of `namespace` who may use TrainJobs there and nothing more (no pods, no
    Secrets): kubectl's arguments to act as it."""
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "tenant"}}, namespace=namespace)  # fmt: skip
    rules = [
        {"apiGroups": ["raytrain.dev"], "resources": ["trainjobs"],
         "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
        {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["get", "list"]},
    ]  # fmt: skip
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "tenant"}, "rules": rules}  # fmt: skip
    cluster.apply(role, namespace=namespace)
    cluster.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tenant"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
    }, namespace=namespace)  # fmt: skip
    return ["--as", f"system:serviceaccount:{namespace}:tenant"]


def _as(cluster: KubeCluster, who: list[str], namespace: str, obj: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "apply", "--server-side", "--field-manager=tenant", "-n", namespace, *who, "-f", "-",
        input=json.dumps(obj), check=False,
    )  # fmt: skip


def _digits_job(name: str, **spec: Any) -> dict[str, Any]:
    (job,) = [d for d in trainjob_on_real_node(DIGITS, name=name) if d["kind"] == "TrainJob"]
    job["spec"].update(spec)
    return job


def _operator_account(cluster: KubeCluster) -> str:
    deployment = cluster.get_json("deployment", "-n", SYSTEM_NS, "-l", OPERATOR_SELECTOR)
    pod = deployment["items"][0]["spec"]["template"]["spec"]
    return f"system:serviceaccount:{SYSTEM_NS}:{pod['serviceAccountName']}"


def _cross_tenant(real_world: RealWorld, a: str, b: str) -> None:
    """Tenant B (who may create TrainJobs in its namespace, nothing more) against tenant A's
    running job: the host's /proc, A's Secrets through the operator, and KubeRay's label."""
    cluster = real_world.cluster
    who = _tenant(cluster, b)
    # A's Secrets: B may not read them, nor may the operator B's jobs go through (the chart's
    # default grants it no Secret at all).
    for account in (who, ["--as", _operator_account(cluster)]):
        can = cluster.kubectl("auth", "can-i", "get", "secrets", "-n", a, *account, check=False)
        assert can.stdout.strip() == "no", (account, can.stdout, can.stderr)

    # The host's /proc: what it would give. A pod that mounts it (made here by the cluster's
    # administrator: B may create no pod) runs as uid 1000 like every TrainJob pod, and reads
    # the environment of A's Ray processes, A's S3 secret key among it.
    (secret,) = [d for d in trainjob_on_real_node(DIGITS) if d["kind"] == "Secret"]
    entry = f"AWS_SECRET_ACCESS_KEY={secret['stringData']['AWS_SECRET_ACCESS_KEY']}"
    digest = hashlib.sha256(entry.encode()).hexdigest()
    proc_volume = {"name": "host-proc", "hostPath": {"path": "/proc"}}
    proc_mount = {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}
    cluster.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "host-proc"},
        "spec": {
            **ON_REAL_NODE, "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True},
            "volumes": [proc_volume],
            "containers": [{
                "name": "read", "image": real_world.images.runtime_image,
                "imagePullPolicy": "Never", "command": ["python", "-c", HOST_PROC, digest],
                "volumeMounts": [proc_mount],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
            }],
        },
    }, namespace=b)  # fmt: skip
    read = _intruder_result(cluster, "host-proc", b)
    assert read["found"] >= 1, read  # the threat is real on this node...
    # ...and a TrainJob is no way to it: B's job with the same volume stalls before anything
    # is created, naming the field and who may grant it.
    snoop = _digits_job("snoop", workerTemplate={
        **ON_REAL_NODE, "volumes": [proc_volume], "volumeMounts": [proc_mount]})  # fmt: skip
    made = _as(cluster, who, b, snoop)
    assert made.returncode == 0, made.stderr
    refused = condition(wait_condition(cluster, b, "snoop", "Stalled", START_TIMEOUT), "Stalled")
    assert refused is not None and refused["reason"] == "OverrideForbidden", refused
    assert refused["message"].startswith(
        "spec.workerTemplate.volumes[0] ('host-proc'): a hostPath volume"
    ), refused
    assert cluster.get_json("rayjobs", "-n", b, *who)["items"] == []

    # KubeRay's label, which every job's NetworkPolicy admits to the dashboard: B cannot put it
    # on its pods (refused at admission, naming the key), and the TrainJob's own labels are not
    # copied to them.
    kuberay = {"app.kubernetes.io/name": "kuberay-operator"}
    labelled = _digits_job("decoy", workerTemplate={**ON_REAL_NODE, "labels": kuberay})
    made = _as(cluster, who, b, labelled)
    assert made.returncode != 0 and "app.kubernetes.io/name" in made.stderr, made.stderr
    decoy = _digits_job("decoy", suspend=True)
    decoy["metadata"]["labels"] = {**decoy["metadata"].get("labels", {}), **kuberay}
    made = _as(cluster, who, b, decoy)
    assert made.returncode == 0, made.stderr

    def suspended_rayjob() -> dict[str, Any] | None:
        items = cluster.get_json("rayjobs", "-n", b, *who)["items"]
        return dict(items[0]) if items else None

    rayjob = wait_for(suspended_rayjob, timeout=START_TIMEOUT, what="decoy's suspended RayJob")
    spec = rayjob["spec"]["rayClusterSpec"]
    templates = [spec["headGroupSpec"]["template"]]
    templates += [g["template"] for g in spec["workerGroupSpecs"]]
    for template in templates:
        labels = template.get("metadata", {}).get("labels", {})
        assert labels.get("app.kubernetes.io/name") != "kuberay-operator", labels


def test_another_tenant_cannot_use_the_training_clusters_head_its_keys_or_the_host(
    real_world: RealWorld, namespace: str
) -> None:
    """Pods of another namespace against a running job's head (its NetworkPolicy, then Ray's
    token), and what another tenant who may create TrainJobs tries (`_cross_tenant`). The job
    trains long enough to outlast every probe: it is still in its first attempt at the end."""
    cluster = real_world.cluster
    _apply_digits(real_world, namespace, "guarded", epochs=4 * FAULT_EPOCHS)
    tj = _wait_checkpoint(real_world, namespace, "guarded", 1)
    head = f"{tj['status']['rayClusterName']}-head-svc.{namespace}.svc.cluster.local"
    policy = cluster.get_json("networkpolicy", "guarded-ray", "-n", namespace)
    assert policy["spec"]["podSelector"] == {"matchLabels": {"raytrain.dev/trainjob": "guarded"}}

    other = f"{namespace[:50]}-other"
    cluster.kubectl("create", "namespace", other)
    # Another team's namespace, opted in like the job's own (conftest.namespace).
    cluster.kubectl("label", "namespace", other, f"{ENABLED_LABEL}=true")
    try:
        wait_for(
            lambda: (
                cluster.kubectl("get", "sa", "default", "-n", other, check=False).returncode == 0
            ),
            timeout=60,
            what=f"the default ServiceAccount in {other}",
        )
        # Three at once: a pod of another namespace, even one that copies the job's label; a
        # pod of the job's namespace that is not the job's; and a pod the job's policy admits
        # (it carries the job's label) but that holds no Ray token.
        _intruder(real_world, "intruder", other, head, **{"raytrain.dev/trainjob": "guarded"})
        _intruder(real_world, "neighbour", namespace, head)
        _intruder(real_world, "impostor", namespace, head, **{"raytrain.dev/trainjob": "guarded"})
        blocked = {"resolved": True, "dashboard": "unreachable", "submit": "unreachable"}
        blocked |= {"gcs": "unreachable"}
        # The job's NetworkPolicy: nothing of another namespace or another job gets through.
        assert _intruder_result(cluster, "intruder", other) == blocked
        assert _intruder_result(cluster, "neighbour", namespace) == blocked
        # Past the policy, Ray's token authentication: the head answers and refuses.
        admitted = _intruder_result(cluster, "impostor", namespace)
        assert admitted == {"resolved": True, "dashboard": 401, "submit": 401, "gcs": "open"}
        # The namespace beside it is another tenant's: what it may try against this job.
        _cross_tenant(real_world, namespace, other)
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
        cluster.kubectl("delete", "pod", "neighbour", "impostor", "-n", namespace, check=False)

    # The probes did not disturb the run: the same attempt still trains.
    _assert_same_attempt(real_world, namespace, "guarded", tj)
    _end(real_world, namespace, "guarded")
