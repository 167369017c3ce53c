"""Kueue's controller manager against the local control plane, for the tests that queue jobs.

e2e/kueue/build.sh builds it (a `make prereqs` step) with the CRDs and webhook manifests of its
release. Here it runs as a process beside the API server, the way KubeRay's operator does in
the local cluster: its webhook server listens on loopback with a certificate made for the run,
and the webhook configurations point the API server at that address instead of at a Service.
They select the test's namespace alone, so that no other test's RayJob waits on Kueue.

Only the Ray integrations are on (RayJob, and RayCluster, whose webhook gates the pods of an
elastic job), with the ElasticJobsViaWorkloadSlices feature gate when asked for.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from _ports import free_port
from _wait import wait_for
from conftest import REPO, KubeCluster

KUEUE_VERSION = "v0.19.2"
BUILD_SH = REPO / "e2e" / "kueue" / "build.sh"
#: The API groups' resources whose webhooks we register: Kueue's own objects and the Ray ones.
RESOURCES = {
    "rayjobs", "rayclusters", "workloads", "clusterqueues", "localqueues", "resourceflavors",
    "cohorts",
}  # fmt: skip
#: Kinds whose webhooks only see the test's namespace.
NAMESPACED_JOBS = {"rayjobs", "rayclusters"}
WEBHOOK_NAMES = ("raytrain-tests-kueue-mutating", "raytrain-tests-kueue-validating")
SLICES = "ElasticJobsViaWorkloadSlices=true"
#: The gate is beta and on by default from Kueue 0.18; a cluster may still turn it off.
NO_SLICES = "ElasticJobsViaWorkloadSlices=false"


def home() -> Path:
    """The cached build (binary, crds/, webhooks.yaml); builds it when missing."""
    proc = subprocess.run(
        ["bash", str(BUILD_SH)], capture_output=True, text=True, check=False, timeout=3600
    )
    if proc.returncode != 0:
        raise AssertionError(f"e2e/kueue/build.sh exited {proc.returncode}:\n{proc.stderr}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _certificate(directory: Path) -> str:
    """A self-signed serving certificate for 127.0.0.1 in `directory` (tls.crt, tls.key, the
    names controller-runtime's webhook server reads); returns it base64-encoded, as a
    caBundle."""
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt"),
        ],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    return base64.b64encode((directory / "tls.crt").read_bytes()).decode()


def _webhooks(source: Path, port: int, ca_bundle: str, namespace: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, narrowed to RESOURCES and pointed at loopback."""
    out = []
    for doc in yaml.safe_load_all(source.read_text()):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            resources = {r for rule in hook.get("rules") or [] for r in rule.get("resources") or []}
            if not resources & RESOURCES:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            if resources & NAMESPACED_JOBS:
                hook["namespaceSelector"] = {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace}
                }
            hook["timeoutSeconds"] = 10
            kept.append(hook)
        mutating = doc["kind"] == "MutatingWebhookConfiguration"
        doc["metadata"] = {"name": WEBHOOK_NAMES[0] if mutating else WEBHOOK_NAMES[1]}
        doc["webhooks"] = kept
        out.append(doc)
    return out


class Kueue:
    """One Kueue controller manager for one test namespace."""

    def __init__(
        self, cluster: KubeCluster, namespace: str, workdir: Path, *, feature_gates: str = ""
    ) -> None:
        self.cluster, self.namespace, self.workdir = cluster, namespace, workdir
        self.feature_gates = feature_gates
        self.log = workdir / "kueue.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster_objects: list[tuple[str, str]] = []

    def start(self) -> None:
        built = home()
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=raytrain-tests",
            "-f", str(built / "crds"),
        )  # fmt: skip
        names = [f"crd/{p.stem.split('_', 1)[1]}.kueue.x-k8s.io" for p in built.glob("crds/*")]
        # A CRD created a moment ago may have no conditions yet, which `kubectl wait` reports
        # as an error rather than waiting.
        wait_for(
            lambda: (
                self.cluster.kubectl(
                    "wait", "--for=condition=Established", "--timeout=10s", *names, check=False
                ).returncode
                == 0
            ),
            timeout=60,
            what="Kueue's CRDs to be Established",
        )
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        ca_bundle = _certificate(certs)
        port, health = free_port(), free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["ray.io/rayjob", "ray.io/raycluster"]},
        }
        config_path = self.workdir / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        gates = ",".join(g for g in ("VisibilityOnDemand=false", self.feature_gates) if g)
        # Without its internal certificate management Kueue reads the metrics server's
        # certificate from a fixed path, /etc/kueue/metrics/certs. It gets one there in a mount
        # namespace of its own, where /etc is an overlay whose upper layer holds only that
        # directory: the host's /etc is not touched.
        upper, scratch = self.workdir / "etc-upper", self.workdir / "etc-work"
        metrics_certs = upper / "kueue" / "metrics" / "certs"
        metrics_certs.mkdir(parents=True, exist_ok=True)
        scratch.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, metrics_certs / name)
        overlay = f"lowerdir=/etc,upperdir={upper},workdir={scratch}"
        command = [
            "unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount -t overlay overlay -o "$0" /etc && exec "$@"', overlay,
            str(built / "kueue"), f"--config={config_path}", f"--feature-gates={gates}",
            "--zap-log-level=3",
        ]  # fmt: skip
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                command,
                env={**self.cluster.env, "NAMESPACE": "kueue-system"},
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self._wait_listening(port)
        hooks = _webhooks(built / "webhooks.yaml", port, ca_bundle, self.namespace)
        self.cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": hooks}),
        )

    def _wait_listening(self, port: int, timeout: float = 120) -> None:
        def listening() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"kueue exited {self.proc.returncode}:\n{self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return False

        wait_for(listening, timeout, f"kueue's webhook server on port {port} (log: {self.log})")

    def apply(self, obj: dict[str, Any]) -> None:
        """Create a Kueue object; cluster-scoped ones are deleted in stop()."""
        self.cluster.kubectl("apply", "-n", self.namespace, "-f", "-", input=json.dumps(obj))
        if obj["kind"] in ("ClusterQueue", "ResourceFlavor"):
            self.cluster_objects.append((obj["kind"].lower(), obj["metadata"]["name"]))

    def queues(self, cpu: str, memory: str = "200Gi") -> None:
        """A ResourceFlavor, a ClusterQueue of `cpu` and `memory` and the LocalQueue `team` in
        the test's namespace."""
        ns = self.namespace
        self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": f"{ns}-flavor"},
            }
        )
        quota = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory}]
        self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": f"{ns}-cq"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [{"name": f"{ns}-flavor", "resources": quota}],
                        }
                    ],
                },
            }
        )
        self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "team", "namespace": ns},
                "spec": {"clusterQueue": f"{ns}-cq"},
            }
        )

    def stop(self) -> None:
        """Remove the webhooks, stop Kueue, then drop the finalizers it leaves on its objects
        (a Workload's would hold the namespace's deletion forever with Kueue gone)."""
        for kind, name in (
            ("mutatingwebhookconfiguration", WEBHOOK_NAMES[0]),
            ("validatingwebhookconfiguration", WEBHOOK_NAMES[1]),
        ):
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        unfinalize = json.dumps({"metadata": {"finalizers": None}})
        listed = self.cluster.kubectl(
            "get", "workloads.kueue.x-k8s.io", "-n", self.namespace, "-o", "name", check=False
        )
        for ref in listed.stdout.split():
            self.cluster.kubectl(
                "patch", ref, "-n", self.namespace, "--type=merge", "-p", unfinalize, check=False
            )
        for kind, name in reversed(self.cluster_objects):
            self.cluster.kubectl(
                "delete", kind, name, "--ignore-not-found", "--wait=false", check=False
            )
            self.cluster.kubectl("patch", kind, name, "--type=merge", "-p", unfinalize, check=False)

    def tail(self, lines: int = 80) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def running(cluster: KubeCluster, namespace: str, workdir: Path, gates: str) -> Iterator[Kueue]:
    """Kueue for the block, with these feature gates; its log's end printed after (pytest shows
    it when the test failed)."""
    kueue = Kueue(cluster, namespace, workdir, feature_gates=gates)
    try:
        kueue.start()
        yield kueue
    finally:
        kueue.stop()
        print(f"--- kueue log ({kueue.log}) ---\n{kueue.tail(150)}")
