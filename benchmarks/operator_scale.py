"""Operator at scale: N TrainJobs on a local control plane with many fake 8-GPU nodes.

Measures, in one run:
- baseline: a raw API create loop (N TrainJobs into a namespace no operator watches), creates/s;
- TrainJob created → RayJob created latency, p50/p99 (client clock: from the create call's
  return to the RayJob's ADDED watch event), and throughput in TrainJobs/s, as a ratio to the
  baseline create rate;
- operator RSS (VmRSS of the process, and its peak, VmHWM), open sockets and threads once all N
  have their RayJob; the creates go as fast as the API server takes them, or at most
  --create-rate per second;
- API requests per TrainJob lifecycle (create → RayJob → runtime reports Succeeded →
  Succeeded condition → delete → gone), from kube-apiserver's `apiserver_request_total` over
  the resources in COUNTED, less the requests this script makes itself; in all, and by verb
  and resource (`api_requests_per_lifecycle_by_request`). The KubeRay operator is paused
  (SIGSTOP) for this part only, so that the count is the operator's own; the
  controller-manager's few requests are included, so the figure is an upper bound;
- the idle steady state once all N have their RayJob: over --idle-seconds (default 600), the
  operator's CPU seconds, its RSS at the end, its passes/s by what started them (its own
  /metrics), the watch events/s of the kinds it watches in its namespace (TrainJobs, RayJobs,
  RayClusters; counted by this script's own watches, so that passes/s can be set against
  them), and kube-apiserver's requests/s by resource (KubeRay's included while it runs).

The KubeRay operator runs during the N-job part and the idle window (its Ray clusters come up
on the KWOK nodes; there is room for one 8-GPU worker pod per node) unless --pause-kuberay.

    python benchmarks/operator_scale.py [--jobs 1000] [--nodes 500] [--idle-seconds 600]
        [--create-rate PER_S] [--pause-kuberay] [--keep-cluster]

Uses its own cluster (RAYTRAIN_CLUSTER=raytrain-bench) so tests' clusters are left alone, and
stops it at the end unless --keep-cluster. The lifecycle count runs first, on an operator with
no other TrainJob, so the resync traffic of the 1,000 does not inflate it, and once the
operator watches (a warm-up TrainJob has had its RayJob and is gone): a TrainJob made before
the operator's watch started would be listed at its start, not created under a running
operator.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _ports import free_port  # noqa: E402  (one helper, shared with the tests)

GROUP, VERSION, PLURAL = "raytrain.dev", "v1alpha1", "trainjobs"
COUNTED = {
    "trainjobs",
    "rayjobs",
    "configmaps",
    "serviceaccounts",
    "roles",
    "rolebindings",
    "events",
    "secrets",
    "persistentvolumeclaims",
    "poddisruptionbudgets",
    "networkpolicies",
    "rayclusters",
    "pods",
}
#: A series of `apiserver_request_total`: (resource, subresource, verb).
Series = tuple[str, str, str]


def cluster_up(nodes: int, env: dict[str, str]) -> str:
    """The cluster's kubeconfig; a cluster that fails to come up is stopped before the error
    goes on. KWOK makes about 10 nodes Ready a second here, so each wait of `up` gets half a
    second per node (2,000 nodes took over the default 180 s)."""
    timeout = env.get("RAYTRAIN_UP_TIMEOUT") or str(max(180, nodes // 2))
    try:
        out = subprocess.run(
            ["bash", str(ROOT / "e2e/controlplane/cluster.sh"), "up"],
            env={**env, "RAYTRAIN_NODES": str(nodes), "RAYTRAIN_UP_TIMEOUT": timeout},
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout
    except subprocess.CalledProcessError:
        subprocess.run(
            ["bash", str(ROOT / "e2e/controlplane/cluster.sh"), "down"], env=env, check=False
        )
        raise
    return out.strip().splitlines()[-1].split("=", 1)[1]


def trainjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "image": "raytrain/trainer-runtime:0.1.0",
            "entrypoint": "examples.digits.train:train_loop_per_worker",
            "scaling": {"numWorkers": 8, "workersPerPod": 8, "useGpu": True},
            "storage": {"s3": {"uri": "s3://bench/checkpoints"}},
        },
    }


def request_series(api_client: Any) -> dict[Series, float]:
    """kube-apiserver's request counts so far, by resource, subresource and verb."""
    response = api_client.call_api(
        "/metrics",
        "GET",
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=False,
    )
    counts: dict[Series, float] = {}
    for line in response.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
        key = (labels.get("resource", ""), labels.get("subresource", ""), labels.get("verb", ""))
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory now (VmRSS) or at its peak so far (VmHWM), in MiB."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def process_counts(pid: int) -> dict[str, int]:
    """Open sockets (its connections to the API server, its watches among them) and threads."""
    sockets = 0
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            sockets += os.readlink(fd).startswith("socket:")
        except OSError:
            continue  # closed meanwhile
    threads = len(list(pathlib.Path(f"/proc/{pid}/task").iterdir()))
    return {"sockets": sockets, "threads": threads}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--lifecycle-jobs", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=600.0)
    parser.add_argument(
        "--pause-kuberay",
        action="store_true",
        help="keep KubeRay paused (SIGSTOP) for the whole run, not only the lifecycle count",
    )
    parser.add_argument(
        "--create-rate",
        type=float,
        default=0.0,
        help="create the TrainJobs at most this many per second (default 0: as fast as the "
        "API server takes them)",
    )
    parser.add_argument("--keep-cluster", action="store_true")
    args = parser.parse_args()

    from kubernetes import client, config, watch

    env = {**os.environ, "RAYTRAIN_CLUSTER": os.environ.get("RAYTRAIN_CLUSTER", "raytrain-bench")}
    t0 = time.monotonic()
    kubeconfig = cluster_up(args.nodes, env)
    print(f"cluster with {args.nodes} fake 8-GPU nodes up in {time.monotonic() - t0:.0f}s")
    state = pathlib.Path(kubeconfig).parent
    pid = 0
    if (state / "kuberay-operator.pid").exists():
        pid = int((state / "kuberay-operator.pid").read_text())
        try:
            os.kill(pid, signal.SIGSTOP)  # paused for the lifecycle count
        except ProcessLookupError:
            pid = 0

    config.load_kube_config(config_file=kubeconfig)
    api_client = client.ApiClient()
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    for ns in ("bench-raw", "bench"):
        recreate_namespace(core, custom, ns)

    # Baseline: raw creates, no operator watching.
    start = time.monotonic()
    for i in range(args.jobs):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "bench-raw", PLURAL, trainjob(f"raw-{i}")
        )
    raw_rate = args.jobs / (time.monotonic() - start)
    print(f"baseline: raw create loop {raw_rate:.1f} TrainJobs/s")

    metrics_port = free_port()
    operator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raytrain_operator",
            "--namespace",
            "bench",
            "--bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(metrics_port),
            "--health-port",
            str(free_port()),
        ],
        env={**env, "KUBECONFIG": kubeconfig},
        stdout=subprocess.DEVNULL,
        stderr=open(state / "bench-operator.log", "w"),  # noqa: SIM115
    )
    operator_started = time.monotonic()
    try:
        result: dict[str, Any] = {"jobs": args.jobs, "nodes": args.nodes}
        _warm_up(custom)
        result.update(_lifecycle(args, api_client, custom, metrics_port))
        if pid and not args.pause_kuberay:
            os.kill(pid, signal.SIGCONT)
        result["kuberay"] = "paused" if args.pause_kuberay or not pid else "running"
        code = _measure(args, custom, operator, raw_rate, watch, result, operator_started)
        if code == 0 and args.idle_seconds > 0:
            result.update(_idle(args, api_client, operator, metrics_port))
        print(json.dumps(result, indent=2))
        return code
    finally:
        operator.terminate()
        operator.wait(30)
        if pid:
            os.kill(pid, signal.SIGCONT)
        if not args.keep_cluster:
            subprocess.run(
                ["bash", str(ROOT / "e2e/controlplane/cluster.sh"), "down"],
                env=env,
                check=False,
                stdout=subprocess.DEVNULL,
            )


def recreate_namespace(core: Any, custom: Any, ns: str) -> None:
    """An empty namespace `ns`: TrainJobs left by an earlier run lose their finalizer first."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.read_namespace(ns)
    except ApiException as exc:
        if exc.status != 404:
            raise
    else:
        for obj in custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, obj["metadata"]["name"],
                {"metadata": {"finalizers": None}},
            )  # fmt: skip
        core.delete_namespace(ns)
        deadline = time.monotonic() + 300
        while True:
            try:
                core.read_namespace(ns)
            except ApiException as exc:
                if exc.status == 404:
                    break
                raise
            if time.monotonic() > deadline:
                raise SystemExit(f"namespace {ns} still there after 300 s")
            time.sleep(1.0)
    core.create_namespace({"metadata": {"name": ns}})


def _measure(
    args: argparse.Namespace,
    custom: Any,
    operator: subprocess.Popen[bytes],
    raw_rate: float,
    watch: Any,
    result: dict[str, Any],
    operator_started: float,
) -> int:
    """TrainJob created -> RayJob created for args.jobs TrainJobs, throughput and RSS."""
    created: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = threading.Event()

    def watch_rayjobs() -> None:
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object,
            "ray.io",
            "v1",
            "bench",
            "rayjobs",
            timeout_seconds=3600,
        )
        for event in stream:
            if event["type"] != "ADDED":
                continue
            owner = event["object"]["metadata"].get("labels", {}).get("raytrain.dev/trainjob")
            if owner and owner.startswith("job-") and owner not in seen:
                seen[owner] = time.monotonic()
                if len(seen) >= args.jobs:
                    done.set()
                    return

    threading.Thread(target=watch_rayjobs, daemon=True).start()
    time.sleep(1.0)  # let the watch start before the first create
    cpu_start = cpu_seconds(operator.pid)
    start = time.monotonic()
    for i in range(args.jobs):
        if args.create_rate > 0:
            pause = start + i / args.create_rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        name = f"job-{i}"
        custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, trainjob(name))
        created[name] = time.monotonic()
    create_rate = args.jobs / (time.monotonic() - start)
    if not done.wait(timeout=1800):
        print(f"only {len(seen)}/{args.jobs} RayJobs appeared within 30 min", file=sys.stderr)
        return 1
    elapsed = max(seen.values()) - start
    latencies = [seen[n] - created[n] for n in created if n in seen]
    rss = rss_mib(operator.pid)
    peak = rss_mib(operator.pid, "VmHWM")
    counts = process_counts(operator.pid)
    cpu = cpu_seconds(operator.pid) - cpu_start
    rate = args.jobs / elapsed
    result.update(
        {
            "create_rate_limit_per_s": args.create_rate or None,
            "raw_create_per_s": round(raw_rate, 1),
            # The same create loop with the operator at work (CPU and API server shared).
            "create_loop_with_operator_per_s": round(create_rate, 1),
            "operator_per_s": round(rate, 1),
            "ratio_to_raw": round(rate / raw_rate, 3),
            "latency_p50_s": round(statistics.median(latencies), 3),
            "latency_p99_s": round(percentile(latencies, 0.99), 3),
            "latency_over_1s": sum(1 for v in latencies if v > 1.0),
            # When the slowest ones were created (seconds after the first create, and after
            # the operator started): a stall of the machine shows as a cluster of them.
            "slowest_created_at_s_and_latency_s": [
                [round(created[n] - start, 1), round(seen[n] - created[n], 2)]
                for n in sorted(created, key=lambda n: seen.get(n, 0) - created[n])[-10:]
            ],
            "operator_started_s_before_first_create": round(start - operator_started, 1),
            "operator_rss_mib": round(rss, 1),
            "operator_peak_rss_mib": round(peak, 1),
            "operator_sockets": counts["sockets"],
            "operator_threads": counts["threads"],
            # The operator's own CPU per TrainJob taken to its RayJob: what the load of the
            # machine does not change much, unlike the latencies.
            "operator_cpu_ms_per_trainjob": round(1000 * cpu / args.jobs, 1),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 1),
        }
    )
    return 0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (fields 14 and 15 of /proc/PID/stat)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def requests_by_resource(api_client: Any) -> dict[str, float]:
    totals: dict[str, float] = {}
    for (resource, _, _), count in request_series(api_client).items():
        totals[resource] = totals.get(resource, 0.0) + count
    return totals


def passes_by_handler(port: int) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    passes: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("raytrain_reconciles_total{"):
            handler = re.search(r'handler="([^"]*)"', line)
            key = handler.group(1) if handler else "?"
            passes[key] = passes.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("raytrain_wakeups_total{"):
            cause = re.search(r'cause="([^"]*)"', line)
            key = f"wakeup:{cause.group(1) if cause else '?'}"
            passes[key] = passes.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return passes


class EventCounter:
    """Counts the watch events (ADDED, MODIFIED, DELETED; not bookmarks) of some kinds in one
    namespace from start() to stop(): what an operator watching them receives."""

    KINDS = {
        "trainjobs": (GROUP, VERSION),
        "rayjobs": ("ray.io", "v1"),
        "rayclusters": ("ray.io", "v1"),
    }

    def __init__(self, api_client: Any, namespace: str, plurals: tuple[str, ...]) -> None:
        self.api_client, self.namespace, self.plurals = api_client, namespace, plurals
        self.counts = dict.fromkeys(plurals, 0)
        self.counting = False
        self.watches: list[Any] = []

    def start(self) -> None:
        from kubernetes import client, watch

        custom = client.CustomObjectsApi(self.api_client)
        ready = threading.Semaphore(0)
        for plural in self.plurals:
            group, version = self.KINDS[plural]
            # Start at the current resourceVersion: the listing's ADDED events are not news.
            listed = custom.list_namespaced_custom_object(group, version, self.namespace, plural)
            version_now = listed["metadata"]["resourceVersion"]
            w = watch.Watch()
            self.watches.append(w)

            def run(
                w: Any = w,
                group: str = group,
                version: str = version,
                plural: str = plural,
                rv: str = version_now,
            ) -> None:
                ready.release()
                for event in w.stream(
                    custom.list_namespaced_custom_object,
                    group,
                    version,
                    self.namespace,
                    plural,
                    resource_version=rv,
                    timeout_seconds=86400,
                ):
                    if self.counting and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.counts[plural] += 1

            threading.Thread(target=run, daemon=True).start()
        for _ in self.plurals:
            ready.acquire()
        self.counting = True

    def stop(self) -> dict[str, int]:
        self.counting = False
        for w in self.watches:
            w.stop()
        return dict(self.counts)


def _idle(
    args: argparse.Namespace, api_client: Any, operator: subprocess.Popen[bytes], port: int
) -> dict[str, Any]:
    """The steady state: N TrainJobs with their RayJobs, nothing created or deleted."""
    window = args.idle_seconds
    events = EventCounter(api_client, "bench", ("trainjobs", "rayjobs", "rayclusters"))
    cpu0, req0 = cpu_seconds(operator.pid), requests_by_resource(api_client)
    pass0 = passes_by_handler(port)
    events.start()
    start = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - start
    counted = events.stop()
    cpu1, req1 = cpu_seconds(operator.pid), requests_by_resource(api_client)
    pass1 = passes_by_handler(port)
    rates = {
        r: round((req1.get(r, 0.0) - req0.get(r, 0.0)) / elapsed, 2)
        for r in sorted(set(req1) | set(req0))
    }
    return {
        "idle_seconds": round(elapsed),
        "idle_operator_cpu_s": round(cpu1 - cpu0, 1),
        "idle_operator_cpu_share": round((cpu1 - cpu0) / elapsed, 3),
        "idle_operator_rss_mib": round(rss_mib(operator.pid), 1),
        "idle_operator_peak_rss_mib": round(rss_mib(operator.pid, "VmHWM"), 1),
        "idle_operator_sockets": process_counts(operator.pid)["sockets"],
        "idle_apiserver_requests_per_s": round(sum(rates.values()), 2),
        "idle_apiserver_requests_per_s_by_resource": {r: v for r, v in rates.items() if v},
        "idle_watch_events_per_s": round(sum(counted.values()) / elapsed, 3),
        "idle_watch_events_per_s_by_kind": {k: round(v / elapsed, 3) for k, v in counted.items()},
        "idle_operator_passes_per_s": round(
            sum(pass1.get(k, 0.0) - pass0.get(k, 0.0) for k in pass1 if ":" not in k) / elapsed,
            3,
        ),
        "idle_operator_events_per_s": {
            k: round((pass1.get(k, 0.0) - pass0.get(k, 0.0)) / elapsed, 3)
            for k in sorted(set(pass1) | set(pass0))
            if pass1.get(k, 0.0) != pass0.get(k, 0.0)
        },
    }


def _warm_up(custom: Any) -> None:
    """Wait until the operator watches: one TrainJob taken to its RayJob, then deleted and gone.
    A TrainJob made before the operator's watch starts is listed at its start (a `resume`
    pass, which reads the TrainJob and fences), not created as it is in a running operator."""
    deadline = time.monotonic() + 300
    custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, trainjob("warm-up"))
    while time.monotonic() < deadline:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, "warm-up")
        if (obj.get("status") or {}).get("rayJobName"):
            break
        time.sleep(0.2)
    else:
        raise SystemExit("the operator made no RayJob for the warm-up TrainJob in 300 s")
    custom.delete_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, "warm-up")
    while time.monotonic() < deadline:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL)["items"]
        if not items:
            return
        time.sleep(0.5)
    raise SystemExit("the warm-up TrainJob was not gone in 300 s")


def _lifecycle(
    args: argparse.Namespace, api_client: Any, custom: Any, metrics_port: int
) -> dict[str, Any]:
    """API requests per TrainJob lifecycle, on a fresh batch before anything else runs, with
    the operator's passes by what queued them."""
    n = args.lifecycle_jobs
    passes_before = passes_by_handler(metrics_port)
    before = request_series(api_client)
    own: dict[Series, int] = {}

    def mine(subresource: str, verb: str) -> None:
        """Count one request of this script, under the verb kube-apiserver's metric gives it."""
        key = ("trainjobs", subresource, verb)
        own[key] = own.get(key, 0) + 1

    for i in range(n):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "bench", PLURAL, trainjob(f"life-{i}")
        )
        mine("", "POST")
    pending = {f"life-{i}" for i in range(n)}
    deadline = time.monotonic() + 600
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            mine("", "GET")
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, name)
            if (obj.get("status") or {}).get("rayJobName"):
                mine("status", "PATCH")
                custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    "bench",
                    PLURAL,
                    name,
                    {
                        "status": {
                            "trainerStatus": {
                                "phase": "Succeeded",
                                "progressPercentage": 100,
                                "lastUpdatedTime": "2026-01-01T00:00:00Z",
                            }
                        }
                    },
                )
                pending.discard(name)
        time.sleep(0.5)
    succeeded: set[str] = set()
    while len(succeeded) < n and time.monotonic() < deadline:
        mine("", "LIST")
        items = custom.list_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL)["items"]
        for obj in items:
            conds = {
                c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []
            }
            if obj["metadata"]["name"].startswith("life-") and conds.get("Succeeded") == "True":
                succeeded.add(obj["metadata"]["name"])
        time.sleep(1.0)
    for i in range(n):
        mine("", "DELETE")
        custom.delete_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, f"life-{i}")
    gone_deadline = time.monotonic() + 300
    while time.monotonic() < gone_deadline:
        mine("", "LIST")
        items = custom.list_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL)["items"]
        if not any(o["metadata"]["name"].startswith("life-") for o in items):
            break
        time.sleep(1.0)
    after = request_series(api_client)
    per_job = {
        key: (after.get(key, 0.0) - before.get(key, 0.0) - own.get(key, 0)) / n
        for key in set(after) | set(before)
        if key[0] in COUNTED
    }
    by_request = {
        f"{verb} {resource}{'/' + sub if sub else ''}": round(v, 2)
        for (resource, sub, verb), v in sorted(per_job.items(), key=lambda kv: -kv[1])
        if round(v, 2)
    }
    passes_after = passes_by_handler(metrics_port)
    passes = {
        key: round((passes_after.get(key, 0.0) - passes_before.get(key, 0.0)) / n, 2)
        for key in sorted(passes_after)
    }
    return {
        "lifecycle_jobs": n,
        "lifecycle_succeeded": len(succeeded),
        "api_requests_per_lifecycle": round(sum(per_job.values()), 1),
        "api_requests_per_lifecycle_by_request": by_request,
        "operator_passes_per_lifecycle": {k: v for k, v in passes.items() if v},
    }


if __name__ == "__main__":
    sys.exit(main())
