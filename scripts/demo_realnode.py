"""`make demo` on real pods: the chart's operator, a real Ray head and two workers, MinIO.

Run by scripts/demo.sh inside a network namespace of its own (e2e/netns/run.sh), after
`make prereqs` built everything (control plane, real node, MinIO, helm, the two images):

  1. the local control plane with one real node (e2e/controlplane/cluster.sh up --real-node);
  2. the operator and trainer-runtime images imported into the node's containerd;
  3. MinIO as `minio.raytrain-system:9000`, the S3 endpoint examples/digits.yaml names;
  4. `helm install` of charts/raytrain-operator: the operator runs as a pod;
  5. examples/digits.yaml applied (its pods ask for a quarter CPU each, so that the head, the
     submitter and two workers fit the machine's one real node), `kubectl get rtj -w` until
     Succeeded, then `raytrain get`, `raytrain logs` and the checkpoints in the bucket;
  6. everything stopped again: the real node changes the host while it runs.

It reuses the real-pod test suite's helpers (tests/integration/realpods.py), so the demo and
the tests set up the same world.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "integration"), str(REPO / "tests")]

from conftest import CLUSTER_SH, KubeCluster, pinned_versions  # noqa: E402
from realpods import (  # noqa: E402
    BUCKET,
    built_images,
    expose_minio,
    import_images,
    install_chart,
    start_minio,
    trainjob_on_real_node,
    wait_condition,
)

NAMESPACE = os.environ.get("DEMO_NAMESPACE", "raytrain-demo")
EPOCHS = int(os.environ["DEMO_EPOCHS"]) if os.environ.get("DEMO_EPOCHS") else None


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def kubectl_binary() -> str:
    cache = Path(os.environ.get("RAYTRAIN_CACHE") or Path.home() / ".cache" / "raytrain")
    return str(cache / "controlplane" / f"k8s-{pinned_versions()['K8S_VERSION']}" / "kubectl")


def main() -> int:
    if not os.environ.get("RAYTRAIN_NETNS"):
        sys.exit("demo_realnode.py runs inside e2e/netns/run.sh (make demo does this)")
    env = {**os.environ, "RAYTRAIN_CLUSTER": os.environ.get("RAYTRAIN_CLUSTER", "raytrain-demo")}
    os.environ.update(env)
    started = time.monotonic()
    say("Starting the local control plane with a real node (e2e/controlplane/cluster.sh)")
    up = subprocess.run(
        ["bash", str(CLUSTER_SH), "up", "--real-node"], capture_output=True, text=True, env=env
    )
    sys.stderr.write(up.stderr[-2000:])
    printed = [line.split("=", 1) for line in up.stdout.splitlines() if "=" in line]
    kubeconfig = next((value for key, value in printed if key == "KUBECONFIG"), None)
    if up.returncode != 0 or not kubeconfig:
        print(f"cluster.sh up failed ({up.returncode})", file=sys.stderr)
        return 1
    cluster = KubeCluster(Path(kubeconfig), kubectl_binary())
    minio = None
    try:
        print(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product").stdout)

        say("Importing the operator and trainer-runtime images into the node's containerd")
        images = built_images()
        import_images(images)
        print(f"{images.operator_image}\n{images.runtime_image}")

        say(f"MinIO as minio.raytrain-system:9000 (bucket {BUCKET})")
        minio = start_minio()
        expose_minio(cluster, minio)

        say("helm install raytrain charts/raytrain-operator (the operator runs as a pod)")
        install_chart(cluster, images)
        print(cluster.kubectl("get", "pods", "-n", "raytrain-system", "-o", "wide").stdout)

        say(f"kubectl apply -f examples/digits.yaml -n {NAMESPACE}")
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        for doc in trainjob_on_real_node(REPO / "examples" / "digits.yaml", epochs=EPOCHS):
            cluster.apply(doc, namespace=NAMESPACE)

        say("kubectl get rtj digits -w")
        watch = subprocess.Popen(
            [cluster.kubectl_path, "get", "rtj", "digits", "-n", NAMESPACE, "-w"], env=cluster.env
        )
        try:
            wait_condition(cluster, NAMESPACE, "digits", "Succeeded", 1800)
            time.sleep(1)
        finally:
            watch.terminate()
            watch.wait()
        print(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout)

        raytrain = [sys.executable, "-m", "raytrain.cli"]
        say("raytrain get digits")
        subprocess.run([*raytrain, "get", "digits", "-n", NAMESPACE], env=cluster.env, check=True)
        say("raytrain logs digits (the training driver, from KubeRay's submitter pod)")
        logs = subprocess.run(
            [*raytrain, "logs", "digits", "-n", NAMESPACE],
            env=cluster.env,
            capture_output=True,
            text=True,
            check=True,
        )
        print("\n".join(line for line in logs.stdout.splitlines() if "trainer_runtime" in line))

        say(f"Checkpoints in s3://{BUCKET}")
        tops = sorted({"/".join(k.split("/")[:3]) for k in minio.keys("checkpoints/")})
        for prefix in tops:
            if prefix.split("/")[-1].startswith("checkpoint_"):
                print(f"s3://{BUCKET}/{prefix}/")
        say(f"Done in {time.monotonic() - started:.0f} s")
        return 0
    finally:
        say("Stopping MinIO and the cluster (the real node leaves the host as it found it)")
        if minio is not None:
            minio.stop()
        subprocess.run(["bash", str(CLUSTER_SH), "down"], env=env, check=False)


if __name__ == "__main__":
    sys.exit(main())
