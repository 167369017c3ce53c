"""`make demo` on real pods, run the way the README says, and a demo that fails part-way.

`bash scripts/demo.sh` (what `make demo` runs once its builds are done) with nothing set: its
default mode (the real node), cluster name (raytrain-demo), namespace and HOME. It creates its
own network namespace (e2e/netns/run.sh, as from a user's shell), starts a cluster and a real
node, trains examples/digits.yaml and stops everything. The tests check what the user sees and
that nothing of the demo is left: no process in its network namespace or naming its state dir
(etcd, the API server, KubeRay, containerd, the kubelet, MinIO...), no state dir, no sockets dir,
no namespace.

One real node per machine: scripts/test.sh runs this directory in the cluster lane before
tests/integration, whose session starts a real node of its own. The failing demo runs first; the
demo after it is the `up` that must work again.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from _required import required

pytestmark = [pytest.mark.integration, pytest.mark.realnode]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "raytrain-demo"  # the demo's default
NAMESPACE = "raytrain-demo"  # the demo's default
CACHE = Path(os.environ.get("RAYTRAIN_CACHE") or Path.home() / ".cache" / "raytrain")
STATE = CACHE / "state" / CLUSTER
KWOK_DIR = CACHE / "state" / "kwok" / "clusters" / CLUSTER
# e2e/realnode/node.sh: the node's sockets dir, /run/raytrain/<hash of its state dir>.
RUN_DIR = (
    Path("/run/raytrain") / hashlib.sha256(f"{STATE / 'realnode'}\n".encode()).hexdigest()[:12]
)
#: What the demo's environment must not carry for it to run with its defaults.
SETTINGS = (
    "RAYTRAIN_NETNS", "RAYTRAIN_CLUSTER", "RAYTRAIN_STATE", "RAYTRAIN_RUN_DIR",
    "RAYTRAIN_KUBECONFIG", "RAYTRAIN_REAL_NODE", "RAYTRAIN_UP_TIMEOUT", "RAYTRAIN_OPERATOR_ARCHIVE",
    "RAYTRAIN_RUNTIME_ARCHIVE", "DEMO_MODE", "DEMO_NAMESPACE", "DEMO_EPOCHS", "DEMO_KUBECONFIG",
    "KUBECONFIG",
)  # fmt: skip
#: The demo's whole run, cold image import included, on a loaded 2-core machine.
DEMO_DEADLINE = 2400

T = TypeVar("T")
_PAUSE = threading.Event()


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        _PAUSE.wait(0.2)


def _missing_builds() -> list[str]:
    """What `make demo` builds and is not built here (nothing can be built inside the tests'
    network namespace)."""
    checks = {
        "the control plane": ["bash", "e2e/controlplane/build.sh", "--check"],
        "the real node": ["bash", "e2e/realnode/build.sh", "--check"],
        "the operator and runtime images": [
            "bash", "e2e/images/build.sh", "--check", "--only", "operator,trainer-runtime",
        ],
    }  # fmt: skip
    missing = [
        what
        for what, cmd in checks.items()
        if subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False).returncode != 0
    ]
    if not list(CACHE.glob("minio-*/minio")):
        missing.append("MinIO")
    return missing


@pytest.fixture(scope="module")
def demo_ready() -> None:
    """Skip (fail in a required run) where the demo cannot run on real pods."""
    why = None
    if os.geteuid() != 0 or shutil.which("ip") is None:
        why = "the real-node demo needs root and iproute2"
    elif missing := _missing_builds():
        why = f"not built: {', '.join(missing)} (make demo, or make prereqs, builds them)"
    if why:
        if required():
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    for name in ("kubelet",):
        running = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout
        assert not running.strip(), (
            f"a {name} runs on this machine already (pids {running.split()}): one real node per "
            "machine; the demo would refuse to start"
        )


def demo_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    env["PYTHON"] = sys.executable  # as `make demo` passes $(PYTHON)
    env.update(extra)
    return env


@dataclass
class DemoRun:
    pid: int
    returncode: int
    output: str
    netns_inode: int | None
    seconds: float
    log: Path

    def tail(self, n: int = 8000) -> str:
        return f"(whole output: {self.log})\n{self.output[-n:]}"


def run_demo(env: dict[str, str], deadline: float = DEMO_DEADLINE) -> DemoRun:
    """`bash scripts/demo.sh` from the repository, as a user's shell would run it; its output
    kept, and the inode of the network namespace it creates (raytrain-<its pid>)."""
    log = Path(tempfile.mkstemp(prefix="raytrain-demo-test-", suffix=".log")[1])
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "scripts/demo.sh"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        with log.open("w") as f:
            for line in proc.stdout:
                lines.append(line)
                f.write(line)
                f.flush()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # scripts/demo.sh execs e2e/netns/run.sh, which names the namespace after its pid.
    netns = Path(f"/run/netns/raytrain-{proc.pid}")
    inode = None
    try:
        wait_for(lambda: netns.exists() or proc.poll() is not None, 120, f"{netns}")
        if netns.exists():
            inode = netns.stat().st_ino
        proc.wait(timeout=deadline)
    except BaseException:
        # Stopped as a user's Ctrl-C would: the demo must still stop its cluster.
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=600)
        raise
    finally:
        reader.join(timeout=60)
    return DemoRun(
        proc.pid, proc.returncode, "".join(lines), inode, time.monotonic() - started, log
    )


def section(out: str, header: str) -> list[str]:
    """The lines after the demo's step `==> <header>`, up to its next step."""
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if "==> " in line and header in line]
    assert starts, f"the demo printed no step {header!r}"
    body = []
    for line in lines[starts[0] + 1 :]:
        if "==> " in line:
            break
        body.append(line)
    return body


def watch_statuses(out: str) -> list[str]:
    """The STATUS column of `kubectl get rtj digits -w`, in order (empty ones left out)."""
    phases = {"Pending", "Running", "Suspended", "Succeeded", "Failed", "Stalled"}
    rows = [line.split() for line in section(out, "kubectl get rtj digits -w")]
    return [r[1] for r in rows if len(r) >= 2 and r[0] == "digits" and r[1] in phases]


def went_forward_to_succeeded(statuses: list[str]) -> bool:
    order = ["Pending", "Running", "Succeeded"]
    seen = [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]
    steps = [order.index(s) if s in order else -1 for s in seen]
    return seen[-2:] == ["Running", "Succeeded"] and steps == sorted(set(steps)) and -1 not in steps


def leftovers(netns_inode: int | None) -> list[str]:
    """Processes of the demo still running: in its network namespace, or naming its state dir,
    its control plane's directory or its sockets dir."""
    marks = [str(STATE) + "/", str(KWOK_DIR) + "/", str(RUN_DIR) + "/"]
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            net = os.readlink(proc / "ns" / "net")
        except OSError:
            continue  # gone meanwhile
        if not cmdline.strip():
            continue  # a kernel thread or a zombie
        in_netns = netns_inode is not None and net == f"net:[{netns_inode}]"
        if in_netns or any(mark in cmdline for mark in marks):
            found.append(f"{proc.name}: {cmdline[:300]}")
    return found


def remains() -> list[str]:
    """The demo's directories, network namespaces and mounts left on the host."""
    left = [str(p) for p in (STATE, KWOK_DIR, RUN_DIR) if p.exists()]
    mounts = Path("/proc/self/mountinfo").read_text()
    left += [
        f"mount under {p}" for p in (STATE, RUN_DIR) if f" {p}/" in mounts or f" {p} " in mounts
    ]
    return left


def assert_nothing_left(run: DemoRun) -> None:
    assert run.netns_inode is not None, f"the demo created no network namespace:\n{run.tail()}"
    # down has returned when the demo exits: nothing may be left from then on.
    assert leftovers(run.netns_inode) == [], run.tail(3000)
    assert remains() == [], run.tail(3000)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"raytrain-{run.pid}" not in netns.split(), netns


#: Causes a user can meet, each making the demo fail part-way: (environment, the step it fails
#: at, what its message names, how far it got first).
FAILURES = {
    # A mistyped image archive: the whole cluster and its real node run when it fails.
    "a missing image archive": (
        {
            "RAYTRAIN_OPERATOR_ARCHIVE": "/nonexistent/operator.tar",
            "RAYTRAIN_RUNTIME_ARCHIVE": "/nonexistent/trainer-runtime.tar",
        },
        "Importing the operator and trainer-runtime images",
        "/nonexistent/operator.tar",
        "real node up",
    ),
    # Waits of a second: a wait of cluster.sh up times out after the control plane started.
    "a wait that times out": (
        {"RAYTRAIN_UP_TIMEOUT": "1"},
        "Starting the local control plane with a real node",
        "cluster.sh up --real-node exited",
        "starting etcd",
    ),
}


@pytest.mark.parametrize("cause", list(FAILURES))
def test_a_demo_that_fails_part_way_stops_everything_it_started(
    demo_ready: None, cause: str
) -> None:
    """The demo fails at a step, says which and why, exits non-zero, and leaves nothing behind."""
    extra, failed_step, named, reached = FAILURES[cause]
    run = run_demo(demo_env(**extra), deadline=900)
    print(f"the failing demo ({cause}) took {run.seconds:.0f} s; its output: {run.log}")
    assert run.returncode != 0, run.tail()
    # It got part-way: processes had started before it failed.
    assert reached in run.output, run.tail()
    assert f"demo failed at: {failed_step}" in run.output, run.tail()
    assert named in run.output, run.tail()
    assert "Stopping MinIO and the cluster" in run.output, run.tail()
    assert_nothing_left(run)


def test_a_cluster_with_a_real_node_starts_again_after_a_failed_demo(demo_ready: None) -> None:
    """What a failed demo leaves must not stop the next `up` (a stale "another real node", a
    mount or sockets dir): the demo's cluster and real node start and stop again."""
    again = subprocess.run(
        ["bash", "e2e/netns/run.sh", "bash", "-c",
         "bash e2e/controlplane/cluster.sh up --real-node; rc=$?; "
         "bash e2e/controlplane/cluster.sh down; exit $rc"],
        cwd=ROOT, env=demo_env(RAYTRAIN_CLUSTER=CLUSTER), capture_output=True, text=True,
        timeout=900, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-4000:]
    assert "KUBECONFIG=" in again.stdout and "real node up" in again.stderr, again.stderr[-4000:]
    assert leftovers(None) == []
    assert remains() == []


@pytest.mark.timeout(DEMO_DEADLINE + 600)
def test_make_demo_trains_digits_on_real_pods_and_leaves_nothing(demo_ready: None) -> None:
    run = run_demo(demo_env())
    print(f"the demo took {run.seconds:.0f} s (exit {run.returncode}); its output: {run.log}")
    assert run.returncode == 0, run.tail()

    # What the user is shown: the watch goes forward to Succeeded ...
    statuses = watch_statuses(run.output)
    assert went_forward_to_succeeded(statuses), (statuses, run.tail())
    # ... `raytrain get digits` says so ...
    got = "\n".join(section(run.output, "raytrain get digits"))
    assert re.search(rf"^Name:\s+{NAMESPACE}/digits$", got, re.M), got
    assert re.search(r"^Status:\s+Succeeded$", got, re.M), got
    assert re.search(r"^Progress:\s+100%", got, re.M), got
    latest = re.search(r"^Checkpoint:\s+latest (s3://raytrain/checkpoints/\S+)$", got, re.M)
    assert latest, got
    # ... and the checkpoints are listed from the bucket, the latest among them (numToKeep: 2).
    listed = [
        line.strip()
        for line in section(run.output, "Checkpoints in s3://raytrain")
        if line.startswith("s3://raytrain/checkpoints/digits-")
    ]
    assert 1 <= len(listed) <= 2, listed
    assert any(latest.group(1).rstrip("/").rsplit("/", 1)[1] in line for line in listed), (
        latest.group(1),
        listed,
    )
    assert re.search(r"==> Done in \d+ s", run.output), run.tail()
    assert_nothing_left(run)
