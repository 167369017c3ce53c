"""How long a new pod waits before a NetworkPolicy on the real node admits it.

kube-router (the real node's NetworkPolicy firewall, docs/real-node.md) adds a pod's address to
the policy's source set after it sees the pod; until then the pod's connections to a guarded
pod are refused. The script starts a probe server behind a policy that admits `role=friend`,
then, one after another, --pods friend pods that fetch from it (retrying every 0.5 s), and
prints for each the seconds from its first attempt to its first answer, read from the
timestamps of its log lines, and what the refused attempts said.

    bash e2e/netns/run.sh python benchmarks/netpol_admission.py [--pods 5]

Needs the real node's binaries and the probe image (e2e/realnode/build.sh); uses its own
cluster (RAYTRAIN_CLUSTER=netpol) and stops it at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLUSTER_SH = ROOT / "e2e" / "controlplane" / "cluster.sh"
PROBE = "localhost/raytrain-probe:1"
NAMESPACE = "netpol"


def cache() -> pathlib.Path:
    return pathlib.Path(os.environ.get("RAYTRAIN_CACHE") or pathlib.Path.home() / ".cache/raytrain")


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    """Our own kubectl (built with the control plane)."""
    (binary,) = sorted(cache().glob("controlplane/k8s-*/kubectl"))[-1:]
    return subprocess.run(
        [str(binary), "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def pod(name: str, args: list[str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "realnode"},
            "tolerations": [{"key": "raytrain.dev/real-node", "operator": "Exists"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "probe", "image": PROBE, "imagePullPolicy": "Never", "args": args}
            ],
        },
    }


def wait_phase(kubeconfig: str, name: str, phases: set[str], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        phase = kubectl(
            kubeconfig, "get", "pod", name, "-n", NAMESPACE, "-o", "jsonpath={.status.phase}"
        )
        if phase in phases:
            return phase
        time.sleep(0.5)
    raise TimeoutError(f"pod {name} not in {phases} after {timeout}s")


def stamp(line: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "RAYTRAIN_CLUSTER": os.environ.get("RAYTRAIN_CLUSTER", "netpol")}
    os.environ.update(env)
    up = subprocess.run(
        ["bash", str(CLUSTER_SH), "up", "--real-node"],
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    kubeconfig = up.strip().splitlines()[-1].split("=", 1)[1]
    try:
        archive = cache() / "realnode/images/probe.tar"
        subprocess.run(["bash", str(CLUSTER_SH), "import-image", str(archive)], env=env, check=True)
        kubectl(kubeconfig, "create", "namespace", NAMESPACE)
        policy = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "guarded", "namespace": NAMESPACE},
            "spec": {
                "podSelector": {"matchLabels": {"app": "guarded"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "friend"}}}]}],
            },
        }
        server = pod("guarded", ["serve", "8080"], {"app": "guarded"})
        kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(policy))
        kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(server))
        wait_phase(kubeconfig, "guarded", {"Running"})
        ip = kubectl(
            kubeconfig, "get", "pod", "guarded", "-n", NAMESPACE, "-o", "jsonpath={.status.podIP}"
        )
        waits: list[float] = []
        refusals: set[str] = set()
        for i in range(args.pods):
            name = f"friend-{i}"
            friend = pod(
                name, ["fetch", "-timeout", "120s", f"http://{ip}:8080/"], {"role": "friend"}
            )
            kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(friend))
            phase = wait_phase(kubeconfig, name, {"Succeeded", "Failed"}, timeout=180)
            lines = kubectl(kubeconfig, "logs", name, "-n", NAMESPACE, "--timestamps").splitlines()
            if phase != "Succeeded" or not lines:
                print(f"{name}: {phase}\n" + "\n".join(lines[-5:]), file=sys.stderr)
                return 1
            waits.append((stamp(lines[-1]) - stamp(lines[0])).total_seconds())
            for line in lines[:-1]:
                refusals.add(line.split("retrying: ", 1)[-1].rsplit(":", 1)[-1].strip())
        print(
            json.dumps(
                {
                    "pods": args.pods,
                    "seconds_first_attempt_to_answer": [round(w, 2) for w in waits],
                    "median_s": round(statistics.median(waits), 2),
                    "max_s": round(max(waits), 2),
                    "refused_with": sorted(refusals),
                },
                indent=2,
            )
        )
        return 0
    finally:
        subprocess.run(["bash", str(CLUSTER_SH), "down"], env=env, check=False)


if __name__ == "__main__":
    sys.exit(main())
