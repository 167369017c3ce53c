"""Fixtures for the integration tests: a real local control plane (e2e/controlplane/).

``kube_cluster`` (session) is a running cluster: the one named by ``RAYTRAIN_KUBECONFIG``, or
one started with ``e2e/controlplane/cluster.sh up`` and stopped at the end of the session (keep
it with ``RAYTRAIN_KEEP_CLUSTER=1``). The start happens once, before the first test, outside
any per-test timeout: a cold build of the binaries takes 12-25 minutes on 2 cores.

In a required run (CI, or RAYTRAIN_REQUIRE_ALL=1: tests/_required.py) a failed build or start
fails every test that needs the cluster. Elsewhere, without ``go`` on PATH, those tests are
skipped with a note on how to enable them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from _required import required
from _wait import wait_for

REPO = Path(__file__).resolve().parents[2]
CONTROLPLANE = REPO / "e2e" / "controlplane"
CLUSTER_SH = CONTROLPLANE / "cluster.sh"
HERE = Path(__file__).resolve().parent

ENABLE_HINT = (
    "integration tests need a local control plane: install Go 1.26 (it is built from Go "
    "modules on first use, 12-25 min), or point RAYTRAIN_KUBECONFIG at a running cluster "
    "(`make cluster-up` prints one)"
)


def pinned_versions() -> dict[str, str]:
    """The ``*_VERSION`` pins of e2e/controlplane/versions.sh."""
    text = (CONTROLPLANE / "versions.sh").read_text()
    return dict(re.findall(r"^([A-Z0-9_]+_VERSION)=(\S+)", text, flags=re.M))


def _cache_dir() -> Path:
    return Path(os.environ.get("RAYTRAIN_CACHE") or Path.home() / ".cache" / "raytrain")


def _kubectl_binary(versions: dict[str, str]) -> str:
    """Our own kubectl when it has been built, else the one on PATH."""
    ours = _cache_dir() / "controlplane" / f"k8s-{versions['K8S_VERSION']}" / "kubectl"
    if ours.is_file():
        return str(ours)
    return shutil.which("kubectl") or str(ours)


class KubectlError(subprocess.CalledProcessError):
    """A kubectl call failed; unlike CalledProcessError, the message carries its stderr."""

    def __str__(self) -> str:
        args = " ".join(str(a) for a in self.cmd[1:])
        return f"kubectl {args} exited {self.returncode}: {(self.stderr or '').strip()}"


@dataclass(frozen=True)
class KubeCluster:
    """A running cluster, reached through ``kubeconfig`` with our kubectl."""

    kubeconfig: Path
    kubectl_path: str
    versions: dict[str, str] = field(default_factory=pinned_versions)

    @property
    def env(self) -> dict[str, str]:
        """The environment for a subprocess that should talk to this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig=<ours> *args``; text output; raise on failure if check."""
        cmd = [self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def get_json(self, *args: str) -> Any:
        """``kubectl get *args -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def restart_apiserver(self, down_for: float = 0.0) -> None:
        """Stop the API server and start it again (``cluster.sh restart-apiserver``); returns
        once it is ready. Everything else in the cluster keeps running."""
        proc = subprocess.run(
            ["bash", str(CLUSTER_SH), "restart-apiserver", f"{down_for:g}"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise AssertionError(f"cluster.sh restart-apiserver exited {proc.returncode}:\n"
                                 f"{proc.stderr[-3000:]}")  # fmt: skip

    def apply(self, obj: dict[str, Any] | str, namespace: str | None = None) -> str:
        """Server-side apply one object (a dict, or YAML/JSON text); returns kubectl's output."""
        text = obj if isinstance(obj, str) else json.dumps(obj)
        ns = ["-n", namespace] if namespace else []
        return self.kubectl(
            "apply", "--server-side", "--field-manager=raytrain-tests", *ns, "-f", "-", input=text
        ).stdout


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log at {path}: {exc})"


class _ClusterSession:
    """Starts the cluster once for the session (or finds it), and stops what it started."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.cluster: KubeCluster | None = None
        self.skip_reason: str | None = None
        self.fail_reason: str | None = None
        self.started_here = False
        # Set before prepare() when a selected test is marked `realnode` (see pytest_runtestloop).
        self.real_node = False
        self.log_path = Path(tempfile.gettempdir()) / f"raytrain-cluster-up-{os.getpid()}.log"
        self._prepared = False

    def _say(self, message: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"[kube_cluster] {message}")

    def prepare(self) -> None:
        if self._prepared:
            return
        self._prepared = True
        versions = pinned_versions()
        ci = required()

        given = os.environ.get("RAYTRAIN_KUBECONFIG")
        if given:
            cluster = KubeCluster(Path(given), _kubectl_binary(versions), versions)
            try:
                probe = cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.fail_reason = f"RAYTRAIN_KUBECONFIG is set but kubectl failed: {exc}"
                return
            if probe.returncode != 0:
                self.fail_reason = (
                    f"RAYTRAIN_KUBECONFIG={given} does not reach a ready API server: "
                    f"{probe.stderr.strip()}"
                )
                return
            self.cluster = cluster
            return

        if shutil.which("go") is None:
            if ci:
                self.fail_reason = (
                    "this run is required (CI / RAYTRAIN_REQUIRE_ALL=1) but `go` is not on "
                    f"PATH; {ENABLE_HINT}"
                )
            else:
                self.skip_reason = ENABLE_HINT
            return

        already = subprocess.run(
            ["bash", str(CLUSTER_SH), "status"], capture_output=True, text=True, check=False
        )
        self._say(
            "bringing up the local control plane (seconds when cached; the first build takes "
            f"12-25 min); log: {self.log_path}"
        )
        with self.log_path.open("w") as log:
            # No timeout: the first build is long, and its progress is in the log.
            proc = subprocess.run(
                ["bash", str(CLUSTER_SH), "up"],
                # The audit log of writes: what each operator process sent (test_standby_server.py).
                env={
                    **os.environ,
                    "RAYTRAIN_AUDIT": "1",
                    **({"RAYTRAIN_REAL_NODE": "1"} if self.real_node else {}),
                },
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if proc.returncode != 0:
            self.fail_reason = (
                f"`cluster.sh up` exited {proc.returncode}; last lines of {self.log_path}:\n"
                + _tail(self.log_path)
            )
            # Stop whatever the failed start left running (kept with RAYTRAIN_KEEP_CLUSTER=1).
            self.started_here = already.returncode != 0
            return
        lines = self.log_path.read_text().strip().splitlines()
        last = lines[-1] if lines else ""
        if not last.startswith("KUBECONFIG="):
            self.fail_reason = (
                f"`cluster.sh up` did not print KUBECONFIG=...:\n{_tail(self.log_path)}"
            )
            return
        self.started_here = already.returncode != 0
        self.cluster = KubeCluster(Path(last.split("=", 1)[1]), _kubectl_binary(versions), versions)
        self._say(f"cluster ready: {last}")

    def finish(self) -> None:
        if not self.started_here or os.environ.get("RAYTRAIN_KEEP_CLUSTER") == "1":
            return
        self._say("stopping the local control plane (RAYTRAIN_KEEP_CLUSTER=1 keeps it)")
        with self.log_path.open("a") as log:
            subprocess.run(
                ["bash", str(CLUSTER_SH), "down"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )


_SESSION_KEY = pytest.StashKey[_ClusterSession]()


def pytest_configure(config: pytest.Config) -> None:
    # The markers are registered in pyproject.toml: make test's marker expression names them
    # in a run that does not collect this directory (scripts/test.sh), and --strict-markers
    # refuses a name no loaded file registers.
    config.stash[_SESSION_KEY] = _ClusterSession(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything in this directory is an integration test, marked or not.
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Iterator[None]:
    # Start the cluster here, before the first test, so that no per-test timeout covers the
    # build; and only if a selected test needs it.
    manager = session.config.stash[_SESSION_KEY]
    wanted = any("kube_cluster" in getattr(item, "fixturenames", ()) for item in session.items)
    # A real node starts only inside a network namespace (e2e/netns/run.sh sets RAYTRAIN_NETNS);
    # elsewhere the realnode tests say how to run them, and the rest run without it.
    manager.real_node = bool(os.environ.get("RAYTRAIN_NETNS")) and any(
        item.get_closest_marker("realnode") for item in session.items
    )
    if wanted and not session.config.option.collectonly:
        manager.prepare()
        if manager.real_node and manager.cluster is not None:
            _import_ahead(session.items)
    try:
        return (yield)
    finally:
        if manager.real_node:
            import realpods

            realpods.stop_imports_ahead()
        manager.finish()


#: A real-pod test that runs in the frameworks image carries this attribute (True).
FRAMEWORKS_IMAGE_ATTR = "raytrain_frameworks_image"

_Test = TypeVar("_Test", bound=Callable[..., Any])


def uses_frameworks_image(test: _Test) -> _Test:
    """Mark a real-pod test that runs in the frameworks image: the session imports that image
    ahead too when the test is selected."""
    setattr(test, FRAMEWORKS_IMAGE_ATTR, True)
    return test


def _import_ahead(items: list[pytest.Item]) -> None:
    """Start importing the images the selected real-pod tests run (those that use the
    ``real_world`` fixture) into the real node's containerd, in the background, so that the
    minutes an import takes pass while the tests that need no image run."""
    import realpods

    pods = [item for item in items if "real_world" in getattr(item, "fixturenames", ())]
    if not pods:
        return
    try:
        images = realpods.built_images()
    except AssertionError:
        return  # the real-pod fixture says what is missing
    archives = [images.operator_archive, images.runtime_archive]
    if any(getattr(getattr(i, "function", None), FRAMEWORKS_IMAGE_ATTR, False) for i in pods):
        archives.append(images.frameworks_archive)
    realpods.import_ahead(archives)


@pytest.fixture(scope="session")
def kube_cluster(pytestconfig: pytest.Config) -> KubeCluster:
    """The running cluster (see the module docstring)."""
    manager = pytestconfig.stash[_SESSION_KEY]
    manager.prepare()  # no-op when the session hook already did it
    if manager.fail_reason:
        pytest.fail(manager.fail_reason, pytrace=False)
    if manager.skip_reason:
        pytest.skip(manager.skip_reason)
    assert manager.cluster is not None
    return manager.cluster


@pytest.fixture
def operator_client(kube_cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's own client (raytrain_operator.k8s) on the test cluster, built from its
    kubeconfig instead of ~/.kube, in this test's process."""
    import threading

    import kopf

    from raytrain_operator import k8s

    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None
    endpoint = k8s.endpoint_from(info)
    monkeypatch.setattr(k8s.client, "endpoint", lambda: endpoint)
    monkeypatch.setattr(k8s.client, "_local", threading.local())  # a fresh connection


#: The label of a namespace the chart's operator manages (its default namespaceSelector).
ENABLED_LABEL = "raytrain.dev/enabled"


@pytest.fixture
def namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (with its default ServiceAccount), deleted afterwards.
    It carries the label the chart's namespaceSelector asks for by default, as an
    administrator sets it for a team (docs/install.md): a chart-installed operator manages it."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{base}-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", name)
    kube_cluster.kubectl("label", "namespace", name, f"{ENABLED_LABEL}=true")
    # Pods are refused until the controller-manager has created the default ServiceAccount.
    wait_for(
        lambda: (
            kube_cluster.kubectl(
                "get", "serviceaccount", "default", "-n", name, check=False
            ).returncode
            == 0
        ),
        timeout=60,
        what=f"the default ServiceAccount in namespace {name}",
    )
    try:
        yield name
    finally:
        kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
