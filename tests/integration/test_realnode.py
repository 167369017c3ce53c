"""The real node (e2e/realnode/): pods that tolerate its taint run for real, beside KWOK.

Run inside a network namespace of its own, so that node, pod and Service addresses never exist
in the host's namespace:

    bash e2e/netns/run.sh python -m pytest -m realnode tests/integration/test_realnode.py

The session's cluster then starts with the real node (conftest.py), and the test image (one
static Go binary, built by e2e/realnode/build.sh) is imported with ``cluster.sh import-image``.
The last test stops the node and checks that the host is as before; it starts it again after.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from _required import required
from _wait import wait_for
from conftest import CLUSTER_SH, REPO, KubeCluster, KubectlError
from realpods import DRA_DRIVER, dra_device_class, wait_imports_ahead

pytestmark = pytest.mark.realnode

NODE = "realnode"
TAINT_KEY = "raytrain.dev/real-node"
PROBE_IMAGE = "localhost/raytrain-probe:1"
# Global even inside a network namespace: the kubelet sets them, `down` must restore them.
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")


def _sysctls() -> dict[str, str]:
    return {name: Path("/proc/sys", name).read_text().strip() for name in SYSCTLS}


def _cache() -> Path:
    return Path(os.environ.get("RAYTRAIN_CACHE") or Path.home() / ".cache" / "raytrain")


def _node_binaries() -> set[str]:
    """Paths of the kubelet, containerd, kube-router and DRA driver binaries
    e2e/realnode/build.sh built."""
    root = _cache() / "realnode"
    return {
        str(p)
        for p in (
            *root.glob("kubelet-*/kubelet"),
            *root.glob("containerd-*/containerd"),
            *root.glob("kube-router-*/kube-router"),
            *root.glob("dra-driver-*/dra-test-driver"),
        )
    }


def _running(binaries: set[str], *, anywhere: bool = False) -> list[str]:
    """'pid binary' of every process running one of ``binaries`` in this network namespace,
    where the node runs (or on the whole host, with ``anywhere``). Processes of other
    namespaces are not this node's: `make test` runs the tests that need no cluster beside
    these, and tests/images starts a containerd of its own from the same binary."""
    here = os.readlink("/proc/self/ns/net")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            exe = os.readlink(proc / "exe")
            if exe in binaries and (anywhere or os.readlink(proc / "ns" / "net") == here):
                found.append(f"{proc.name} {exe}")
        except OSError:
            continue
    return found


# Read at collection, before the session starts the cluster: the host's values before `up`
# (None when a kubelet already ran then, anywhere on the host: it sets these sysctls, and they
# are the host's, not a namespace's).
_KUBELETS = {b for b in _node_binaries() if b.endswith("/kubelet")}
SYSCTLS_BEFORE_UP = None if _running(_KUBELETS, anywhere=True) else _sysctls()


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout


def _cluster_sh(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CLUSTER_SH), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def real_node(kube_cluster: KubeCluster) -> KubeCluster:
    """The session's cluster, with the real node Ready and the test image imported."""
    if not os.environ.get("RAYTRAIN_NETNS"):
        msg = (
            "the real node runs only inside a network namespace: "
            "bash e2e/netns/run.sh python -m pytest -m realnode tests/integration/test_realnode.py"
        )
        if required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    node = kube_cluster.kubectl("get", "node", NODE, check=False)
    if node.returncode != 0:
        pytest.fail(
            f"the cluster has no node {NODE!r}: start it with "
            f"`bash {CLUSTER_SH.relative_to(REPO)} up --real-node` ({node.stderr.strip()})",
            pytrace=False,
        )
    archive = _cache() / "realnode" / "images" / "probe.tar"
    if not archive.is_file():
        pytest.fail(f"{archive} is missing: run `bash e2e/realnode/build.sh images`", pytrace=False)
    imported = _cluster_sh("import-image", str(archive))
    assert imported.returncode == 0, f"import-image failed:\n{imported.stderr}"
    return kube_cluster


def _pod(name: str, args: list[str], *, tolerate: bool = True, **spec: Any) -> dict[str, Any]:
    """A pod of the probe image, pinned to the real node, tolerating its taint if asked."""
    body: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        "containers": [
            {
                "name": "probe",
                "image": PROBE_IMAGE,
                "imagePullPolicy": "Never",
                "args": args,
            }
        ],
        **spec,
    }
    if tolerate:
        body["tolerations"] = [
            {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def _phase(cluster: KubeCluster, namespace: str, name: str) -> str:
    return str(cluster.get_json("pod", name, "-n", namespace).get("status", {}).get("phase", ""))


def _wait_phase(cluster: KubeCluster, namespace: str, name: str, phase: str) -> None:
    def reached() -> bool:
        got = _phase(cluster, namespace, name)
        if got == "Failed" and phase != "Failed":
            logs = cluster.kubectl("logs", "-n", namespace, name, check=False)
            pytest.fail(f"pod {name} Failed; logs:\n{logs.stdout}{logs.stderr}", pytrace=False)
        return got == phase

    wait_for(reached, timeout=120, what=f"pod {namespace}/{name} to be {phase}")


def test_pod_runs_on_the_real_node_and_its_logs_are_readable(
    real_node: KubeCluster, namespace: str
) -> None:
    word = f"hello-{uuid.uuid4().hex[:8]}"
    real_node.apply(_pod("echo", ["echo", "real", word]), namespace)
    _wait_phase(real_node, namespace, "echo", "Succeeded")

    pod = real_node.get_json("pod", "echo", "-n", namespace)
    assert pod["spec"]["nodeName"] == NODE
    # Logs go API server -> kubelet (client certificate) -> containerd: the whole real path.
    logs = real_node.kubectl("logs", "-n", namespace, "echo").stdout
    assert logs == f"real {word}\n"


#: How many devices the node's DRA driver (e2e/realnode/node.sh) publishes.
DRA_DEVICES = 8


def test_a_pod_gets_the_device_it_claims_from_the_nodes_dra_driver(
    real_node: KubeCluster, namespace: str
) -> None:
    """The node's DRA driver (Kubernetes' example driver) offers its devices in a ResourceSlice;
    the scheduler allocates a pod's claim one of them, the kubelet has the driver prepare it,
    and containerd applies the driver's CDI spec: the container's environment holds the
    configuration of the DeviceClass and of the claim."""
    slices = [
        s
        for s in real_node.get_json("resourceslices")["items"]
        if s["spec"]["driver"] == DRA_DRIVER
    ]
    assert [s["spec"]["nodeName"] for s in slices] == [NODE], slices
    assert len(slices[0]["spec"]["devices"]) == DRA_DEVICES

    word = f"w{uuid.uuid4().hex[:8]}"
    device_class = f"{namespace}-dev"
    real_node.apply(dra_device_class(device_class, {"origin": "node"}))
    try:
        real_node.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "dev"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "one", "exactly": {"deviceClassName": device_class}}
                            ],
                            "config": [
                                {"opaque": {"driver": DRA_DRIVER, "parameters": {"word": word}}}
                            ],
                        }
                    }
                },
            },
            namespace,
        )
        pod = _pod("claims", ["env", "user_word", "admin_origin"])
        pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": "dev"}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
        real_node.apply(pod, namespace)
        _wait_phase(real_node, namespace, "claims", "Succeeded")
        logs = real_node.kubectl("logs", "-n", namespace, "claims").stdout
        # Only the driver's CDI spec for the allocated device sets these.
        assert logs == f"user_word={word}\nadmin_origin=node\n", logs
    finally:
        real_node.kubectl("delete", "pod", "claims", "-n", namespace, "--wait=true", check=False)
        real_node.kubectl("delete", "deviceclass", device_class, "--ignore-not-found", check=False)


def _serve(cluster: KubeCluster, namespace: str, name: str) -> None:
    """A probe pod answering HTTP on 8080, labelled app=<name>."""
    server = _pod(name, ["serve", "8080"])
    server["metadata"]["labels"] = {"app": name}
    cluster.apply(server, namespace)


def test_pod_reaches_a_service_by_its_dns_name(real_node: KubeCluster, namespace: str) -> None:
    _serve(real_node, namespace, "web")
    real_node.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        namespace,
    )
    _wait_phase(real_node, namespace, "web", "Running")

    # The name goes through CoreDNS; the ClusterIP through kube-proxy's rules to the pod.
    url = f"http://web.{namespace}.svc.cluster.local/"
    real_node.apply(_pod("client", ["fetch", "-timeout", "90s", url]), namespace)
    _wait_phase(real_node, namespace, "client", "Succeeded")
    logs = real_node.kubectl("logs", "-n", namespace, "client").stdout
    # The probe logs its retries ("retrying: ... network is unreachable" while the pod's route
    # comes up); the answer is its last line.
    assert logs.strip().splitlines()[-1] == "probe web", logs


def test_network_policy_is_enforced_on_the_real_node(
    real_node: KubeCluster, namespace: str
) -> None:
    """kube-router's firewall: a policy admits only the peers it names, in its namespace."""
    _serve(real_node, namespace, "guarded")
    real_node.apply(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "guarded"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "guarded"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "friend"}}}]}],
            },
        },
        namespace,
    )
    _wait_phase(real_node, namespace, "guarded", "Running")
    ip = real_node.get_json("pod", "guarded", "-n", namespace)["status"]["podIP"]
    url = f"http://{ip}:8080/"

    other = f"{namespace[:50]}-other"
    real_node.kubectl("create", "namespace", other)
    try:
        friend = _pod("friend", ["fetch", "-timeout", "60s", url])
        friend["metadata"]["labels"] = {"role": "friend"}
        real_node.apply(friend, namespace)
        # Not named by the policy, or named but in another namespace: both refused.
        real_node.apply(_pod("stranger", ["fetch", "-timeout", "15s", url]), namespace)
        outsider = _pod("outsider", ["fetch", "-timeout", "15s", url])
        outsider["metadata"]["labels"] = {"role": "friend"}
        real_node.apply(outsider, other)

        _wait_phase(real_node, namespace, "friend", "Succeeded")
        logs = real_node.kubectl("logs", "-n", namespace, "friend").stdout
        assert logs.strip().splitlines()[-1] == "probe guarded", logs
        for ns, name in ((namespace, "stranger"), (other, "outsider")):
            _wait_phase(real_node, ns, name, "Failed")
            logs = real_node.kubectl("logs", "-n", ns, name).stdout
            assert "probe guarded" not in logs, logs
    finally:
        real_node.kubectl("delete", "namespace", other, "--wait=false", check=False)


def test_pod_without_the_toleration_never_lands_on_the_real_node(
    real_node: KubeCluster, namespace: str
) -> None:
    # Pinned to the real node but not tolerating its taint: the scheduler must refuse it.
    real_node.apply(_pod("pinned", ["echo", "no"], tolerate=False), namespace)
    # Ordinary pods go to the KWOK nodes, never to the real one.
    plain = [f"plain-{i}" for i in range(5)]
    for name in plain:
        pod = _pod(name, ["echo", "x"], tolerate=False)
        del pod["spec"]["nodeSelector"]
        real_node.apply(pod, namespace)

    def refused() -> str | None:
        pod = real_node.get_json("pod", "pinned", "-n", namespace)
        for cond in pod.get("status", {}).get("conditions", []):
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return str(cond.get("message", ""))
        return None

    message = wait_for(refused, timeout=60, what="the scheduler to refuse the pinned pod")
    assert "1 node(s) had untolerated taint" in message
    taints = real_node.get_json("node", NODE)["spec"].get("taints", [])
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in taints
    assert real_node.get_json("pod", "pinned", "-n", namespace)["spec"].get("nodeName") is None

    def placed() -> list[str] | None:
        nodes = [
            real_node.get_json("pod", name, "-n", namespace)["spec"].get("nodeName")
            for name in plain
        ]
        return nodes if all(nodes) else None

    nodes = wait_for(placed, timeout=60, what="the plain pods to be scheduled")
    assert NODE not in nodes
    assert all(n.startswith("gpu-node-") for n in nodes), nodes


def test_node_down_stops_every_process_and_restores_the_host(real_node: KubeCluster) -> None:
    binaries = _node_binaries()
    assert _running(binaries), "no kubelet or containerd runs before the node is stopped"
    state = Path(real_node.kubeconfig).parent / "realnode"
    before = (state / "host-before").read_text().splitlines()
    recorded = {
        line.split()[1].replace(".", "/"): line.split()[2]
        for line in before
        if line.startswith("sysctl ")
    }
    assert set(recorded) == set(SYSCTLS)
    # The kubelet changed them, so restoring them is a real step (not a no-op).
    assert _sysctls() != recorded

    # The session may be importing the real-pod tests' images into this containerd.
    wait_imports_ahead()
    try:
        down = _cluster_sh("node-down")
        assert down.returncode == 0, f"node-down failed:\n{down.stderr}"
        assert _running(binaries) == []
        assert _sysctls() == recorded
        if SYSCTLS_BEFORE_UP is not None:
            assert _sysctls() == SYSCTLS_BEFORE_UP
        assert not list(Path("/sys/fs/cgroup").glob("*/kubepods")), "kubepods cgroups remain"
        for path in ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd"):
            if f"path {path}" not in before:
                assert not Path(path).exists(), f"{path} was created by the node and remains"
        mounts = Path("/proc/self/mountinfo").read_text()
        assert str(state) not in mounts, "mounts under the node's state dir remain"
        # This test runs in the node's network namespace: its rules and links must be gone too.
        for tool in ("iptables", "ip6tables"):
            for table in ("filter", "nat", "mangle"):
                rules = _run(tool, "-t", table, "-S")
                left = [r for r in rules.splitlines() if "KUBE-" in r or "CNI-" in r]
                assert left == [], f"{tool} -t {table} still has {left}"
        sets = [s for s in _run("ipset", "list", "-n").split() if s.startswith(("KUBE-", "kube"))]
        assert sets == [], f"kube-router's ipsets remain: {sets}"
        links = _run("ip", "-o", "link", "show")
        assert " rn0:" not in links and " rnnode0:" not in links, links
    finally:
        # The DRA driver's ResourceSlice of the run that was stopped outlives it; `up` must
        # wait for the slice its new driver publishes, not take the old one for it (it did, and
        # failed when the old one was replaced a moment later: a node without kube-proxy).
        try:
            stale = _dra_slices(real_node)
        except (KubectlError, subprocess.TimeoutExpired):
            stale = []  # asserted below; the restart matters more
        # Leave the session's cluster as the other tests expect it.
        up = _cluster_sh("up", "--real-node")
        assert up.returncode == 0, f"restarting the node failed:\n{up.stderr}"
    assert stale, "no ResourceSlice of the stopped driver was left to be mistaken for a new one"
    # Who removes the stale slices is a race: `up` does before it starts the new driver, but the
    # kubelet it has just started also wipes its node's slices at startup, in the background,
    # and was first in a cold run. Either way none may be left when `up` says the node is ready.
    fresh = _dra_slices(real_node)
    assert fresh and not set(fresh) & set(stale), (stale, fresh)


def _dra_slices(cluster: KubeCluster) -> list[str]:
    """The names of the real node's ResourceSlices of the DRA driver."""
    return [
        s["metadata"]["name"]
        for s in cluster.get_json("resourceslices")["items"]
        if s["spec"].get("nodeName") == NODE and s["spec"].get("driver") == DRA_DRIVER
    ]
