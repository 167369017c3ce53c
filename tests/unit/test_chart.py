"""The Helm chart: lint, render with default and full values, and check what comes out.

The helm binary comes from scripts/helm.sh (cached under ~/.cache/raytrain). In a required run
(CI, or RAYTRAIN_REQUIRE_ALL=1: tests/_required.py) a failure to get it fails the run; elsewhere
the tests skip and say how to get it.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from _required import required

from raytrain_operator.api import crd as crdgen
from raytrain_operator.builders.network import DEFAULT_INGRESS, parse_ingress
from raytrain_operator.uninstall import Options
from trainer_runtime.reporter import SUPERSEDED

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "raytrain-operator"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
MULTI_TENANT_VALUES = CHART / "ci" / "multi-tenant-values.yaml"
NAMESPACE = "raytrain-system"

OPERATOR_DOC = ROOT / "docs" / "operator.md"
# Cluster-scoped resources; everything else in the table is granted per namespace.
CLUSTER_SCOPED = {
    "namespaces",
    "customresourcedefinitions",
    "clusterkopfpeerings",
    "clustertrainjobtemplates",
}


def documented_rbac() -> dict[tuple[str, str], set[str]]:
    """The table under "## RBAC" in docs/operator.md: (apiGroup, resource) -> verbs."""
    text = OPERATOR_DOC.read_text()
    section = text.split("\n## RBAC\n", 1)[1].split("\n## ", 1)[0]
    # The PodDisruptionBudget's rule is documented with the rest of that feature.
    section += text.split("\n## Disruptions and preemptions\n", 1)[1].split("\n## ", 1)[0]
    table: dict[tuple[str, str], set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        group = cells[0].strip("`").strip('"')
        resource = cells[1].strip("`")
        verbs = {v.strip().strip("`") for v in cells[2].split(",")}
        table[(group, resource)] = verbs
    assert ("raytrain.dev", "trainjobs") in table, "no RBAC table found in docs/operator.md"
    return table


DOCUMENTED = documented_rbac()
NAMESPACED_RULES = {k: v for k, v in DOCUMENTED.items() if k[1] not in CLUSTER_SCOPED}
CLUSTER_RULES = {k: v for k, v in DOCUMENTED.items() if k[1] in CLUSTER_SCOPED}


@pytest.fixture(scope="session")
def helm() -> str:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "helm.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        msg = f"could not get helm through scripts/helm.sh:\n{proc.stderr}"
        if required():
            pytest.fail(msg)
        pytest.skip(msg + "\nRun `bash scripts/helm.sh`, or set RAYTRAIN_HELM=/path/to/helm.")
    return proc.stdout.strip().splitlines()[-1]


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    out = run_helm(
        helm, "template", "rt", str(CHART), "--namespace", NAMESPACE, "--include-crds", *args
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def trainjob_crd(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (crd,) = [d for d in docs if d["metadata"]["name"] == "trainjobs.raytrain.dev"]
    return crd


def one(docs: list[dict[str, Any]], kind: str, hook: bool = False) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and is_hook(d) == hook]
    assert len(found) == 1, f"expected one {kind} (hook={hook}), got {len(found)}"
    return found[0]


def policy(
    docs: list[dict[str, Any]], which: str, kind: str = "ValidatingAdmissionPolicy"
) -> dict[str, Any]:
    """The chart's `<release>-runtime-<which>` admission policy (or its binding)."""
    found = [
        d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(f"-runtime-{which}")
    ]
    assert len(found) == 1, f"expected one {kind} runtime-{which}, got {len(found)}"
    return found[0]


def is_hook(doc: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def rules_table(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    table: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "resourceNames" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = (group, resource)
                assert key not in table, f"{key} granted twice"
                table[key] = set(rule["verbs"])
    return table


@pytest.fixture(scope="module")
def default(helm: str) -> list[dict[str, Any]]:
    return render(helm)


@pytest.fixture(scope="module")
def full(helm: str) -> list[dict[str, Any]]:
    return render(helm, "-f", str(FULL_VALUES))


# ------------------------------------------------------------------------------------ lint


@pytest.mark.parametrize(
    "values", [None, FULL_VALUES, MULTI_TENANT_VALUES], ids=["default", "full", "multi-tenant"]
)
def test_lint_is_clean(helm: str, values: pathlib.Path | None) -> None:
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


# ----------------------------------------------------------------------- default rendering


def test_default_renders_the_expected_objects(default: list[dict[str, Any]]) -> None:
    assert kinds([d for d in default if not is_hook(d)]) == [
        "ClusterKopfPeering",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",  # TrainJob
        "CustomResourceDefinition",  # ClusterTrainJobTemplate
        "CustomResourceDefinition",  # TrainJobTemplate
        "CustomResourceDefinition",  # ClusterKopfPeering (crds/)
        "CustomResourceDefinition",  # KopfPeering (crds/)
        "Deployment",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",  # operator scope
        "ValidatingAdmissionPolicy",  # runtime scope
        "ValidatingAdmissionPolicy",  # runtime status
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
    ]


def test_deployment_runs_one_replica_that_peers(default: list[dict[str, Any]]) -> None:
    deploy = one(default, "Deployment")
    assert deploy["metadata"]["namespace"] == NAMESPACE
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "raytrain/operator:0.1.0"  # the chart's appVersion
    assert container["args"] == [
        "--metrics-port=8080",
        "--health-port=8081",
        "--log-format=full",
        "--peering-mode=required",
        "--peering-name=raytrain-operator",
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 8080,
        "health": 8081,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    # Ready only once kopf serves /healthz (after the start-up handlers), not when the process
    # starts: `helm install --wait` and GitOps health checks read it.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert pod["serviceAccountName"] == one(default, "ServiceAccount")["metadata"]["name"]


def test_pod_is_locked_down(default: list[dict[str, Any]]) -> None:
    pod = one(default, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/tmp" in mounts  # the only writable path


def test_cluster_role_is_the_documented_table(default: list[dict[str, Any]]) -> None:
    role = one(default, "ClusterRole")
    assert rules_table(role["rules"]) == NAMESPACED_RULES | CLUSTER_RULES
    binding = one(default, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    sa = one(default, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["name"], "namespace": NAMESPACE}
    ]


def test_the_operator_reads_no_secret_by_default(
    helm: str, default: list[dict[str, Any]], full: list[dict[str, Any]]
) -> None:
    """No `get secrets` for the operator's account unless an administrator grants it
    (rbac.readSecrets), in the watched namespaces or cluster-wide; without it the operator
    is told not to try (RAYTRAIN_READ_SECRETS=false) and the pods' own failure names a missing
    Secret (status/triage/config.py, config_problem)."""
    operator = [d for d in default + full if not is_hook(d)]
    for role in (d for d in operator if d["kind"] in ("ClusterRole", "Role")):
        assert ("", "secrets") not in rules_table(role["rules"]), role["metadata"]
    assert operator_env(default)["RAYTRAIN_READ_SECRETS"] == "false"
    granted = render(helm, "--set", "rbac.readSecrets=true")
    assert rules_table(one(granted, "ClusterRole")["rules"])[("", "secrets")] == {"get"}
    assert "RAYTRAIN_READ_SECRETS" not in operator_env(granted)
    namespaced = render(helm, "-f", str(FULL_VALUES), "--set", "rbac.readSecrets=true")
    for role in (d for d in namespaced if d["kind"] == "Role" and not is_hook(d)):
        assert rules_table(role["rules"])[("", "secrets")] == {"get"}
    assert ("", "secrets") not in rules_table(one(namespaced, "ClusterRole")["rules"])


def test_the_namespace_selector_reaches_the_operator_and_its_scope_policy(
    helm: str, default: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the operator manages namespaces labelled raytrain.dev/enabled=true, and its
    scope policy refuses its writes elsewhere; `namespaceSelector: null` manages every one."""
    from raytrain_operator.settings import OperatorConfig

    monkeypatch.setenv(
        "RAYTRAIN_NAMESPACE_SELECTOR", operator_env(default)["RAYTRAIN_NAMESPACE_SELECTOR"]
    )
    assert OperatorConfig().namespace_selector == {"matchLabels": {"raytrain.dev/enabled": "true"}}

    def selected(docs: list[dict[str, Any]]) -> str:
        (vap,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                  and d["metadata"]["name"].endswith("-operator-scope")]  # fmt: skip
        variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
        return str(variables["selected"]).strip()

    assert selected(default) == (
        '("raytrain.dev/enabled" in variables.nsLabels && '
        'variables.nsLabels["raytrain.dev/enabled"] == "true")'
    )
    everyone = render(helm, "--set", "namespaceSelector=null")
    assert "RAYTRAIN_NAMESPACE_SELECTOR" not in operator_env(everyone)
    assert selected(everyone) == "true"
    teams = render(
        helm, "--set", "namespaceSelector.matchLabels=null",
        "--set", "namespaceSelector.matchExpressions[0].key=team",
        "--set", "namespaceSelector.matchExpressions[0].operator=In",
        "--set", "namespaceSelector.matchExpressions[0].values={a,b}",
    )  # fmt: skip
    assert (
        selected(teams)
        == '("team" in variables.nsLabels && variables.nsLabels["team"] in ["a","b"])'
    )
    monkeypatch.setenv(
        "RAYTRAIN_NAMESPACE_SELECTOR", operator_env(teams)["RAYTRAIN_NAMESPACE_SELECTOR"]
    )
    assert OperatorConfig().namespace_selector == {
        "matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]
    }


def test_metrics_service_selects_the_operator_pod(default: list[dict[str, Any]]) -> None:
    svc = one(default, "Service")
    labels = one(default, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_chart_crd_is_the_generated_crd(default: list[dict[str, Any]]) -> None:
    crd = trainjob_crd(default)
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["spec"] == crdgen.crd()["spec"]
    template = (CHART / "templates" / "crds.yaml").read_text()
    assert template == crdgen.render_chart_template(), "run `make crds` and commit the result"
    generated = {c["metadata"]["name"]: c for c in crdgen.template_crds()}
    for name, want in generated.items():
        got = [d for d in default if d["metadata"]["name"] == name]
        assert len(got) == 1, name
        assert got[0]["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert got[0]["spec"] == want["spec"]


# -------------------------------------------------------------------------- toggles


def test_crd_toggles(helm: str) -> None:
    # Our CRDs are templates; helm applies crds/ (kopf's peering) as they are.
    without = render(helm, "--set", "crds.install=false")
    assert [d for d in without if d["metadata"]["name"].endswith(".raytrain.dev")] == []
    crd = trainjob_crd(render(helm, "--set", "crds.keep=false"))
    assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})


def test_service_monitor_only_when_enabled(
    helm: str, default: list[dict[str, Any]], full: list[dict[str, Any]]
) -> None:
    assert "ServiceMonitor" not in kinds(default)
    monitor = one(full, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "5s"}
    ]
    svc_labels = one(full, "Service")["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc_labels.items()
    proc = run_helm(
        helm,
        "template",
        "rt",
        str(CHART),
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.service.enabled=false",
        check=False,
    )
    assert proc.returncode != 0
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in proc.stderr


def test_verbose_adds_the_flag(helm: str) -> None:
    deploy = one(render(helm, "--set", "verbose=true"), "Deployment")
    assert "--verbose" in deploy["spec"]["template"]["spec"]["containers"][0]["args"]


# -------------------------------------------------------------------------- full values


def test_full_values_reach_the_pod(full: list[dict[str, Any]]) -> None:
    deploy = one(full, "Deployment")
    assert deploy["metadata"]["name"] == "raytrain"
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod_meta = deploy["spec"]["template"]["metadata"]
    assert pod_meta["annotations"] == {"example.com/owner": "ml-platform"}
    assert pod_meta["labels"]["team"] == "ml-platform"
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/ml/raytrain-operator:0.1.0-rc1"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == [
        "--metrics-port=9090",
        "--health-port=9091",
        "--log-format=json",
        "--peering-mode=required",
        "--peering-name=raytrain-operator",
        "--namespace=team-a",
        "--namespace=team-b",
        "--verbose",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["HTTPS_PROXY"]["value"] == "http://proxy.example.com:3128"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert container["livenessProbe"]["httpGet"]["port"] == "health"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["health"] == 9091
    assert pod["serviceAccountName"] == "raytrain-operator-sa"
    assert pod["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert "nodeAffinity" in pod["affinity"]
    assert pod["priorityClassName"] == "ml-platform-critical"
    assert pod["securityContext"]["runAsUser"] == 20000
    assert [d for d in full if d["metadata"]["name"] == "trainjobs.raytrain.dev"] == []


def test_namespaced_install_has_roles_per_namespace(full: list[dict[str, Any]]) -> None:
    operator = [d for d in full if not is_hook(d)]
    roles = {d["metadata"]["namespace"]: d for d in operator if d["kind"] == "Role"}
    assert sorted(roles) == ["team-a", "team-b"]
    for role in roles.values():
        assert rules_table(role["rules"]) == NAMESPACED_RULES
    bindings = [d for d in operator if d["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "raytrain-operator-sa", "namespace": NAMESPACE}
        ]
    # Only the cluster-scoped reads stay cluster-wide.
    assert rules_table(one(full, "ClusterRole")["rules"]) == CLUSTER_RULES
    sa = one(full, "ServiceAccount")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam")


# ------------------------------------------------------------------------ uninstall hook


def hook_job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Job", hook=True)


def test_uninstall_hook_removes_finalizers_by_default(default: list[dict[str, Any]]) -> None:
    job = hook_job(default)
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TRAINJOBS"] == "removeFinalizers"
    assert env["WATCH_NAMESPACES"] == ""
    # The operator image runs the tested module; it understands what the chart sets.
    assert container["command"] == ["python", "-m", "raytrain_operator.uninstall"]
    assert "args" not in container
    assert Options.from_env(env) == Options(
        "removeFinalizers",
        [],
        120.0,
        operator=(NAMESPACE, one(default, "Deployment")["metadata"]["name"]),
    )
    # It may stop that Deployment (and nothing else) before stripping finalizers.
    stop = [d for d in default if d["kind"] == "Role" and is_hook(d)]
    assert [r["metadata"]["namespace"] for r in stop] == [NAMESPACE]
    assert {
        (rule["resources"][0], tuple(rule["resourceNames"]), tuple(rule["verbs"]))
        for rule in stop[0]["rules"]
    } == {
        ("deployments", (Options.from_env(env).operator or ("", ""))[1:], ("get",)),
        ("deployments/scale", (Options.from_env(env).operator or ("", ""))[1:], ("patch",)),
    }
    (binding,) = [d for d in default if d["kind"] == "RoleBinding" and is_hook(d)]
    assert binding["roleRef"]["name"] == stop[0]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    role = one(default, "ClusterRole", hook=True)
    assert rules_table(role["rules"]) == {("raytrain.dev", "trainjobs"): {"get", "list", "patch"}}
    sa = one(default, "ServiceAccount", hook=True)
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    # RBAC exists before the Job runs.
    weight = int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert int(role["metadata"]["annotations"]["helm.sh/hook-weight"]) < weight


def test_uninstall_hook_delete_mode_may_delete(full: list[dict[str, Any]]) -> None:
    job = hook_job(full)
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TRAINJOBS"] == "deleteTrainJobs"
    assert env["WATCH_NAMESPACES"] == "team-a,team-b"
    assert env["TIMEOUT_SECONDS"] == "300"
    assert Options.from_env(env).namespaces == ["team-a", "team-b"]
    roles = [
        d
        for d in full
        if d["kind"] == "Role" and is_hook(d) and d["metadata"]["namespace"] != NAMESPACE
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert rules_table(role["rules"]) == {
            ("raytrain.dev", "trainjobs"): {"get", "list", "patch", "delete"}
        }


def test_uninstall_hook_can_be_turned_off(helm: str) -> None:
    docs = render(helm, "--set", "uninstall.trainJobs=none")
    assert not [d for d in docs if is_hook(d)]


# ------------------------------------------------------------------------------- schema


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("replicaCount=0", "/replicaCount"),
        ("peering.name=Raytrain", "/peering/name"),
        ("verbose=yes", "/verbose"),
        ("logFormat=xml", "/logFormat"),
        ("metrics.port=0", "/metrics/port"),
        ("uninstall.trainJobs=purge", "/uninstall/trainJobs"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("watchNamespaces[0]=Team_A", "/watchNamespaces/0"),
        ("replicas=3", "replicas"),
        ("podOverrides.allowEnvFrom=maybe", "/podOverrides/allowEnvFrom"),
        ("runtimeStatusPolicy.enabled=yes", "/runtimeStatusPolicy/enabled"),
        ("networkPolicy.enabled=maybe", "/networkPolicy/enabled"),
        ("networkPolicy.extraIngress[0].ports[0].port=80", "/networkPolicy/extraIngress/0"),
    ],
)
def test_schema_refuses_bad_values(helm: str, flag: str, complaint: str) -> None:
    proc = run_helm(helm, "template", "rt", str(CHART), "--set", flag, check=False)
    assert proc.returncode != 0
    assert "schema" in proc.stderr
    assert complaint in proc.stderr


def test_network_policy_peers_reach_the_operator(
    default: list[dict[str, Any]], full: list[dict[str, Any]]
) -> None:
    # The chart's default is the operator's own: KubeRay's pods, any namespace, the dashboard.
    env = operator_env(default)
    assert "RAYTRAIN_NETWORK_POLICY" not in env
    assert parse_ingress(env["RAYTRAIN_NETWORK_POLICY_INGRESS"]) == DEFAULT_INGRESS
    rules = parse_ingress(operator_env(full)["RAYTRAIN_NETWORK_POLICY_INGRESS"])
    assert rules[0] == {
        "from": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}
                },
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
            }
        ],
        "ports": [{"protocol": "TCP", "port": 8265}],
    }
    assert rules[1]["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert rules[1]["from"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
    }


def test_network_policy_off_is_passed_on_and_its_rule_dropped(helm: str) -> None:
    docs = render(helm, "--set", "networkPolicy.enabled=false")
    env = operator_env(docs)
    assert env["RAYTRAIN_NETWORK_POLICY"] == "false"
    assert "RAYTRAIN_NETWORK_POLICY_INGRESS" not in env
    table = rules_table(one(docs, "ClusterRole")["rules"])
    assert ("networking.k8s.io", "networkpolicies") not in table
    assert table == {k: v for k, v in NAMESPACED_RULES.items() if k[1] != "networkpolicies"} | (
        CLUSTER_RULES
    )


def _schema_gaps(values: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    if not isinstance(values, dict) or "properties" not in schema:
        return
    for key, value in values.items():
        if key not in schema["properties"]:
            yield f"{path}.{key}"
            continue
        sub = schema["properties"][key]
        if not sub.get("description"):
            yield f"{path}.{key} (no description)"
        yield from _schema_gaps(value, sub, f"{path}.{key}")


def test_schema_covers_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert list(_schema_gaps(values, schema, "")) == []


def test_every_value_is_documented() -> None:
    """helm-docs style: each value, or a map that holds it, has a `# --` comment above it."""
    undocumented = []
    # Stack of (indent, documented) for the maps we are inside.
    stack: list[tuple[int, bool]] = []
    comment: list[str] = []
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        if stripped.startswith("- ") or ":" not in stripped:
            comment = []
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        inherited = any(doc for _, doc in stack)
        documented = inherited or any(c.startswith("# --") for c in comment)
        key, _, rest = stripped.partition(":")
        if not rest.strip() or rest.strip().startswith("#"):
            stack.append((indent, documented))  # a map: its leaves may carry the comment
        elif not documented:
            undocumented.append(key)
        comment = []
    assert undocumented == []


# ------------------------------------------------------------------ chart and operator agree


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_operator_accepts_the_rendered_args(helm: str, values: pathlib.Path | None) -> None:
    from raytrain_operator.__main__ import parse_args

    docs = render(helm, *(["-f", str(values)] if values else []))
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = parse_args(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.metrics_port == ports["metrics"]
    assert args.health_port == ports["health"]
    roles = [d for d in docs if d["kind"] == "Role" and not is_hook(d)]
    assert sorted(args.namespace) == sorted(r["metadata"]["namespace"] for r in roles)


def test_hook_strips_the_finalizer_the_operator_sets(default: list[dict[str, Any]]) -> None:
    from raytrain_operator.settings import FINALIZER, LEGACY_FINALIZER
    from raytrain_operator.uninstall import OURS

    container = hook_job(default)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == "raytrain_operator.uninstall"
    assert set(OURS) == {FINALIZER, LEGACY_FINALIZER}


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_rbac_create_false_creates_no_rbac(helm: str, values: pathlib.Path | None) -> None:
    docs = render(helm, "--set", "rbac.create=false", *(["-f", str(values)] if values else []))
    rbac = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert not [d["kind"] for d in docs if d["kind"] in rbac]
    assert "Deployment" in kinds(docs)


# --------------------------------------------------------------------------- multi-tenancy


RUNTIME_OWNED = {"trainerStatus", "checkpoint", "disrupted", "outOfMemory"}


def test_runtime_status_policy_guards_every_operator_owned_field(
    default: list[dict[str, Any]],
) -> None:
    """A status field added to the CRD is the operator's unless listed here: the policy must
    guard it, or a per-job account could write it."""
    status_policy = policy(default, "status")
    crd = trainjob_crd(default)
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    guarded = set()
    for validation in status_policy["spec"]["validations"]:
        guarded.update(
            re.findall(r"may not change status\.(\w+) ", validation["messageExpression"])
        )
    assert set(status["properties"]) >= RUNTIME_OWNED
    assert not guarded & RUNTIME_OWNED
    # Guarding a field the CRD does not have yet is harmless (has() is false on both sides).
    assert set(status["properties"]) - RUNTIME_OWNED - guarded == set()


def test_the_runtime_knows_the_status_policys_refusal_of_another_attempt(
    default: list[dict[str, Any]],
) -> None:
    """The runtime stops reporting when the policy refuses a report as another attempt's; it
    knows the refusal by these words."""
    messages = [v["messageExpression"] for v in policy(default, "status")["spec"]["validations"]]
    assert sum(SUPERSEDED in m for m in messages) == 1, messages


@pytest.mark.parametrize("which", ["status", "scope"])
def test_runtime_policies_spare_the_operator(default: list[dict[str, Any]], which: str) -> None:
    vap = policy(default, which)
    binding = policy(default, which, "ValidatingAdmissionPolicyBinding")
    account = one(default, "ServiceAccount")["metadata"]
    (condition,) = vap["spec"]["matchConditions"]
    operator = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert f"request.userInfo.username != '{operator}'" in condition["expression"]
    assert binding["spec"] == {
        "policyName": vap["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    assert vap["spec"]["failurePolicy"] == "Fail"


def test_runtime_scope_policy_matches_only_tokens_of_the_jobs_ray_pods(
    default: list[dict[str, Any]],
) -> None:
    """An account of someone else's that ends in `-runtime` keeps its pod rights: the policy
    needs the token's pod to be one of the job's (`<job>-<attempt>-...`)."""
    (condition,) = policy(default, "scope")["spec"]["matchConditions"]
    assert (
        "'authentication.kubernetes.io/pod-name' in request.userInfo.extra"
        in (condition["expression"])
    )
    assert "'-[0-9]+-'" in condition["expression"]


@pytest.mark.parametrize(
    ("flag", "left"),
    [
        ("runtimeStatusPolicy.enabled=false", "scope"),
        ("runtimeScopePolicy.enabled=false", "status"),
    ],
)
def test_each_runtime_policy_can_be_turned_off(helm: str, flag: str, left: str) -> None:
    docs = render(helm, "--set", flag, "--set", "operatorScopePolicy.enabled=false")
    names = [d["metadata"]["name"] for d in docs if d["kind"].startswith("ValidatingAdmission")]
    assert names and all(n.endswith(f"-runtime-{left}") for n in names), names


def operator_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_pod_overrides_are_allowed_by_default(
    default: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from raytrain_operator.settings import OperatorConfig

    env = operator_env(default)
    assert "RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME" not in env
    assert "RAYTRAIN_ALLOW_ENV_FROM" not in env
    monkeypatch.delenv("RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME", raising=False)
    monkeypatch.delenv("RAYTRAIN_ALLOW_ENV_FROM", raising=False)
    config = OperatorConfig()
    assert config.allow_service_account_name and config.allow_env_from


def test_multi_tenant_profile_forbids_both_overrides(
    helm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raytrain_operator.settings import OperatorConfig

    docs = render(helm, "-f", str(MULTI_TENANT_VALUES))
    env = operator_env(docs)
    for name in ("RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME", "RAYTRAIN_ALLOW_ENV_FROM"):
        monkeypatch.setenv(name, env[name])
    config = OperatorConfig()
    assert not config.allow_service_account_name
    assert not config.allow_env_from
    assert policy(docs, "status") and policy(docs, "scope")


def test_the_pod_policy_grants_reach_the_operator(
    helm: str, default: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """podOverrides.allowHostNetwork, allowNetworkProfiles, volumeTypes, runtimeClasses and
    schedulers: unset by default (the operator then grants none), passed on when an
    administrator sets them."""
    from raytrain_operator.settings import OperatorConfig

    env = operator_env(default)
    assert not {"RAYTRAIN_ALLOW_HOST_NETWORK", "RAYTRAIN_ALLOW_NETWORK_PROFILES"} & set(env)
    assert not {"RAYTRAIN_VOLUME_TYPES", "RAYTRAIN_RUNTIME_CLASSES", "RAYTRAIN_SCHEDULERS"} & set(
        env
    )
    docs = render(
        helm,
        "--set", "podOverrides.allowHostNetwork=true",
        "--set", "podOverrides.allowNetworkProfiles=true",
        "--set", "podOverrides.volumeTypes={nfs,hostPath}",
        "--set", "podOverrides.runtimeClasses={nvidia}",
        "--set", "podOverrides.schedulers={volcano,kai-scheduler}",
    )  # fmt: skip
    env = operator_env(docs)
    names = (
        "RAYTRAIN_ALLOW_HOST_NETWORK",
        "RAYTRAIN_ALLOW_NETWORK_PROFILES",
        "RAYTRAIN_VOLUME_TYPES",
        "RAYTRAIN_RUNTIME_CLASSES",
        "RAYTRAIN_SCHEDULERS",
    )
    for name in names:
        monkeypatch.setenv(name, env[name])
    config = OperatorConfig()
    assert config.allow_host_network and config.allow_network_profiles
    assert config.volume_types == {"nfs", "hostPath"}
    assert config.runtime_classes == {"nvidia"}
    assert config.schedulers == {"volcano", "kai-scheduler"}


def test_the_operator_scope_policy_matches_the_operators_account_only(
    helm: str, default: list[dict[str, Any]]
) -> None:
    """It binds the operator's own account (and no other) to the children it makes; turned
    off, it is gone."""
    (vap,) = [
        d
        for d in default
        if d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"].endswith("-operator-scope")
    ]
    account = one(default, "ServiceAccount")["metadata"]
    (condition,) = vap["spec"]["matchConditions"]
    operator = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert condition["expression"] == f"request.userInfo.username == '{operator}'"
    assert vap["spec"]["failurePolicy"] == "Fail"
    written = {
        r for rule in vap["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]
    }
    # Every kind the operator's RBAC lets it create or delete, TrainJobs aside (its parent).
    creatable = set()
    for role in (d for d in default if d["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            if {"create", "delete"} & set(rule["verbs"]) and "events" not in rule["resources"]:
                creatable |= set(rule["resources"])
    assert creatable <= written, creatable - written
    docs = render(helm, "--set", "operatorScopePolicy.enabled=false")
    assert not [d for d in docs if d["metadata"]["name"].endswith("-operator-scope")]


# ------------------------------------------------------------------------------- peering


def test_peering_object_matches_the_scope(
    default: list[dict[str, Any]], full: list[dict[str, Any]]
) -> None:
    """Cluster-wide: one ClusterKopfPeering; namespaced: a KopfPeering in each watched
    namespace. kopf finds it by the name the Deployment passes."""
    peering = one(default, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "raytrain-operator"
    assert "KopfPeering" not in kinds(default)
    names = {d["metadata"]["name"]: d for d in default if d["kind"] == "CustomResourceDefinition"}
    for crd_name, scope in [
        ("clusterkopfpeerings.kopf.dev", "Cluster"),
        ("kopfpeerings.kopf.dev", "Namespaced"),
    ]:
        spec = names[crd_name]["spec"]
        assert spec["group"] == "kopf.dev" and spec["scope"] == scope
        (version,) = spec["versions"]
        assert version["name"] == "v1" and "subresources" not in version  # kopf patches status
    per_ns = [d for d in full if d["kind"] == "KopfPeering"]
    assert sorted(d["metadata"]["namespace"] for d in per_ns) == ["team-a", "team-b"]
    assert {d["metadata"]["name"] for d in per_ns} == {"raytrain-operator"}
    assert "ClusterKopfPeering" not in kinds(full)
    env = one(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env


def test_peering_off_runs_standalone_with_one_replica(helm: str) -> None:
    docs = render(helm, "--set", "peering.enabled=false")
    assert not {"ClusterKopfPeering", "KopfPeering"} & set(kinds(docs))
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--peering-mode=off" in args
    groups = {g for rule in one(docs, "ClusterRole")["rules"] for g in rule["apiGroups"]}
    assert "kopf.dev" not in groups
    proc = run_helm(
        helm, "template", "rt", str(CHART), "--set", "peering.enabled=false",
        "--set", "replicaCount=2", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "replicaCount" in proc.stderr, proc.stderr
    two = one(render(helm, "--set", "replicaCount=2"), "Deployment")
    assert two["spec"]["replicas"] == 2
