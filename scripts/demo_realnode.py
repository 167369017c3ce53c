"""The demo's world on the local cluster, and `make demo` on real pods in it.

    python scripts/demo_realnode.py [demo]   up, digits to Succeeded, down   (make demo)
    python scripts/demo_realnode.py up       the world, left running        (make up)
    python scripts/demo_realnode.py run      digits in the running world
    python scripts/demo_realnode.py down     stop everything `up` started   (make down)

`up`, `run` and `demo` run inside a network namespace of their own (e2e/netns/run.sh; make and
scripts/demo.sh do this), after the builds (`make demo` and `make up` build what they use first:
the control plane, the real node, MinIO, helm and the operator and trainer-runtime images).
The world:

  1. the local control plane with one real node (e2e/controlplane/cluster.sh up --real-node);
  2. the operator and trainer-runtime images imported into the node's containerd;
  3. MinIO as `minio.raytrain-system:9000`, the S3 endpoint examples/digits.yaml names, with the
     bucket `raytrain`;
  4. `helm install` of charts/raytrain-operator: the operator runs as a pod.

`run` (and `demo` after `up`) applies examples/digits.yaml placed on the real node
(scripts/on_real_node.py: its pods ask for a quarter CPU each, so that the head, the submitter
and two workers fit the node; memory as the example and the operator's defaults say), follows
`kubectl get rtj -w` until Succeeded, then shows `raytrain get`, `raytrain logs` and the
checkpoints in the bucket. `down` stops MinIO and the cluster, and the real node leaves the host
as it found it. `demo` stops everything it started whatever happens (a failure at any step, an
interrupt, SIGTERM), and exits non-zero saying which step failed.

It reuses the real-pod test suite's helpers (tests/integration/realpods.py), so the demo and
the tests set up the same world. Environment: RAYTRAIN_CLUSTER (default raytrain-demo),
DEMO_NAMESPACE (default raytrain-demo), DEMO_EPOCHS (default: the example's), and those of
cluster.sh (RAYTRAIN_STATE, RAYTRAIN_UP_TIMEOUT, ...).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conftest import KubeCluster
    from realpods import Images, Minio

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SH = REPO / "e2e" / "controlplane" / "cluster.sh"
DIGITS = REPO / "examples" / "digits.yaml"
CLUSTER = os.environ.get("RAYTRAIN_CLUSTER") or "raytrain-demo"
NAMESPACE = os.environ.get("DEMO_NAMESPACE") or "raytrain-demo"
#: The label of a namespace the chart's operator manages (its default namespaceSelector).
ENABLED = "raytrain.dev/enabled=true"
EPOCHS = int(os.environ["DEMO_EPOCHS"]) if os.environ.get("DEMO_EPOCHS") else None
BUCKET = "raytrain"  # realpods.BUCKET


class DemoFailed(Exception):
    """A step failed; the message says what the user can do."""


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def _helpers() -> None:
    """Put the real-pod suite's helpers on the path (imported only where needed: `down` must work
    without them)."""
    wanted = [str(REPO / "tests" / "integration"), str(REPO / "tests")]  # conftest: the first's
    if sys.path[:2] != wanted:
        sys.path[:0] = wanted


def state_dir() -> Path:
    """cluster.sh's state dir of the cluster (RAYTRAIN_STATE/<cluster>), removed by its down."""
    cache = Path(os.environ.get("RAYTRAIN_CACHE") or Path.home() / ".cache" / "raytrain")
    return Path(os.environ.get("RAYTRAIN_STATE") or cache / "state") / CLUSTER


def world_file() -> Path:
    return state_dir() / "world.json"


def cluster_sh(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAYTRAIN_CLUSTER": CLUSTER}
    return subprocess.run(
        ["bash", str(CLUSTER_SH), *args], env=env, text=True, check=False, **kwargs
    )


def cluster_state() -> str:
    """'running' (the API server, KubeRay and every process of the real node), 'broken' (the
    cluster exists, something of it is not running) or 'absent'."""
    status = cluster_sh("status", capture_output=True)
    if status.returncode == 0:
        return "running"
    return "absent" if "status:     absent" in status.stdout else "broken"


@dataclass
class World:
    cluster: KubeCluster
    minio: Minio


def kubectl_binary() -> str:
    _helpers()
    from conftest import pinned_versions

    cache = Path(os.environ.get("RAYTRAIN_CACHE") or Path.home() / ".cache" / "raytrain")
    version = pinned_versions()["K8S_VERSION"]
    return str(cache / "controlplane" / f"k8s-{version}" / "kubectl")


def demo_images() -> Images:
    """The operator and trainer-runtime archives e2e/images/build.sh made for this tree (only
    checked: nothing is built or downloaded inside the namespace). RAYTRAIN_OPERATOR_ARCHIVE and
    RAYTRAIN_RUNTIME_ARCHIVE name archives to use instead."""
    _helpers()
    import re

    from realpods import Images

    proc = subprocess.run(
        ["bash", str(REPO / "e2e" / "images" / "build.sh"), "--check", "--only",
         "operator,trainer-runtime"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = dict(re.findall(r"(\w+_(?:ARCHIVE|IMAGE))=(\S+)", proc.stdout))
    given = os.environ.get("RAYTRAIN_OPERATOR_ARCHIVE"), os.environ.get("RAYTRAIN_RUNTIME_ARCHIVE")
    if not all(given) and proc.returncode != 0:
        raise DemoFailed(
            "the operator and trainer-runtime images are not built for this tree (make demo and "
            "make up build them first; or run: bash e2e/images/build.sh --only "
            f"operator,trainer-runtime):\n{proc.stderr[-2000:]}"
        )
    return Images(
        operator_archive=Path(given[0] or found["OPERATOR_ARCHIVE"]),
        operator_image=found.get("OPERATOR_IMAGE", "docker.io/raytrain/operator:0.1.0"),
        runtime_archive=Path(given[1] or found["RUNTIME_ARCHIVE"]),
        runtime_image=found.get("RUNTIME_IMAGE", "docker.io/raytrain/trainer-runtime:0.1.0"),
        frameworks_archive=Path(found.get("FRAMEWORKS_ARCHIVE", "/nonexistent")),
        frameworks_image=found.get("FRAMEWORKS_IMAGE", ""),
    )


def save_world(minio: Minio, kubeconfig: Path | None) -> None:
    world_file().parent.mkdir(parents=True, exist_ok=True)
    world_file().write_text(
        json.dumps(
            {
                "minio_state": str(minio.state),
                "minio_port": minio.port,
                "kubeconfig": str(kubeconfig or ""),
                "namespace": NAMESPACE,
            }
        )
    )


def load_world() -> World:
    _helpers()
    from conftest import KubeCluster
    from realpods import Minio

    if cluster_state() != "running" or not world_file().is_file():
        raise DemoFailed(f"the local cluster {CLUSTER} is not up: make up starts it")
    saved = json.loads(world_file().read_text())
    cluster = KubeCluster(Path(saved["kubeconfig"]), kubectl_binary())
    return World(cluster, Minio(port=int(saved["minio_port"]), state=Path(saved["minio_state"])))


#: The step `up` or `run` is at, for the message when it fails.
STEP = ["starting"]


def step(text: str) -> None:
    STEP[0] = text
    say(text)


def up() -> World:
    """The world, from nothing (the caller has checked no cluster of this name runs)."""
    _helpers()
    from conftest import KubeCluster
    from realpods import expose_minio, import_images, install_chart, start_minio

    step(f"Starting the local control plane with a real node (cluster {CLUSTER})")
    started = cluster_sh("up", "--real-node", stdout=subprocess.PIPE)  # its log goes to stderr
    printed = [line.split("=", 1) for line in started.stdout.splitlines() if "=" in line]
    kubeconfig = next((value for key, value in printed if key == "KUBECONFIG"), None)
    if started.returncode != 0 or not kubeconfig:
        raise DemoFailed(f"e2e/controlplane/cluster.sh up --real-node exited {started.returncode}")
    cluster = KubeCluster(Path(kubeconfig), kubectl_binary())
    print(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product").stdout, flush=True)

    step("Importing the operator and trainer-runtime images into the node's containerd")
    print("(the runtime image is several GB: 2 to 4 minutes)", flush=True)
    images = demo_images()
    import_images(images)
    print(f"{images.operator_image}\n{images.runtime_image}", flush=True)

    step(f"MinIO as minio.raytrain-system:9000 (bucket {BUCKET})")
    minio = start_minio()
    save_world(minio, Path(kubeconfig))
    expose_minio(cluster, minio)

    step("helm install raytrain charts/raytrain-operator (the operator runs as a pod)")
    install_chart(cluster, images)
    print(cluster.kubectl("get", "pods", "-n", "raytrain-system", "-o", "wide").stdout, flush=True)

    # The chart's operator manages the namespaces an administrator opted in (its default
    # namespaceSelector): the one `make shell` applies to, and the demo's.
    for namespace in ("default", NAMESPACE):
        step(f"kubectl label namespace {namespace} {ENABLED}")
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        print(cluster.kubectl("label", "namespace", namespace, ENABLED, "--overwrite").stdout,
              end="", flush=True)  # fmt: skip
    return World(cluster, minio)


def _follow_watch(watch: subprocess.Popen[str], seen: threading.Event) -> None:
    """Print the watch's rows as they come; set ``seen`` once a row's STATUS is Succeeded."""
    assert watch.stdout is not None
    for line in watch.stdout:
        print(line, end="", flush=True)
        fields = line.split()
        if len(fields) >= 2 and fields[1] == "Succeeded":
            seen.set()


def raytrain_command() -> list[str]:
    """`raytrain`, the console script installed beside this interpreter (what a user types)."""
    found = shutil.which("raytrain", path=sysconfig.get_path("scripts"))
    return [found] if found else [sys.executable, "-m", "raytrain.cli"]


def run_digits(world: World) -> None:
    """examples/digits.yaml on the real node, followed to Succeeded; what a user looks at next."""
    _helpers()
    from on_real_node import load, on_real_node
    from realpods import wait_condition

    cluster = world.cluster
    step(f"kubectl apply -f examples/digits.yaml -n {NAMESPACE} (placed on the real node)")
    key, value = ENABLED.split("=")
    namespace = {"name": NAMESPACE, "labels": {key: value}}
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": namespace})
    if cluster.kubectl("get", "rtj", "digits", "-n", NAMESPACE, check=False).returncode == 0:
        print("removing the TrainJob digits of an earlier run", flush=True)
        cluster.kubectl("delete", "rtj", "digits", "-n", NAMESPACE, "--wait=true", timeout=300)
    for doc in on_real_node(load(DIGITS), epochs=EPOCHS):
        print(cluster.apply(doc, namespace=NAMESPACE).strip(), flush=True)

    step("kubectl get rtj digits -w")
    watch = subprocess.Popen(
        [cluster.kubectl_path, "get", "rtj", "digits", "-n", NAMESPACE, "-w"],
        env=cluster.env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = threading.Event()
    follower = threading.Thread(target=_follow_watch, args=(watch, seen), daemon=True)
    follower.start()
    try:
        wait_condition(cluster, NAMESPACE, "digits", "Succeeded", 1800)
        # The watch prints the Succeeded row a moment after the condition is set.
        seen.wait(timeout=30)
    finally:
        watch.terminate()
        watch.wait()
        follower.join(timeout=10)
    print(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout, flush=True)

    raytrain = raytrain_command()
    step("raytrain get digits")
    got = subprocess.run([*raytrain, "get", "digits", "-n", NAMESPACE], env=cluster.env)
    if got.returncode != 0:
        raise DemoFailed(f"raytrain get digits exited {got.returncode}")
    step("raytrain logs digits (the training driver, from KubeRay's submitter pod)")
    logs = subprocess.run(
        [*raytrain, "logs", "digits", "-n", NAMESPACE],
        env=cluster.env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if logs.returncode != 0:
        raise DemoFailed(f"raytrain logs digits exited {logs.returncode}: {logs.stderr[-2000:]}")
    print("\n".join(line for line in logs.stdout.splitlines() if "trainer_runtime" in line))

    step(f"Checkpoints in s3://{BUCKET}")
    # A checkpoint is a directory checkpoints/<run>/checkpoint_<time>/ (Ray's index files, as
    # checkpoint_manager_snapshot.json, lie beside them).
    keys = [k.split("/") for k in world.minio.keys("checkpoints/")]
    checkpoints = sorted(
        {
            "/".join(parts[:3])
            for parts in keys
            if len(parts) > 3 and parts[2].startswith("checkpoint_")
        }
    )
    if not checkpoints:
        raise DemoFailed(f"no checkpoint in s3://{BUCKET}/checkpoints/")
    for prefix in checkpoints:
        print(f"s3://{BUCKET}/{prefix}/", flush=True)


def down() -> int:
    """Stop MinIO and the cluster (its real node included); what `up` started, nothing else.
    Interrupts are ignored meanwhile, and cluster.sh runs in a session of its own, out of the
    terminal's reach: a second Ctrl-C must not leave half a cluster."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    say(f"Stopping MinIO and the cluster {CLUSTER} (the real node leaves the host as it found it)")
    rc = 0
    if world_file().is_file():
        minio_state = json.loads(world_file().read_text()).get("minio_state")
        if minio_state:
            subprocess.run(
                ["bash", str(REPO / "e2e" / "minio" / "stop.sh"), minio_state],
                check=False, start_new_session=True,
            )  # fmt: skip
    stopped = cluster_sh("down", start_new_session=True)
    if stopped.returncode != 0:
        print(f"cluster.sh down exited {stopped.returncode}; see above", file=sys.stderr)
        rc = 1
    return rc


def next_steps(world: World) -> None:
    say(f"The local cluster {CLUSTER} is up")
    print(
        f"""KUBECONFIG={world.cluster.kubeconfig}

It lives in a network namespace of its own: the API server and MinIO are reached from inside
it. A shell there, with KUBECONFIG set and kubectl, helm and raytrain on PATH:

  make shell                      (or: bash scripts/shell.sh)
  bash scripts/shell.sh CMD...    (one command there, e.g. kubectl get nodes)

Then train the digits example on the real node (its pods placed on the node, a quarter CPU each):

  python scripts/on_real_node.py examples/digits.yaml | kubectl apply -f -
  kubectl get rtj digits -w
  raytrain get digits
  raytrain logs digits

Checkpoints go to s3://{BUCKET} on MinIO: minio.raytrain-system:9000 from pods,
{world.minio.endpoint} in the shell (access key raytrain, secret raytrain-secret).

Stop everything and restore the host: make down""",
        flush=True,
    )


def _raise_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _catch_signals() -> None:
    """SIGTERM and SIGHUP end the command through its clean-up (down() ignores them while it
    runs); SIGINT raises KeyboardInterrupt as Python's default does."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _clear_leftovers() -> bool:
    """Stop what an earlier cluster of this name left; False when that fails."""
    say(f"Stopping what is left of an earlier cluster {CLUSTER}")
    if down() != 0:
        return False
    _catch_signals()
    return True


def _require_netns(command: str) -> None:
    if not os.environ.get("RAYTRAIN_NETNS"):
        sys.exit(
            f"demo_realnode.py {command} runs inside e2e/netns/run.sh (make demo, make up do this)"
        )


def cmd_demo() -> int:
    _require_netns("demo")
    state = cluster_state()
    if state == "running":
        print(
            f"demo: the local cluster {CLUSTER} is already up (make up started it?); the demo "
            "starts and stops a cluster of its own. Train digits in it with "
            "`bash scripts/shell.sh python scripts/demo_realnode.py run`, or stop it with "
            "`make down` first.",
            file=sys.stderr,
        )
        return 1
    if state == "broken" and not _clear_leftovers():
        return 1
    begun = time.monotonic()
    ok = False
    try:
        run_digits(up())
        ok = True
    except KeyboardInterrupt:
        print(f"\ndemo: interrupted at: {STEP[0]}", file=sys.stderr)
    except SystemExit as exc:
        print(f"\ndemo: stopped by a signal (exit {exc.code}) at: {STEP[0]}", file=sys.stderr)
    except Exception as exc:
        print(f"\ndemo failed at: {STEP[0]}\n{exc}", file=sys.stderr)
    finally:
        stopped = down()
    if ok and stopped == 0:
        say(f"Done in {time.monotonic() - begun:.0f} s")
        return 0
    if stopped != 0:
        print("demo: the cluster did not stop cleanly: run `make down`", file=sys.stderr)
    return 1


def cmd_up() -> int:
    _require_netns("up")
    state = cluster_state()
    if state == "running" and world_file().is_file():
        next_steps(load_world())
        return 0
    if state != "absent" and not _clear_leftovers():
        return 1
    begun = time.monotonic()
    try:
        world = up()
    except BaseException as exc:
        why = "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "failed"
        print(f"\nup {why} at: {STEP[0]}\n{exc}", file=sys.stderr)
        down()
        return 1
    next_steps(world)
    print(f"\n(up in {time.monotonic() - begun:.0f} s)", flush=True)
    return 0


def cmd_run() -> int:
    _require_netns("run")
    try:
        run_digits(load_world())
    except Exception as exc:
        print(f"\nrun failed at: {STEP[0]}\n{exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    _catch_signals()
    commands = {"demo": cmd_demo, "up": cmd_up, "run": cmd_run, "down": down}
    command = argv[0] if argv else "demo"
    if command not in commands or len(argv) > 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    os.environ["RAYTRAIN_CLUSTER"] = CLUSTER  # for the helpers' own cluster.sh calls
    return commands[command]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
