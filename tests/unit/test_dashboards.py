"""The chart's Grafana dashboard and the PodMonitor of Ray's own metrics.

The dashboard may only query what is really exported: the operator's metrics, read from the
prometheus_client registry it serves (with the suffixes prometheus_client adds), and the Ray
metrics defined by the installed Ray (the reporter agent's node gauges and Ray Train V2's
metrics, which Ray's exporter serves under the `ray_` prefix). The PodMonitor must select the
head and worker pods the real builders template, and scrape the metrics port their Ray
container ends up with.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from _factories import meta, trainjob
from _required import required

from raytrain_operator.builders.rayjob import build_rayjob

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "raytrain-operator"
DASHBOARD = CHART / "dashboards" / "raytrain.json"
NAMESPACE = "raytrain-system"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

#: Labels Prometheus (through the Prometheus Operator's ServiceMonitor and PodMonitor) puts on
#: every scraped series besides the exporter's own.
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "container", "endpoint", "service"}
)
#: Series prometheus_client serves for one metric family, by its type.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "unknown": ("",),
}
#: KubeRay's default metrics port (ray-operator v1.6.2, controllers/ray/utils/constant.go:
#: MetricsPortName, DefaultMetricsPort). KubeRay adds it to the Ray container of the head and of
#: every worker when the container has no port of that name (common/pod.go, DefaultHeadPodTemplate
#: and DefaultWorkerPodTemplate) and passes `--metrics-export-port` with it unless rayStartParams
#: set one (common/pod.go, setMissingRayStartParams).
KUBERAY_METRICS_PORT = ("metrics", 8080)
#: PromQL functions and aggregations the dashboard may call.
FUNCTIONS = frozenset(
    {
        "sum",
        "avg",
        "max",
        "min",
        "count",
        "topk",
        "rate",
        "irate",
        "increase",
        "delta",
        "histogram_quantile",
        "max_over_time",
        "min_over_time",
        "last_over_time",
        "avg_over_time",
        "clamp_min",
        "clamp_max",
        "time",
        "timestamp",
        "vector",
        "abs",
        "round",
    }
)
#: Keywords followed by a list of label names.
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset"})
#: A TrainJob status with every value a per-job gauge shows.
FULL_STATUS: dict[str, Any] = {
    "restarts": 1,
    "trainerStatus": {
        "progressPercentage": 40,
        "epoch": 2,
        "lastUpdatedTime": "2026-11-23T10:00:00Z",
        "lastProgressTime": "2026-11-23T10:00:00Z",
        "stepTime": {
            "skewPercent": 66.7,
            "straggler": True,
            "slowest": {"rank": 1, "pod": "digits-0-worker-b", "node": "node-b"},
        },
    },
    "checkpoint": {"count": 3, "lastTime": "2026-11-23T09:59:00Z"},
    "goodput": {
        "allocatedSeconds": 100.0,
        "productiveSeconds": 60.0,
        "lostSeconds": 20.0,
        "allocatedGPUSeconds": 200.0,
        "productiveGPUSeconds": 120.0,
        "lostGPUSeconds": 40.0,
    },
}
GRAFANA_VARIABLES = frozenset({"__rate_interval", "__interval", "__range", "__range_s"})


# ------------------------------------------------------------------------------------ helm


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


def run_template(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, "template", "rt", str(CHART), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
    )


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    proc = run_template(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.fixture(scope="module")
def default(helm: str) -> list[dict[str, Any]]:
    return render(helm)


@pytest.fixture(scope="module")
def enabled(helm: str) -> list[dict[str, Any]]:
    return render(helm, "--set", "dashboards.enabled=true", "--set", "podMonitor.enabled=true")


@pytest.fixture(scope="module")
def pod_monitor(enabled: list[dict[str, Any]]) -> dict[str, Any]:
    (monitor,) = of_kind(enabled, "PodMonitor")
    return monitor


# ------------------------------------------------------------------ what is really exported


def operator_metrics() -> dict[str, set[str]]:
    """Series name -> label names, for every series the operator's /metrics can serve."""
    from prometheus_client import REGISTRY
    from prometheus_client.metrics import MetricWrapperBase

    from raytrain_operator import metrics

    # A labelled metric has no samples until a child exists: its label names come from it.
    wrappers = {w._name: w for w in vars(metrics).values() if isinstance(w, MetricWrapperBase)}
    # The TrainJob gauges are registered when the operator starts; collect them directly, from
    # one job whose status holds every value (a per-job gauge has no series without one).
    job = metrics.TrainJobState(
        "Running", frozenset(), "team-a", "digits", metrics.job_values(FULL_STATUS)
    )
    families = [*REGISTRY.collect(), *metrics.TrainJobCollector(lambda: [job]).collect()]
    series: dict[str, set[str]] = {}
    for family in families:
        labels = {key for sample in family.samples for key in sample.labels} - {"le"}
        if family.name in wrappers:
            labels |= set(wrappers[family.name]._labelnames)
        # A label the scrape target also sets is kept as `exported_<label>` (the ServiceMonitor
        # does not honor the exporter's labels): raytrain_attempt_failures_total's `namespace`.
        labels |= {f"exported_{label}" for label in labels & TARGET_LABELS}
        for suffix in SUFFIXES[family.type]:
            series[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    assert "raytrain_reconciles_total" in series, sorted(series)
    return series


def ray_metrics() -> dict[str, set[str]]:
    """`ray_<name>` -> tag keys, for the node gauges of Ray's reporter agent and Ray Train V2's
    controller and worker metrics, as defined by the installed Ray."""
    try:
        from ray.dashboard.modules.reporter.reporter_agent import METRICS_GAUGES
        from ray.train.v2._internal.metrics.controller import ControllerMetrics
        from ray.train.v2._internal.metrics.worker import WorkerMetrics
    except ImportError as exc:
        if required():
            raise
        pytest.skip(f"Ray is not installed ({exc}); `make install` installs the runtime extra")
    series = {
        f"ray_{g.name}": {str(key) for key in g.view.columns} for g in METRICS_GAUGES.values()
    }
    train = {
        **ControllerMetrics.get_controller_metrics("run", "id"),
        **WorkerMetrics.get_worker_metrics("run", "id", 0, "actor"),
    }
    for name, metric in train.items():
        series[f"ray_{name}"] = set(metric._get_tag_keys())
    return series


def relabelled(monitor: dict[str, Any]) -> set[str]:
    """Labels the PodMonitor's relabelings add to every Ray series."""
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    return {r["targetLabel"] for r in endpoint.get("relabelings") or [] if "targetLabel" in r}


@pytest.fixture(scope="module")
def known(pod_monitor: dict[str, Any]) -> dict[str, set[str]]:
    extra = relabelled(pod_monitor)
    ray = {name: labels | extra for name, labels in ray_metrics().items()}
    return {**operator_metrics(), **ray}


# --------------------------------------------------------------------------------- PromQL


TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<range>\[[^\]]*\])
    |(?P<var>\$\{?\w+\}?)
    |(?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    |(?P<op>=~|!~|!=|==|>=|<=|[-+*/%^(){},=<>])
    |(?P<space>\s+)
    """,
    re.VERBOSE,
)


@dataclass
class Query:
    """What one PromQL expression names."""

    selectors: list[tuple[str, set[str]]] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)


def tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        found = TOKEN.match(expr, pos)
        assert found is not None, f"cannot read {expr[pos:]!r} in {expr!r}"
        kind = found.lastgroup or ""
        if kind != "space":
            out.append((kind, found.group()))
        pos = found.end()
    depth = 0
    for _, text in out:
        depth += {"(": 1, ")": -1}.get(text, 0)
        assert depth >= 0, f"a ')' closes nothing in {expr!r}"
    assert depth == 0, f"a '(' is never closed in {expr!r}"
    return out


def parse(expr: str) -> Query:
    query = Query()
    toks = tokens(expr)
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "ident" and text in GROUPING and following == "(":
            i += 2
            while toks[i][1] != ")":
                if toks[i][0] == "ident":
                    query.grouping.add(toks[i][1])
                i += 1
        elif kind == "ident" and (following == "(" or following in ("by", "without")):
            query.functions.add(text)  # a function, or an aggregation: `sum by (x) (...)`
        elif kind == "ident" and text not in KEYWORDS | GROUPING:
            labels: set[str] = set()
            if following == "{":
                i += 2
                while toks[i][1] != "}":
                    if toks[i][0] == "ident":
                        labels.add(toks[i][1])
                    i += 1
            query.selectors.append((text, labels))
        elif text == "{":
            raise AssertionError(f"a selector without a metric name in {expr!r}")
        i += 1
    return query


def test_the_promql_reader_reads_what_the_dashboard_writes() -> None:
    query = parse(
        'histogram_quantile(0.95, sum by (le, handler) (rate(x_bucket{job=~"$operator", '
        'a!="}"}[$__rate_interval]))) / on() group_left vector(1) > bool 0'
    )
    assert query.selectors == [("x_bucket", {"job", "a"})]
    assert query.grouping == {"le", "handler"}
    assert query.functions == {"histogram_quantile", "sum", "rate", "vector"}


# ------------------------------------------------------------------------------ dashboard


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels") or []  # a collapsed row holds its panels


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(where, expression, legend) of every panel target and every query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets") or []:
            yield f"panel {panel['title']!r}", target["expr"], target.get("legendFormat", "")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        text = variable["query"]
        text = text["query"] if isinstance(text, dict) else text
        found = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", text)
        assert found, f"variable {variable['name']!r}: expected label_values(<selector>, <label>)"
        yield f"variable {variable['name']!r}", found[1], "{{" + found[2] + "}}"


def test_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


def test_every_panel_has_a_title_an_id_and_the_datasource_variable() -> None:
    ids: list[int] = []
    for panel in panels(load_dashboard()):
        assert panel.get("title"), f"panel {panel.get('id')} has no title"
        assert isinstance(panel.get("id"), int), f"panel {panel['title']!r} has no id"
        ids.append(panel["id"])
        assert panel.get("datasource") == DATASOURCE, panel["title"]
        refs = [t["refId"] for t in panel.get("targets") or []]
        assert len(refs) == len(set(refs)), f"panel {panel['title']!r}: refIds {refs}"
        for target in panel.get("targets") or []:
            assert target.get("datasource") == DATASOURCE, panel["title"]
            assert target.get("expr"), f"panel {panel['title']!r}: a target without a query"
        if panel["type"] != "row":
            assert panel.get("targets"), f"panel {panel['title']!r} queries nothing"
    assert len(ids) == len(set(ids)), f"panel ids repeat: {sorted(ids)}"


@pytest.mark.runtime  # the Ray metrics it checks against are the installed Ray's
def test_every_query_names_only_exported_metrics_and_their_labels(
    known: dict[str, set[str]],
) -> None:
    dashboard = load_dashboard()
    defined = {v["name"] for v in dashboard["templating"]["list"]} | GRAFANA_VARIABLES
    problems: list[str] = []
    for where, expr, legend in queries(dashboard):
        query = parse(expr)
        assert query.selectors, f"{where}: no metric in {expr!r}"
        for function in query.functions - FUNCTIONS:
            problems.append(f"{where}: {function}() is not a PromQL function this test knows")
        in_scope: set[str] = set(TARGET_LABELS)
        for metric, labels in query.selectors:
            if metric not in known:
                problems.append(f"{where}: {metric} is not exported")
                continue
            in_scope |= known[metric]
            for label in sorted(labels - known[metric] - TARGET_LABELS):
                problems.append(f"{where}: {metric} has no label {label!r}")
        for label in sorted(query.grouping - in_scope):
            problems.append(f"{where}: groups by {label!r}, which none of its metrics has")
        for label in sorted(set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend)) - in_scope):
            problems.append(f"{where}: the legend names {label!r}, which none of its metrics has")
        for name in sorted(set(re.findall(r"\$\{?(\w+)", expr)) - defined):
            problems.append(f"{where}: ${name} is not a dashboard variable")
    assert problems == []


def test_per_job_gauges_are_read_by_trainjob_namespace() -> None:
    """On the operator's series `namespace` is the operator's own (the scrape target's): a
    query of a per-job gauge that selects or groups by it reads the wrong namespace."""
    per_job = {
        name for name, labels in operator_metrics().items() if "trainjob_namespace" in labels
    }
    assert "raytrain_trainjob_restarts" in per_job
    problems = []
    for where, expr, legend in queries(load_dashboard()):
        query = parse(expr)
        for metric, labels in query.selectors:
            if metric in per_job and "namespace" in labels | query.grouping:
                problems.append(f"{where}: {metric} read by namespace, not trainjob_namespace")
        if {m for m, _ in query.selectors} <= per_job and "{{namespace}}" in legend:
            problems.append(f"{where}: the legend shows the operator's namespace")
    assert problems == []


def test_every_operator_metric_has_a_panel() -> None:
    queried = {
        metric for _, expr, _ in queries(load_dashboard()) for metric, _ in parse(expr).selectors
    }
    families = {
        re.sub(r"_(total|bucket|count|sum|created)$", "", name)
        for name in operator_metrics()
        if name.startswith("raytrain_")
    }
    shown = {re.sub(r"_(total|bucket|count|sum|created)$", "", name) for name in queried}
    assert sorted(families - shown) == []


def test_dashboard_configmap_only_when_enabled(
    default: list[dict[str, Any]], enabled: list[dict[str, Any]]
) -> None:
    assert of_kind(default, "ConfigMap") == []
    (configmap,) = of_kind(enabled, "ConfigMap")
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["raytrain.json"]) == load_dashboard()


def test_dashboard_configmap_values(helm: str) -> None:
    docs = render(
        helm,
        "--set",
        "dashboards.enabled=true",
        "--set",
        "dashboards.label=grafana_dashboard_ml",
        "--set-string",
        "dashboards.labelValue=yes",
        "--set",
        "dashboards.namespace=monitoring",
        "--set",
        "dashboards.annotations.grafana_folder=Training",
    )
    (configmap,) = of_kind(docs, "ConfigMap")
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["grafana_dashboard_ml"] == "yes"
    assert "grafana_dashboard" not in configmap["metadata"]["labels"]
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Training"}


# ----------------------------------------------------------------------------- PodMonitor


def rayjobs() -> list[dict[str, Any]]:
    """RayJobs the real builders make: fixed size, autoscaled, and with the user's labels on
    the TrainJob and on both pod templates."""
    labelled = {"team": "vision", "app.kubernetes.io/name": "digits"}
    return [
        build_rayjob(trainjob(), meta(), 1, suspend=False),
        build_rayjob(
            trainjob(
                scaling={"minWorkers": 1, "maxWorkers": 4},
                head={"labels": {"raytrain.dev/role": "not-head", **labelled}},
                workerTemplate={"labels": {"app.kubernetes.io/managed-by": "me", **labelled}},
            ),
            meta(labels=labelled),
            3,
            suspend=False,
        ),
    ]


def ray_templates(rayjob: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    out = {"head": cluster["headGroupSpec"]}
    for group in cluster["workerGroupSpecs"]:
        out[f"worker group {group['groupName']}"] = group
    return out


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector against a pod's labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def kuberay_ports(container: dict[str, Any], start_params: dict[str, str]) -> dict[str, int]:
    """The Ray container's named ports once KubeRay has added its default metrics port, each
    checked against the port Ray is told to export its metrics on."""
    ports = {p["name"]: p["containerPort"] for p in container.get("ports") or [] if "name" in p}
    name, number = KUBERAY_METRICS_PORT
    ports.setdefault(name, number)
    exported = int(start_params.get("metrics-export-port", number))
    assert ports[name] == exported, (
        f"container {container['name']}: port {name!r} is {ports[name]} but Ray exports its "
        f"metrics on {exported}"
    )
    return ports


def fieldref_labels(container: dict[str, Any]) -> set[str]:
    """Pod labels the container reads through the downward API: labels KubeRay adds that the
    builders rely on (`ray.io/cluster`)."""
    paths = [
        e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container.get("env") or []
        if "fieldRef" in (e.get("valueFrom") or {})
    ]
    return {found[1] for p in paths if (found := re.fullmatch(r"metadata\.labels\['(.+)'\]", p))}


def test_pod_monitor_only_when_enabled(default: list[dict[str, Any]]) -> None:
    assert of_kind(default, "PodMonitor") == []


def test_pod_monitor_selects_the_ray_pods_and_their_metrics_port(
    pod_monitor: dict[str, Any],
) -> None:
    assert pod_monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert pod_monitor["metadata"]["namespace"] == NAMESPACE
    selector = pod_monitor["spec"]["selector"]
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    sources = {
        source.removeprefix("__meta_kubernetes_pod_label_")
        for relabel in endpoint.get("relabelings") or []
        for source in relabel.get("sourceLabels") or []
        if source.startswith("__meta_kubernetes_pod_label_")
    }
    for rayjob in rayjobs():
        submitter = rayjob["spec"]["submitterPodTemplate"]["metadata"]["labels"]
        assert not selects(selector, submitter), "the submitter pod serves no Ray metrics"
        for where, group in ray_templates(rayjob).items():
            template = group["template"]
            labels = template["metadata"]["labels"]
            assert selects(selector, labels), f"{where}: {selector} does not select {labels}"
            (container,) = template["spec"]["containers"]
            ports = kuberay_ports(container, group.get("rayStartParams") or {})
            assert endpoint["port"] in ports, f"{where}: no port {endpoint['port']!r}: {ports}"
            # Prometheus names a pod label by its key with every other character as `_`.
            present = {re.sub(r"[^A-Za-z0-9_]", "_", k) for k in labels}
            present |= {re.sub(r"[^A-Za-z0-9_]", "_", k) for k in fieldref_labels(container)}
            assert sources <= present, f"{where}: relabels {sources - present}, not on the pod"


def test_pod_monitor_labels_ray_series_with_the_trainjob(pod_monitor: dict[str, Any]) -> None:
    assert {"trainjob", "attempt", "role"} <= relabelled(pod_monitor)


def test_pod_monitor_values(helm: str, pod_monitor: dict[str, Any]) -> None:
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["path"], endpoint["interval"], endpoint["scrapeTimeout"]) == (
        "/metrics",
        "30s",
        "10s",
    )
    on = ["--set", "podMonitor.enabled=true"]
    watched = render(helm, *on, "--set", "watchNamespaces={team-a,team-b}")
    (monitor,) = of_kind(watched, "PodMonitor")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    (monitor,) = of_kind(
        render(
            helm,
            *on,
            "--set",
            "watchNamespaces={team-a,team-b}",
            "--set",
            "podMonitor.namespaces={team-c}",
            "--set",
            "podMonitor.interval=15s",
            "--set",
            "podMonitor.scrapeTimeout=5s",
            "--set",
            "podMonitor.labels.release=kube-prometheus-stack",
        ),
        "PodMonitor",
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-c"]}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "5s")


def test_lint_is_clean_with_both_on(helm: str) -> None:
    full = CHART / "ci" / "full-values.yaml"
    args = ["--set", "podMonitor.enabled=true", "--set", "dashboards.namespace=monitoring"]
    proc = subprocess.run(
        [helm, "lint", "--strict", str(CHART), "-f", str(full), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = render(helm, "-f", str(full), *args)
    (monitor,) = of_kind(docs, "PodMonitor")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b", "team-c"]}
    (configmap,) = of_kind(docs, "ConfigMap")
    assert configmap["metadata"]["labels"]["team"] == "ml-platform"
    assert configmap["metadata"]["namespace"] == "monitoring"


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("dashboards.enabled=yes", "/dashboards/enabled"),
        ("dashboards.label=", "/dashboards/label"),
        ("dashboards.namespace=Monitoring", "/dashboards/namespace"),
        ("podMonitor.enabled=yes", "/podMonitor/enabled"),
        ("podMonitor.interval=30", "/podMonitor/interval"),
        ("podMonitor.namespaces[0]=Team_A", "/podMonitor/namespaces/0"),
        ("podMonitor.port=9090", "podMonitor"),
    ],
)
def test_schema_refuses_bad_values(helm: str, flag: str, complaint: str) -> None:
    proc = run_template(helm, "--set", flag)
    assert proc.returncode != 0
    assert "schema" in proc.stderr
    assert complaint in proc.stderr
