"""The chart against a real API server: server-side dry runs of what it renders, and the
pre-delete hook's script run against real TrainJobs.

The dry runs use server-side apply (`kubectl apply --server-side --dry-run=server`): the server
validates every object (schemas, RBAC escalation rules, the CRD itself) without keeping any.
Server-side, because a client-side apply stores the whole object in an annotation, and CRDs
outgrow its 262,144-byte limit. The ServiceMonitor is left out of the dry run: the
monitoring.coreos.com CRDs are not installed on the test cluster, and installing a stand-in
there would only test the stand-in.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml
from _required import required
from _wait import wait_for

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "raytrain-operator"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
CRD_FILE = ROOT / "crds" / "trainjobs.raytrain.dev.yaml"
PEERING_CRDS = CHART / "crds" / "kopf-peering.yaml"
FINALIZER = "kopf.raytrain.dev/finalizer"


@pytest.fixture(scope="module")
def helm() -> str:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "helm.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        msg = f"could not get helm through scripts/helm.sh:\n{proc.stderr}"
        if required():
            pytest.fail(msg)
        pytest.skip(msg)
    return proc.stdout.strip().splitlines()[-1]


def render(helm: str, namespace: str, *args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [helm, "template", "rt", str(CHART), "--namespace", namespace, "--include-crds", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def server_dry_run(kube_cluster: Any, docs: list[dict[str, Any]]) -> str:
    text = yaml.safe_dump_all(docs)
    proc = kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=raytrain-chart-test",
        "--force-conflicts",
        "-f",
        "-",
        input=text,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: str = proc.stdout
    return out


def is_hook(doc: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def check_every_object_accepted(out: str, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        name = doc["metadata"]["name"]
        lines = [line for line in out.splitlines() if f"/{name} " in line]
        assert lines, f"{doc['kind']} {name} missing from the dry-run output:\n{out}"
        assert all("(server dry run)" in line for line in lines), out


def ensure_peering_crds(kube_cluster: Any) -> None:
    """What `helm install` does with the chart's crds/ before it sends any template: the
    peering objects can be checked only once their kinds exist."""
    kube_cluster.kubectl(
        "apply", "--server-side", "--field-manager=raytrain-chart-test", "--force-conflicts",
        "-f", str(PEERING_CRDS),
    )  # fmt: skip
    for name in ("kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        kube_cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")


def test_default_values_pass_a_server_dry_run(kube_cluster: Any, namespace: str, helm: str) -> None:
    ensure_peering_crds(kube_cluster)
    docs = render(helm, namespace)
    assert any(d["kind"] == "ClusterKopfPeering" for d in docs)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ClusterRole", "CustomResourceDefinition", "Job"} <= kinds
    check_every_object_accepted(server_dry_run(kube_cluster, docs), docs)


def test_full_values_pass_a_server_dry_run(kube_cluster: Any, namespace: str, helm: str) -> None:
    # The full values watch team-a and team-b; here they watch the test's namespace instead, so
    # the namespaced Roles have somewhere to go.
    ensure_peering_crds(kube_cluster)
    docs = render(
        helm, namespace, "-f", str(FULL_VALUES), "--set", f"watchNamespaces={{{namespace}}}"
    )
    assert any(d["kind"] == "ServiceMonitor" for d in docs)
    docs = [d for d in docs if d["kind"] != "ServiceMonitor"]
    assert any(d["kind"] == "Role" and d["metadata"]["namespace"] == namespace for d in docs)
    assert any(d["kind"] == "KopfPeering" and d["metadata"]["namespace"] == namespace for d in docs)
    check_every_object_accepted(server_dry_run(kube_cluster, docs), docs)


def test_every_granted_resource_exists_on_the_server(kube_cluster: Any, helm: str) -> None:
    """A typo in a rule grants nothing and fails only at run time: every rule must name a real
    (group, resource). KubeRay's CRDs are installed on the test cluster."""
    ensure_crd(kube_cluster)
    ensure_peering_crds(kube_cluster)
    proc = kube_cluster.kubectl("api-resources", "-o", "name")
    # `kubectl api-resources -o name` prints `<resource>.<group>`, or `<resource>` for core.
    served = {
        (group, resource) for resource, _, group in (n.partition(".") for n in proc.stdout.split())
    }
    if ("ray.io", "rayjobs") not in served:
        pytest.fail("KubeRay's CRDs are not installed on the test cluster")
    (role,) = [
        d for d in render(helm, "raytrain-system") if d["kind"] == "ClusterRole" and not is_hook(d)
    ]
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                base = resource.split("/")[0]
                assert (group, base) in served, f"rule names {group or 'core'}/{base}"


# ------------------------------------------------------------------ the pre-delete hook script


def ensure_crd(kube_cluster: Any) -> None:
    kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=raytrain-chart-test",
        "--force-conflicts",
        "-f",
        str(CRD_FILE),
    )
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/trainjobs.raytrain.dev", "--timeout=60s"
    )


def hook_script(helm: str, mode: str) -> list[str]:
    (job,) = [
        d
        for d in render(helm, "raytrain-system", "--set", f"uninstall.trainJobs={mode}")
        if d["kind"] == "Job"
    ]
    command: list[str] = job["spec"]["template"]["spec"]["containers"][0]["command"]
    # In the cluster the Job uses its ServiceAccount; here, the test's kubeconfig (the module
    # falls back to it outside a pod) and this interpreter.
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def make_trainjob(kube_cluster: Any, namespace: str, name: str) -> None:
    doc = {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "finalizers": [FINALIZER]},
        "spec": {
            "image": "raytrain/trainer-runtime:0.1.0",
            "entrypoint": "examples.digits.train:train_loop_per_worker",
            "scaling": {"numWorkers": 2},
            "storage": {"s3": {"uri": "s3://raytrain/checkpoints"}},
        },
    }
    kube_cluster.apply(doc, namespace=namespace)


def run_hook(kube_cluster: Any, script: list[str], namespace: str, mode: str) -> str:
    env = {
        **kube_cluster.env,
        "TRAINJOBS": mode,
        "WATCH_NAMESPACES": namespace,
        "TIMEOUT_SECONDS": "3",
    }
    proc = subprocess.run(
        script,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def finalizers(kube_cluster: Any, namespace: str, name: str) -> list[str]:
    obj = kube_cluster.get_json("trainjobs.raytrain.dev", name, "-n", namespace)
    return list(obj["metadata"].get("finalizers") or [])


def test_hook_removes_only_our_finalizer_and_keeps_the_trainjob(
    kube_cluster: Any, namespace: str, helm: str
) -> None:
    ensure_crd(kube_cluster)
    make_trainjob(kube_cluster, namespace, "keep-me")
    kube_cluster.kubectl(
        "patch",
        "trainjobs.raytrain.dev",
        "keep-me",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"metadata": {"finalizers": ["kopf.raytrain.dev/finalizer", "example.com/other"]}}',
    )
    out = run_hook(
        kube_cluster, hook_script(helm, "removeFinalizers"), namespace, "removeFinalizers"
    )
    assert f"removed {FINALIZER} from trainjob {namespace}/keep-me" in out
    assert finalizers(kube_cluster, namespace, "keep-me") == ["example.com/other"]
    # Leave nothing behind that the namespace clean-up would hang on.
    kube_cluster.kubectl(
        "patch",
        "trainjobs.raytrain.dev",
        "keep-me",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"metadata": {"finalizers": null}}',
    )


def test_hook_delete_mode_never_hangs_without_an_operator(
    kube_cluster: Any, namespace: str, helm: str
) -> None:
    """No operator runs here, so nothing honours the finalizer: the hook must strip it at its
    deadline and the TrainJob must be gone when it exits."""
    ensure_crd(kube_cluster)
    make_trainjob(kube_cluster, namespace, "delete-me")
    out = run_hook(kube_cluster, hook_script(helm, "deleteTrainJobs"), namespace, "deleteTrainJobs")
    assert f"deleting trainjob {namespace}/delete-me" in out
    assert "still present after the deadline" in out

    def gone() -> bool:
        proc = kube_cluster.kubectl(
            "get", "trainjobs.raytrain.dev", "delete-me", "-n", namespace, check=False
        )
        return proc.returncode != 0 and "NotFound" in proc.stderr

    wait_for(gone, timeout=30, what=f"trainjob {namespace}/delete-me to be deleted")
