"""The real-pod world for the end-to-end tests: images on the node, MinIO for pods, our chart.

Everything a user's first `helm install` + `kubectl apply` needs, on the real node of the local
cluster (e2e/realnode/): the operator and trainer-runtime images built from our Dockerfile
(e2e/images/build.sh) and imported into the node's containerd; MinIO inside the cluster's
network namespace, reachable from pods as `minio.raytrain-system:9000` (the address
examples/digits.yaml names) through a Service whose endpoint is the node's IP; the operator
installed with our chart and running as a pod under the chart's RBAC.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from _wait import wait_for
from conftest import CLUSTER_SH, REPO, KubeCluster, KubectlError

from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES

NODE = "realnode"
NODE_IP = "10.245.0.1"  # e2e/realnode/node.sh
NODE_TAINT_KEY = "raytrain.dev/real-node"
SYSTEM_NS = "raytrain-system"
RELEASE = "raytrain"
OPERATOR_SELECTOR = "app.kubernetes.io/name=raytrain-operator"
BUCKET = "raytrain"
MINIO_USER, MINIO_PASSWORD = "raytrain", "raytrain-secret"

# What every pod that must run for real carries: the real node's toleration and selector.
ON_REAL_NODE: dict[str, Any] = {
    "tolerations": [{"key": NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"kubernetes.io/hostname": NODE},
}


@dataclass(frozen=True)
class Images:
    operator_archive: Path
    operator_image: str
    runtime_archive: Path
    runtime_image: str
    # The runtime with the framework packages (the Dockerfile's trainer-runtime-frameworks).
    frameworks_archive: Path
    frameworks_image: str


def built_images() -> Images:
    """The archives `make prereqs` built (e2e/images/build.sh, cached by content).

    Only checked here: inside the cluster's network namespace nothing can be downloaded.
    RAYTRAIN_OPERATOR_ARCHIVE, RAYTRAIN_RUNTIME_ARCHIVE and RAYTRAIN_FRAMEWORKS_ARCHIVE name
    archives to use instead (built from another tree, say, while iterating on the tests
    themselves).
    """
    given = (
        os.environ.get("RAYTRAIN_OPERATOR_ARCHIVE"),
        os.environ.get("RAYTRAIN_RUNTIME_ARCHIVE"),
        os.environ.get("RAYTRAIN_FRAMEWORKS_ARCHIVE"),
    )
    if all(given):
        version = subprocess.run(
            ["bash", str(REPO / "e2e" / "images" / "build.sh"), "--check"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        refs = dict(re.findall(r"(\w+_IMAGE)=(\S+)", version))
        return Images(
            operator_archive=Path(str(given[0])),
            operator_image=refs.get("OPERATOR_IMAGE", "docker.io/raytrain/operator:0.1.0"),
            runtime_archive=Path(str(given[1])),
            runtime_image=refs.get("RUNTIME_IMAGE", "docker.io/raytrain/trainer-runtime:0.1.0"),
            frameworks_archive=Path(str(given[2])),
            frameworks_image=refs.get(
                "FRAMEWORKS_IMAGE", "docker.io/raytrain/trainer-runtime-frameworks:0.1.0"
            ),
        )
    proc = subprocess.run(
        ["bash", str(REPO / "e2e" / "images" / "build.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            "the images are not built for this tree (e2e/images/build.sh --check exited "
            f"{proc.returncode}); run `make prereqs` first:\n{proc.stderr[-3000:]}"
        )
    found = dict(re.findall(r"(\w+_(?:ARCHIVE|IMAGE))=(\S+)", proc.stdout))
    return Images(
        operator_archive=Path(found["OPERATOR_ARCHIVE"]),
        operator_image=found["OPERATOR_IMAGE"],
        runtime_archive=Path(found["RUNTIME_ARCHIVE"]),
        runtime_image=found["RUNTIME_IMAGE"],
        frameworks_archive=Path(found["FRAMEWORKS_ARCHIVE"]),
        frameworks_image=found["FRAMEWORKS_IMAGE"],
    )


_IMPORTED: set[tuple[str, str]] = set()
# Imports started ahead (import_ahead): the outcome of each, and the one running now.
_AHEAD: dict[tuple[str, str], Future[None]] = {}
_AHEAD_LOCK = threading.Lock()
_AHEAD_PROC: list[subprocess.Popen[str]] = []


def import_images(images: Images) -> None:
    """Import the operator and runtime archives into the real node's containerd (the
    frameworks image only where a test asks for it: `import_archive`)."""
    for archive in (images.operator_archive, images.runtime_archive):
        import_archive(archive)


def _key(archive: Path) -> tuple[str, str]:
    return os.environ.get("RAYTRAIN_CLUSTER", ""), str(archive)


def _import_now(archive: Path, ahead: bool = False) -> None:
    proc = subprocess.Popen(
        ["bash", str(CLUSTER_SH), "import-image", str(archive)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=ahead,  # stop_imports_ahead ends the whole group
    )
    if ahead:
        _AHEAD_PROC[:] = [proc]
    _, stderr = proc.communicate()
    if proc.returncode != 0:
        raise AssertionError(f"importing {archive} failed:\n{stderr[-3000:]}")
    with _AHEAD_LOCK:
        _IMPORTED.add(_key(archive))


def import_archive(archive: Path) -> None:
    """Import an image archive into the real node's containerd, once per cluster and archive in
    a session: each module of real-pod tests asks, and a runtime image takes minutes. An import
    `import_ahead` started is waited for; should it have failed, the import runs again here."""
    key = _key(archive)
    with _AHEAD_LOCK:
        ahead = _AHEAD.get(key)
    if ahead is not None:
        ahead.exception()  # waits; a failed import ahead is tried again below
    with _AHEAD_LOCK:
        if key in _IMPORTED:
            return
    _import_now(archive)


def import_ahead(archives: list[Path]) -> None:
    """Start importing ``archives``, one after another, in a thread, so that the minutes a
    runtime image takes overlap the tests that need no image; `import_archive` waits for them.
    Used once the real node is up (tests/integration/conftest.py)."""
    todo: list[tuple[Path, Future[None]]] = []
    with _AHEAD_LOCK:
        for archive in archives:
            if _key(archive) not in _AHEAD and _key(archive) not in _IMPORTED:
                _AHEAD[_key(archive)] = future = Future()
                todo.append((archive, future))

    def run() -> None:
        for archive, future in todo:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                _import_now(archive, ahead=True)
            except BaseException as exc:  # recorded; import_archive tries again
                future.set_exception(exc)
            else:
                future.set_result(None)

    threading.Thread(target=run, name="import-ahead", daemon=True).start()


def wait_imports_ahead() -> None:
    """Wait until every import started ahead has ended (a test that stops the node's
    containerd must not cut one short)."""
    with _AHEAD_LOCK:
        futures = list(_AHEAD.values())
    for future in futures:
        if not future.cancelled():
            future.exception()


def stop_imports_ahead() -> None:
    """Cancel the imports not yet started and stop the running one (the session is ending)."""
    with _AHEAD_LOCK:
        futures = list(_AHEAD.values())
    for future in futures:
        future.cancel()
    for proc in _AHEAD_PROC:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()


def assert_node_whole() -> None:
    """Fail at once, saying what is missing, when a process of the real node is not running
    (`cluster.sh status`): without kube-proxy no pod reaches a Service, the API server's
    included, and every real-pod test would fail on a symptom of it."""
    proc = subprocess.run(
        ["bash", str(CLUSTER_SH), "status"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(
            "the local cluster or its real node is not whole (an earlier test that stopped "
            "and restarted the node may have left it so; its failure says why):\n"
            + proc.stdout
            + proc.stderr[-2000:]
        )


def helm_binary() -> str:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "helm.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass
class Minio:
    port: int
    state: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=MINIO_USER,
            aws_secret_access_key=MINIO_PASSWORD,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )

    def keys(self, prefix: str) -> list[str]:
        out: list[str] = []
        for page in (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        ):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return out

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(REPO / "e2e" / "minio" / "stop.sh"), str(self.state)], check=False
        )


def start_minio() -> Minio:
    """MinIO on every address of the cluster's namespace (it exists only there)."""
    assert os.environ.get("RAYTRAIN_NETNS"), "MinIO for pods listens only inside the namespace"
    proc = subprocess.run(
        ["bash", str(REPO / "e2e" / "minio" / "start.sh"), BUCKET],
        env={**os.environ, "MINIO_BIND": "0.0.0.0"},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"e2e/minio/start.sh failed:\n{proc.stderr[-3000:]}")
    fields = dict(re.findall(r"(\w+)=(\S+)", proc.stdout.strip().splitlines()[-1]))
    return Minio(port=int(fields["endpoint"].rsplit(":", 1)[1]), state=Path(fields["state"]))


def expose_minio(cluster: KubeCluster, minio: Minio) -> None:
    """`minio.raytrain-system:9000` for pods: a Service without selector, its endpoint the node."""
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NS}})
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "minio", "namespace": SYSTEM_NS},
            "spec": {"ports": [{"name": "s3", "port": 9000, "targetPort": minio.port}]},
        }
    )
    cluster.apply(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "minio-node",
                "namespace": SYSTEM_NS,
                "labels": {"kubernetes.io/service-name": "minio"},
            },
            "addressType": "IPv4",
            "ports": [{"name": "s3", "port": minio.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
        }
    )


def adopt_crd_for_helm(cluster: KubeCluster) -> None:
    """Mark the CRDs the local cluster created from crds/ as the release's own.

    A user's cluster has no CRD before `helm install`; ours got it at `cluster.sh up` for the
    tests that run without the chart. Helm takes over an existing object only when it carries
    the release's ownership metadata, and then upgrades it from the chart like any other.
    """
    for plural in ("trainjobs", "trainjobtemplates", "clustertrainjobtemplates"):
        crd = f"customresourcedefinition/{plural}.raytrain.dev"
        cluster.kubectl("label", crd, "app.kubernetes.io/managed-by=Helm", "--overwrite")
        cluster.kubectl(
            "annotate", crd, f"meta.helm.sh/release-name={RELEASE}",
            f"meta.helm.sh/release-namespace={SYSTEM_NS}", "--overwrite",
        )  # fmt: skip


def install_chart(
    cluster: KubeCluster, images: Images, extra_values: dict[str, Any] | None = None
) -> None:
    """`helm install` of charts/raytrain-operator, its pod pinned to the real node; the chart's
    defaults but for the image, the placement and `extra_values`."""
    adopt_crd_for_helm(cluster)
    repository, tag = images.operator_image.rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        **ON_REAL_NODE,
        **(extra_values or {}),
    }
    values_file = cluster.kubeconfig.parent / "realpods-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    proc = subprocess.run(
        [
            helm_binary(),
            "upgrade",
            "--install",
            RELEASE,
            str(REPO / "charts" / "raytrain-operator"),
            "--namespace",
            SYSTEM_NS,
            "--create-namespace",
            "--values",
            str(values_file),
            "--wait",
            "--timeout",
            "5m",
            # The CRD's fields belong to cluster.sh's server-side apply (field manager
            # raytrain-cluster) until the chart takes them; when crds/ changed since the cluster
            # came up, helm's apply conflicts with that manager, and the chart's copy must win.
            "--force-conflicts",
        ],
        env=cluster.env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pods = cluster.kubectl("get", "pods", "-n", SYSTEM_NS, "-o", "wide", check=False).stdout
        logs = [
            cluster.kubectl(
                "logs", "-n", SYSTEM_NS, "-l", OPERATOR_SELECTOR, "--tail=40", *previous,
                check=False,
            ).stdout
            for previous in ((), ("--previous",))
        ]  # fmt: skip
        raise AssertionError(
            f"helm install failed ({proc.returncode}): {proc.stderr[-2000:]}\n{pods}\n"
            f"operator log:\n{logs[0]}\nlog of its previous container (if it restarted):\n"
            f"{logs[1]}"
        )


def _host_operators() -> list[str]:
    """Command lines of the operator processes on this host: the pod's own, and any a test
    started and left behind."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"raytrain_operator" in args and b"-m" in args:
            found.append(" ".join(a.decode(errors="replace") for a in args if a))
    return found


class OperatorRestarted(AssertionError):
    """The chart's operator pod restarted while the tests waited on it."""


def _restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses", []))


def operator_restart_check(cluster: KubeCluster) -> Callable[[], None]:
    """A check for ``_wait.guarded``: it raises ``OperatorRestarted`` once a container of the
    chart's operator pod has restarted since this call, naming how it ended and quoting the end
    of its log. Every TrainJob of the real-pod tests waits on that operator, so a crash loop
    would otherwise cost each wait its whole deadline and leave only timeouts to read."""

    def pods() -> list[dict[str, Any]]:
        try:
            return pods_of(cluster, SYSTEM_NS, OPERATOR_SELECTOR)
        except KubectlError:
            return []  # the API server is restarting, say: not the operator's fault

    baseline = {p["metadata"]["name"]: _restarts(p) for p in pods()}

    def check() -> None:
        for pod in pods():
            name = pod["metadata"]["name"]
            restarts = _restarts(pod)
            if restarts <= baseline.get(name, 0):
                continue
            ended = [
                c.get("lastState", {}).get("terminated", {})
                for c in pod.get("status", {}).get("containerStatuses", [])
            ]
            log = cluster.kubectl(
                "logs", "-n", SYSTEM_NS, name, "--previous", "--tail=60", check=False
            )
            # Who else shares the peering object: a live peer of higher priority pauses it.
            peers = cluster.kubectl(
                "get", "clusterkopfpeerings", "-o", "jsonpath={.items[*].status}", check=False
            )
            raise OperatorRestarted(
                f"the operator pod {SYSTEM_NS}/{name} restarted ({restarts} restarts; "
                f"how its container ended: {ended}); the log of the container that ended:\n"
                f"{log.stdout or log.stderr}\npeers: {peers.stdout or peers.stderr}\n"
                f"operator processes on the host: {_host_operators()}"
            )

    return check


def trainjob_on_real_node(
    path: Path, *, name: str | None = None, epochs: int | None = None, **spec: Any
) -> list[dict[str, Any]]:
    """The objects of an example manifest, its TrainJob's pods placed on the real node.

    The cluster's only real node has 2 CPUs, so the head and both workers ask for a quarter of a
    CPU each instead of a whole one. The head keeps the operator's default memory
    (DEFAULT_HEAD_RESOURCES): a test that gave it more would hide a default too small for Ray
    and the driver. Each worker gets 1Gi.
    """
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        if doc.get("kind") != "TrainJob":
            continue
        s = doc["spec"]
        if name:
            doc["metadata"]["name"] = name
        if epochs is not None:
            s.setdefault("config", {})["epochs"] = epochs
        s["scaling"].setdefault("resourcesPerWorker", {}).update(cpu="250m", memory="1Gi")
        head = {kind: dict(amounts) for kind, amounts in DEFAULT_HEAD_RESOURCES.items()}
        head["requests"]["cpu"] = "250m"
        s["head"] = {**ON_REAL_NODE, "resources": head}
        s["workerTemplate"] = dict(ON_REAL_NODE)
        s.update(spec)
    return docs


def bind_claim(doc: dict[str, Any], volume: str) -> bool:
    """Bind an example's PersistentVolumeClaim to the PersistentVolume `volume` (made by
    `shared_volume`; the local cluster has no provisioner). False for any other object."""
    if doc.get("kind") != "PersistentVolumeClaim":
        return False
    doc["spec"]["storageClassName"] = ""
    doc["spec"]["volumeName"] = volume
    return True


def shared_volume(name: str, path: Path, namespace: str, claim: str) -> dict[str, Any]:
    """A ReadWriteMany PersistentVolume on a directory of the real node, reserved for one claim
    (every pod runs on that node, so they share the directory as they would an NFS export)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }


#: The DRA driver the real node runs (e2e/realnode/node.sh) and the devices it offers.
DRA_DRIVER = "dra.realnode.raytrain.dev"


def dra_device_class(name: str, parameters: dict[str, str]) -> dict[str, Any]:
    """A DeviceClass selecting the real node's DRA devices, with opaque ``parameters`` that
    the driver's CDI spec turns into ``admin_<key>`` variables in each container."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}],
            "config": [{"opaque": {"driver": DRA_DRIVER, "parameters": parameters}}],
        },
    }


def pods_of(cluster: KubeCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return items


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c.get("type") == kind:
            return dict(c)
    return None


def wait_condition(
    cluster: KubeCluster, namespace: str, name: str, kind: str, timeout: float
) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        tj = cluster.get_json("trainjob", name, "-n", namespace)
        c = condition(tj, kind)
        if c and c.get("status") == "True":
            return tj
        failed = condition(tj, "Failed")
        if kind != "Failed" and failed and failed.get("status") == "True":
            raise AssertionError(f"TrainJob {name} failed: {json.dumps(tj['status'], indent=1)}")
        return None

    return wait_for(ready, timeout=timeout, what=f"TrainJob {namespace}/{name} {kind}")
