"""The operator against the real control plane: KubeRay, KWOK fake GPU nodes, garbage collector.

The operator runs as it does in production (`python -m raytrain_operator`, one process per test,
watching only the test's namespace), so it can also be killed and restarted. Under KWOK, pods
never execute: KubeRay never sees the Ray job finish, and the runtime's report is written here
the way the runtime writes it (a merge patch on the status subresource).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from _ports import free_port
from _wait import wait_for
from conftest import REPO, KubeCluster

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
T_CREATE = 60  # a RayJob, ConfigMap or condition the operator writes
T_KUBERAY = 180  # KubeRay, the scheduler and KWOK bringing pods to Running


def counter(metrics_text: str, name: str, **labels: str) -> float:
    """The sum of the samples of metric `name` whose labels include `labels`."""
    total = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith((name + "{", name + " ")):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Operator:
    """`python -m raytrain_operator --namespace <ns>` as a child process."""

    def __init__(
        self,
        cluster: KubeCluster,
        namespace: str,
        log: Path,
        resync_seconds: float = 2,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.cluster, self.namespace, self.log = cluster, namespace, log
        self.extra_args = extra_args
        self.resync_seconds = resync_seconds
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = 0
        self.metrics_port = 0
        self.offset = 0

    def start(self) -> None:
        self.health_port, self.metrics_port = free_port(), free_port()
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        env = {**self.cluster.env, "RAYTRAIN_PREFLIGHT_RETRY_SECONDS": "2"}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "raytrain_operator",
                    "--namespace", self.namespace,
                    "--health-port", str(self.health_port),
                    "--metrics-port", str(self.metrics_port),
                    "--resync-seconds", str(self.resync_seconds),
                    "--checkpoint-grace-seconds", "20",
                    *self.extra_args,
                ],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
            )  # fmt: skip
        wait_for(self.healthy, timeout=60, what="the operator's /healthz", ignore=(OSError,))

    def healthy(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.tail()
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())

    def kill(self) -> None:
        """SIGKILL: no clean-up, no last patch."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def since_start(self) -> str:
        """The log written by the current process."""
        with self.log.open("rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")

    def tail(self, lines: int = 80) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> None:
    kube_cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=raytrain-tests",
        "-f", str(REPO / "crds"),
    )  # fmt: skip
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/trainjobs.raytrain.dev",
        "crd/trainjobtemplates.raytrain.dev", "crd/clustertrainjobtemplates.raytrain.dev",
        "--timeout=60s",
    )  # fmt: skip


def running_operator(kube_cluster: KubeCluster, namespace: str, log: Path) -> Iterator[Operator]:
    """The operator as a child process for one test, its log printed after (pytest shows it
    only when the test failed). Settings come from os.environ (KubeCluster.env copies it)."""
    op = Operator(kube_cluster, namespace, log)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(f"--- operator log ({op.log}) ---\n{op.tail(200)}")


@pytest.fixture
def operator(
    kube_cluster: KubeCluster, namespace: str, crds: None, tmp_path: Path
) -> Iterator[Operator]:
    yield from running_operator(kube_cluster, namespace, tmp_path / "operator.log")


# ------------------------------------------------------------------------------ helpers


def trainjob(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "image": "raytrain/trainer-runtime:0.1.0",
        "entrypoint": "examples.digits.train:train_loop_per_worker",
        "config": {"epochs": 2},
        "scaling": {"numWorkers": 2, "resourcesPerWorker": {"cpu": "1", "memory": "1Gi"}},
        "storage": {
            "s3": {
                "uri": "s3://raytrain/checkpoints",
                "endpoint": "http://127.0.0.1:9000",
                "region": "us-east-1",
                "credentialsSecret": {"name": f"{name}-s3"},
            }
        },
    }
    base.update(spec)
    return {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "labels": {"team": "vision", "app.kubernetes.io/instance": "argo"},
        },
        "spec": base,
    }


def secret(
    name: str, keys: tuple[str, ...] = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {k: "sentinel-not-a-real-value" for k in keys},
    }


def pvc(name: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}},
    }


def create(cluster: KubeCluster, ns: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(obj))


def get(cluster: KubeCluster, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def names(cluster: KubeCluster, ns: str, kind: str, selector: str) -> list[str]:
    items = cluster.get_json(kind, "-n", ns, "-l", selector)["items"]
    return sorted(i["metadata"]["name"] for i in items)


def condition(cluster: KubeCluster, ns: str, name: str, type_: str) -> dict[str, Any] | None:
    tj = get(cluster, ns, "trainjobs.raytrain.dev", name) or {}
    for cond in (tj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return None


def wait_condition(
    cluster: KubeCluster,
    ns: str,
    name: str,
    type_: str,
    status: str = "True",
    timeout: float = T_CREATE,
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        cond = condition(cluster, ns, name, type_)
        return cond if cond is not None and cond["status"] == status else None

    return wait_for(check, timeout=timeout, what=f"TrainJob {name} condition {type_}={status}")


def runtime_report(
    cluster: KubeCluster, ns: str, name: str, trainer_status: dict[str, Any]
) -> None:
    """What the runtime does: a merge patch of trainerStatus on the status subresource."""
    body = json.dumps({"status": {"trainerStatus": trainer_status}})
    cluster.kubectl(
        "patch",
        "trainjobs.raytrain.dev",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        body,
    )


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def report_running(
    cluster: KubeCluster, ns: str, name: str, attempt: int = 0, **extra: Any
) -> dict[str, Any]:
    """Once KubeRay has submitted attempt `attempt`'s Ray job, report as its runtime would.

    Under KWOK no runtime runs; Running needs a report from the attempt's current cluster
    (written after KubeRay started it) or Ray's own jobStatus, which KWOK never produces.
    """
    wait_for(
        lambda: (
            (get(cluster, ns, "rayjobs.ray.io", f"{name}-{attempt}") or {})
            .get("status", {})
            .get("jobDeploymentStatus")
            == "Running"
        ),
        T_KUBERAY,
        f"RayJob {name}-{attempt} jobDeploymentStatus Running",
    )
    report = {"phase": "Running", "attempt": attempt, "lastUpdatedTime": utc_now(), **extra}
    runtime_report(cluster, ns, name, report)
    return report


def events_of(cluster: KubeCluster, ns: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json(
        "events", "-n", ns, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return items


# ------------------------------------------------------------------------------ tests


def test_trainjob_becomes_a_running_rayjob_on_gpu_nodes(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "digits"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(
        kube_cluster,
        ns,
        trainjob(
            name,
            scaling={
                "numWorkers": 2,
                "useGpu": True,
                "acceleratorType": "NVIDIA-A100-SXM4-80GB",
                "placementStrategy": "SPREAD",
                "resourcesPerWorker": {"cpu": "2", "memory": "4Gi", "gpu": 1},
            },
        ),
    )
    tj = wait_for(
        lambda: get(kube_cluster, ns, "trainjobs.raytrain.dev", name), T_CREATE, "TrainJob"
    )
    rj = wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob digits-0"
    )

    (owner,) = rj["metadata"]["ownerReferences"]
    assert owner["uid"] == tj["metadata"]["uid"] and owner["controller"] is True
    labels = rj["metadata"]["labels"]
    assert labels["raytrain.dev/trainjob"] == name and labels["team"] == "vision"
    assert "app.kubernetes.io/instance" not in labels
    assert rj["spec"]["entrypoint"] == "python -m trainer_runtime"
    assert rj["spec"]["backoffLimit"] == 0 and rj["spec"]["shutdownAfterJobFinishes"] is True
    workers = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert workers["replicas"] == 2
    limits = workers["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits[GPU] == "1"

    cm = get(kube_cluster, ns, "configmap", f"{name}-contract")
    assert cm is not None
    contract = json.loads(cm["data"]["contract.json"])
    assert contract["runName"] == f"{name}-{tj['metadata']['uid'].replace('-', '')[:12]}"
    assert "sentinel" not in json.dumps(rj) + json.dumps(cm)
    for kind in ("serviceaccount", "role", "rolebinding"):
        assert get(kube_cluster, ns, kind, f"{name}-runtime") is not None, kind

    # KubeRay makes the RayCluster; the scheduler binds its pods to fake GPU nodes; KWOK runs them.
    def running_pods() -> list[dict[str, Any]] | None:
        ray = f"raytrain.dev/trainjob={name},raytrain.dev/role in (head,worker)"
        pods = kube_cluster.get_json("pods", "-n", ns, "-l", ray)["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 3 and len(ok) == 3 else None

    pods = wait_for(running_pods, T_KUBERAY, "head + 2 worker pods Running")
    for pod in pods:
        assert pod["spec"]["nodeName"].startswith("gpu-node-"), pod["spec"]["nodeName"]
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == f"{name}-s3"
        assert any(
            m["mountPath"] == "/etc/raytrain" for m in pod["spec"]["containers"][0]["volumeMounts"]
        )
    roles = sorted(p["metadata"]["labels"]["raytrain.dev/role"] for p in pods)
    assert roles == ["head", "worker", "worker"]
    for pod in pods:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["RAYTRAIN_ATTEMPT"]["value"] == "0"
        assert env["RAYTRAIN_RAYJOB"]["value"] == f"{name}-0"
        assert env["RAYTRAIN_RAYCLUSTER"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['ray.io/cluster']"
        )

    report_running(kube_cluster, ns, name)
    wait_condition(kube_cluster, ns, name, "Running", timeout=T_KUBERAY)
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert status["phase"] == "Running"
    assert status["rayJobName"] == f"{name}-0"
    assert status["rayClusterName"].startswith(f"{name}-0-")
    assert status["observedGeneration"] == tj["metadata"]["generation"]
    assert all(
        c["observedGeneration"] == tj["metadata"]["generation"] for c in status["conditions"]
    )
    assert "Reconciling" not in {c["type"] for c in status["conditions"]}
    # Worker counts come from the RayCluster itself: under KWOK, KubeRay never reaches a Ray
    # dashboard and stops refreshing the RayJob's copy of them.
    wait_for(
        lambda: (
            (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})
            .get("status", {})
            .get("workers")
            == {"desired": 2, "ready": 2}
        ),
        T_KUBERAY,
        "status.workers 2/2 ready",
    )
    kube_cluster.kubectl(
        "wait",
        "--for=condition=Running",
        f"trainjob.raytrain.dev/{name}",
        "-n",
        ns,
        "--timeout=10s",
    )

    events = kube_cluster.get_json(
        "events", "-n", ns, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    assert {"RayJobCreated", "RayJobRunning"} <= {e["reason"] for e in events}
    text = operator.metrics()
    assert 'raytrain_trainjobs{phase="Running"} 1.0' in text
    # the RayJob is read from the watch-fed index, not from the API server on every pass
    assert index_lookups(text) > 0


def index_lookups(metrics_text: str) -> float:
    for line in metrics_text.splitlines():
        if line.startswith('raytrain_rayjob_lookups_total{source="index"}'):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_runtime_report_decides_the_outcome_and_ttl_cleans_up(
    kube_cluster: KubeCluster, namespace: str, operator: Operator, outcome: str
) -> None:
    ns, name = namespace, "report"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name, ttlSecondsAfterFinished=2))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    wait_condition(kube_cluster, ns, name, "Created")

    report = {
        "phase": outcome,
        "attempt": 0,
        "message": f"training {outcome.lower()}",
        "progressPercentage": 100,
    }
    runtime_report(kube_cluster, ns, name, report)
    cond = wait_condition(kube_cluster, ns, name, outcome)
    if outcome == "Succeeded":
        assert cond["message"] == "training succeeded"
    else:
        # A failure the runtime reports without an exception is not classified further: the
        # attempt's class is Unknown, and the runtime's words follow it.
        assert cond["reason"] == "Unknown", cond
        assert cond["message"].startswith("attempt 0 failed (Unknown): training failed"), cond
    kube_cluster.kubectl(
        "wait",
        f"--for=condition={outcome}",
        f"trainjob.raytrain.dev/{name}",
        "-n",
        ns,
        "--timeout=10s",
    )

    def children_gone() -> bool:
        return (
            names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == []
            and get(kube_cluster, ns, "configmap", f"{name}-contract") is None
            and get(kube_cluster, ns, "serviceaccount", f"{name}-runtime") is None
            and get(kube_cluster, ns, "role", f"{name}-runtime") is None
            and get(kube_cluster, ns, "rolebinding", f"{name}-runtime") is None
        )

    wait_for(children_gone, T_CREATE, "children deleted after ttlSecondsAfterFinished")
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert status["phase"] == outcome and status["completionTime"]
    assert status["trainerStatus"] == report  # the operator never overwrites the runtime's field
    # a finished job is not re-run although its RayJob is gone
    wait_for(
        lambda: (
            (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})
            .get("metadata", {})
            .get("annotations", {})
            .get("raytrain.dev/children-deleted")
        ),
        T_CREATE,
        "the clean-up mark",
    )
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == []


def test_suspend_and_resume(kube_cluster: KubeCluster, namespace: str, operator: Operator) -> None:
    ns, name = namespace, "pause"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name))
    report_running(kube_cluster, ns, name)
    wait_condition(kube_cluster, ns, name, "Running", timeout=T_KUBERAY)
    pods = f"raytrain.dev/trainjob={name}"
    ray = f"{pods},raytrain.dev/role in (head,worker)"  # KubeRay's submitter pod aside
    assert len(names(kube_cluster, ns, "pods", ray)) == 3

    kube_cluster.kubectl(
        "patch",
        "trainjobs.raytrain.dev",
        name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"suspend":true}}',
    )
    wait_condition(kube_cluster, ns, name, "Suspended")
    wait_condition(kube_cluster, ns, name, "Running", "False")
    # KubeRay removes the Ray cluster of a suspended RayJob
    wait_for(lambda: names(kube_cluster, ns, "pods", pods) == [], T_KUBERAY, "Ray pods gone")
    rj = wait_for(
        lambda: (
            (r := get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"))
            and r["spec"].get("suspend")
            and r
        ),
        T_CREATE,
        "RayJob suspended",
    )
    assert rj["metadata"]["annotations"]["raytrain.dev/suspended-by-user"] == "true"
    assert (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"][
        "phase"
    ] == "Suspended"

    kube_cluster.kubectl(
        "patch",
        "trainjobs.raytrain.dev",
        name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"suspend":false}}',
    )
    wait_condition(kube_cluster, ns, name, "Suspended", "False")
    wait_for(
        lambda: (
            (r := get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"))
            and not r["spec"].get("suspend")
        ),
        T_CREATE,
        "RayJob resumed",
    )
    # A new Ray cluster comes up for the same RayJob (same run name: it resumes). The report
    # from before the suspend is from the old cluster: until the new one's runtime reports,
    # the job is not Running, however far KubeRay has got.
    wait_for(
        lambda: (
            (get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {})
            .get("status", {})
            .get("jobDeploymentStatus")
            == "Running"
        ),
        T_KUBERAY,
        "the resumed RayJob Running in KubeRay's words",
    )
    not_yet = wait_condition(kube_cluster, ns, name, "Reconciling")
    assert not_yet["reason"] in ("Starting", "ClusterStarting", "Initializing"), not_yet
    wait_for(
        lambda: (
            (condition(kube_cluster, ns, name, "Reconciling") or {}).get("reason") == "Starting"
        ),
        T_CREATE,
        "Reconciling=Starting (the job submitted, no report from the new cluster yet)",
    )
    assert (condition(kube_cluster, ns, name, "Running") or {})["status"] == "False"
    report_running(kube_cluster, ns, name)
    wait_condition(kube_cluster, ns, name, "Running", timeout=T_KUBERAY)
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [
        f"{name}-0"
    ]


def test_suspend_waits_for_the_runtimes_checkpoint(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "ckpt"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name))
    report_running(kube_cluster, ns, name)
    wait_condition(kube_cluster, ns, name, "Running", timeout=T_KUBERAY)

    kube_cluster.kubectl(
        "patch",
        "trainjobs.raytrain.dev",
        name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"suspend":true}}',
    )
    requested = wait_for(
        lambda: (
            (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["metadata"]
            .get("annotations", {})
            .get("raytrain.dev/checkpoint-requested")
        ),
        T_CREATE,
        "the checkpoint request annotation",
    )
    assert not (get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {})["spec"].get("suspend")
    # the runtime saw the request and saved a checkpoint
    runtime_report(
        kube_cluster, ns, name,
        {"phase": "Running", "attempt": 0, "checkpointing": False, "lastUpdatedTime": requested},
    )  # fmt: skip
    wait_for(
        lambda: (get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {})["spec"].get("suspend"),
        T_CREATE,
        "RayJob suspended after the checkpoint",
    )
    wait_condition(kube_cluster, ns, name, "Suspended")


def test_delete_garbage_collects_the_children(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "gone"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    kube_cluster.kubectl("delete", "trainjobs.raytrain.dev", name, "-n", ns, "--timeout=60s")

    def gone() -> bool:
        return all(
            get(kube_cluster, ns, kind, child) is None
            for kind, child in [
                ("rayjobs.ray.io", f"{name}-0"),
                ("configmap", f"{name}-contract"),
                ("serviceaccount", f"{name}-runtime"),
                ("role", f"{name}-runtime"),
                ("rolebinding", f"{name}-runtime"),
            ]
        )

    wait_for(gone, T_KUBERAY, "the garbage collector to remove every child")


def test_restart_mid_reconcile_makes_no_duplicate(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "restart"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name))
    # kill as soon as the RayJob exists: the status may not be written yet
    wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"),
        T_CREATE,
        "RayJob",
        interval=0.05,
    )
    operator.kill()
    operator.start()
    wait_condition(kube_cluster, ns, name, "Created")
    wait_for(
        lambda: (
            counter(operator.metrics(), "raytrain_reconciles_total", handler="resume")
            + counter(operator.metrics(), "raytrain_reconciles_total", handler="create")
        ),
        T_CREATE,
        "the restarted operator to handle the TrainJob",
    )
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert status["attempt"] == 0
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [
        f"{name}-0"
    ]
    assert names(kube_cluster, ns, "configmaps", f"raytrain.dev/trainjob={name}") == [
        f"{name}-contract"
    ]


PREFLIGHT = {
    "missing-pvc": ("StorageNotFound", "spec.storage.pvc.claimName"),
    "rwo-pvc": ("StorageNotShared", "ReadWriteMany"),
    "missing-secret": ("CredentialsNotFound", "spec.storage.s3.credentialsSecret.name"),
    "missing-key": ("CredentialsIncomplete", "AWS_SECRET_ACCESS_KEY"),
    "missing-claim-template": (
        "ResourceClaimNotFound",
        "spec.workerTemplate.resourceClaims[0].resourceClaimTemplateName: "
        "ResourceClaimTemplate 'nic' does not exist",
    ),
}
#: A pod's DRA claim, one per worker pod (resource.k8s.io/v1).
CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "nic"},
    "spec": {
        "spec": {"devices": {"requests": [{"name": "port", "exactly": {"deviceClassName": "nic"}}]}}
    },
}


@pytest.mark.parametrize("case", sorted(PREFLIGHT))
def test_preflight_stalls_without_a_rayjob_until_fixed(
    kube_cluster: KubeCluster, namespace: str, operator: Operator, case: str
) -> None:
    ns, name = namespace, "pre"
    reason, words = PREFLIGHT[case]
    if case.endswith("pvc"):
        if case == "rwo-pvc":
            create(kube_cluster, ns, pvc("ckpt", "ReadWriteOnce"))
        create(kube_cluster, ns, trainjob(name, storage={"pvc": {"claimName": "ckpt"}}))
    elif case == "missing-claim-template":
        create(kube_cluster, ns, secret(f"{name}-s3"))
        claims = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
        create(kube_cluster, ns, trainjob(name, workerTemplate={"resourceClaims": claims}))
    else:
        if case == "missing-key":
            create(kube_cluster, ns, secret(f"{name}-s3", keys=("AWS_ACCESS_KEY_ID",)))
        create(kube_cluster, ns, trainjob(name))

    stalled = wait_condition(kube_cluster, ns, name, "Stalled")
    assert stalled["reason"] == reason
    assert words in stalled["message"]
    assert "sentinel" not in stalled["message"]
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert status["phase"] == "Stalled"
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == []

    # fix it
    if case.endswith("pvc"):
        kube_cluster.kubectl(
            "delete", "pvc", "ckpt", "-n", ns, "--ignore-not-found", "--timeout=60s"
        )
        create(kube_cluster, ns, pvc("ckpt", "ReadWriteMany"))
    elif case == "missing-key":
        kube_cluster.kubectl("delete", "secret", f"{name}-s3", "-n", ns)
        create(kube_cluster, ns, secret(f"{name}-s3"))
    elif case == "missing-claim-template":
        create(kube_cluster, ns, CLAIM_TEMPLATE)
    else:
        create(kube_cluster, ns, secret(f"{name}-s3"))
    wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"),
        T_CREATE,
        "RayJob after the fix",
    )
    wait_for(
        lambda: condition(kube_cluster, ns, name, "Stalled") is None, T_CREATE, "Stalled removed"
    )
    if case.endswith("pvc"):
        rj = get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {}
        vols = rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"]
        assert {"name": "raytrain-storage", "persistentVolumeClaim": {"claimName": "ckpt"}} in vols
    if case == "missing-claim-template":
        rj = get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {}
        (group,) = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"]
        assert group["template"]["spec"]["resourceClaims"] == [
            {"name": "nic", "resourceClaimTemplateName": "nic"}
        ]


def attempt_pods(cluster: KubeCluster, ns: str, name: str, attempt: int) -> list[str]:
    return names(
        cluster, ns, "pods", f"raytrain.dev/trainjob={name},raytrain.dev/attempt={attempt}"
    )


def test_failed_attempt_is_retried_with_a_new_rayjob_until_the_backoff_limit(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "retry"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name, backoffLimit=1))
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    run_name = json.loads(
        (get(kube_cluster, ns, "configmap", f"{name}-contract") or {})["data"]["contract.json"]
    )["runName"]
    # attempt 0 has a cluster whose pods must be gone before attempt 1 starts
    wait_for(
        lambda: len(attempt_pods(kube_cluster, ns, name, 0)) >= 3, T_KUBERAY, "attempt 0's pods"
    )

    runtime_report(kube_cluster, ns, name, {"phase": "Failed", "attempt": 0, "message": "OOM"})
    wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-1"),
        T_KUBERAY,
        "RayJob -1",
        interval=0.1,
    )
    # The attempts never overlap: by the time RayJob -1 exists, -0 and its pods are gone.
    assert get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None
    assert attempt_pods(kube_cluster, ns, name, 0) == []
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert (status["attempt"], status["restarts"]) == (1, 1)
    contract = json.loads(
        (get(kube_cluster, ns, "configmap", f"{name}-contract") or {})["data"]["contract.json"]
    )
    assert contract["attempt"] == 1 and contract["runName"] == run_name
    assert condition(kube_cluster, ns, name, "Failed")["status"] == "False"  # type: ignore[index]
    events = {e["reason"] for e in events_of(kube_cluster, ns, name)}
    assert "StoppingPreviousAttempt" in events, events

    # A status that says attempt 0 again (a lost patch, a pass with an old snapshot) must not
    # bring RayJob -0 back beside -1: the attempt follows the RayJobs that exist.
    kube_cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", name, "-n", ns, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"attempt": 0, "rayJobName": f"{name}-0"}}),
    )  # fmt: skip
    wait_for(
        lambda: (
            (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]["attempt"] == 1
        ),
        T_CREATE,
        "the operator to put the attempt back to 1",
    )
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [
        f"{name}-1"
    ]

    runtime_report(kube_cluster, ns, name, {"phase": "Failed", "attempt": 1, "message": "OOM"})
    failed = wait_condition(kube_cluster, ns, name, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and "OOM" in failed["message"]
    assert names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [
        f"{name}-1"
    ]


def test_a_spec_edit_to_a_running_job_waits_for_the_next_attempt(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "edit"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name))
    report_running(kube_cluster, ns, name)
    wait_condition(kube_cluster, ns, name, "Running", timeout=T_KUBERAY)
    first = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
    gen1 = first["metadata"]["generation"]
    wait_for(
        lambda: (
            (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"].get(
                "observedGeneration"
            )
            == gen1
        ),
        T_CREATE,
        "generation 1 observed",
    )

    edit = {"spec": {"scaling": {"numWorkers": 4}, "config": {"epochs": 5}}}
    kube_cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", name, "-n", ns, "--type=merge", "-p", json.dumps(edit)
    )
    pending = wait_condition(kube_cluster, ns, name, "Reconciling")
    wait_for(
        lambda: (
            (condition(kube_cluster, ns, name, "Reconciling") or {}).get("reason")
            == "SpecChangePending"
        ),
        T_CREATE,
        "Reconciling=SpecChangePending",
    )
    pending = condition(kube_cluster, ns, name, "Reconciling") or {}
    tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
    gen2 = tj["metadata"]["generation"]
    assert gen2 == gen1 + 1
    # kstatus: observedGeneration behind metadata.generation, and Reconciling True: InProgress
    assert tj["status"]["observedGeneration"] == gen1
    assert pending["observedGeneration"] == gen2
    assert "spec.scaling" in pending["message"] and "spec.config" in pending["message"]
    assert (condition(kube_cluster, ns, name, "Running") or {})["status"] == "True"
    rj = get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {}
    assert rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert "SpecChangePending" in {e["reason"] for e in events_of(kube_cluster, ns, name)}

    # Suspend (applied at once) and resume: the next attempt carries the change.
    kube_cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", name, "-n", ns, "--type=merge", "-p",
        '{"spec":{"suspend":true}}',
    )  # fmt: skip
    requested = wait_for(
        lambda: (
            (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["metadata"]
            .get("annotations", {})
            .get("raytrain.dev/checkpoint-requested")
        ),
        T_CREATE,
        "the checkpoint request",
    )
    runtime_report(
        kube_cluster, ns, name,
        {"phase": "Running", "attempt": 0, "checkpointing": False, "lastUpdatedTime": requested},
    )  # fmt: skip
    wait_condition(kube_cluster, ns, name, "Suspended")
    kube_cluster.kubectl(
        "patch", "trainjobs.raytrain.dev", name, "-n", ns, "--type=merge", "-p",
        '{"spec":{"suspend":false}}',
    )  # fmt: skip
    rj1 = wait_for(
        lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-1"), T_KUBERAY, "RayJob -1"
    )
    assert get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None
    assert rj1["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 4
    report_running(kube_cluster, ns, name, attempt=1)
    wait_condition(kube_cluster, ns, name, "Running", timeout=T_KUBERAY)
    wait_for(
        lambda: condition(kube_cluster, ns, name, "Reconciling") is None,
        T_CREATE,
        "Reconciling gone",
    )
    tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
    assert tj["status"]["observedGeneration"] == tj["metadata"]["generation"]
    assert tj["status"]["restarts"] == 0 and tj["status"]["attempt"] == 1


def test_active_deadline_deletes_the_rayjob_and_fails(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "late"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name, activeDeadlineSeconds=3))
    failed = wait_condition(kube_cluster, ns, name, "Failed", timeout=T_KUBERAY)
    assert failed["reason"] == "DeadlineExceeded"
    assert "activeDeadlineSeconds" in failed["message"]
    status = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
    assert status["startTime"] and status["completionTime"] and status["phase"] == "Failed"
    wait_for(
        lambda: names(kube_cluster, ns, "rayjobs.ray.io", f"raytrain.dev/trainjob={name}") == [],
        T_CREATE,
        "the RayJob deleted",
    )


def test_a_foreign_object_with_a_child_name_stalls_and_is_left_alone(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "taken"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-contract"},
        "data": {"mine": "yes"},
    }
    create(kube_cluster, ns, foreign)
    create(kube_cluster, ns, trainjob(name))
    stalled = wait_condition(kube_cluster, ns, name, "Stalled")
    assert stalled["reason"] == "NameConflict"
    assert f"ConfigMap named {name}-contract" in stalled["message"]
    assert (get(kube_cluster, ns, "configmap", f"{name}-contract") or {})["data"] == {"mine": "yes"}

    kube_cluster.kubectl("delete", "configmap", f"{name}-contract", "-n", ns)
    wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    wait_for(lambda: condition(kube_cluster, ns, name, "Stalled") is None, T_CREATE, "unstalled")


@pytest.mark.parametrize("example", ["digits.yaml", "digits-pvc.yaml", "digits-s3.yaml"])
def test_every_example_becomes_a_rayjob(
    kube_cluster: KubeCluster, namespace: str, operator: Operator, example: str
) -> None:
    text = (REPO / "examples" / example).read_text()
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=text)
    name = next(d["metadata"]["name"] for d in yaml.safe_load_all(text) if d["kind"] == "TrainJob")
    rj = wait_for(
        lambda: get(kube_cluster, namespace, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob"
    )
    assert rj["metadata"]["labels"]["raytrain.dev/trainjob"] == name
    if example == "digits-pvc.yaml":
        # the claim has no provisioner here, so its pods cannot start: only the RayJob is checked
        return
    report_running(kube_cluster, namespace, name)
    wait_condition(kube_cluster, namespace, name, "Running", timeout=T_KUBERAY)


def test_elastic_job_runs_with_the_in_tree_autoscaler(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "elastic"
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, trainjob(name, scaling={"minWorkers": 1, "maxWorkers": 3}))
    rj = wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    cluster = rj["spec"]["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is True
    group = cluster["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["maxReplicas"]) == (1, 3)
    report_running(kube_cluster, ns, name)
    wait_condition(kube_cluster, ns, name, "Running", timeout=T_KUBERAY)
    heads = kube_cluster.get_json(
        "pods", "-n", ns, "-l", f"raytrain.dev/trainjob={name},raytrain.dev/role=head"
    )["items"]
    assert len(heads) == 1
    containers = [c["name"] for c in heads[0]["spec"]["containers"]]
    assert "autoscaler" in containers, containers
