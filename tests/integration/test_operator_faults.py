"""The operator SIGKILLed 20 times and the API server restarted 3 times across one job's life.

One TrainJob goes through create, a failed attempt and its retry, a suspend with its checkpoint
handshake, a resume, success and the TTL clean-up; a second one is created and deleted. After
each step's action the operator is killed (SIGKILL: no clean-up, no last patch) after a short
random delay, at 20 points a seeded generator spreads over the steps, and started again. At three
steps (the move to the retry's RayJob, the suspend, the success) the API server itself is stopped
for 2 s after the action and started again, the operator left running: its watches break, its
kept-alive connections go stale, and it has to find the changes it missed. A poller records every
RayJob and every TrainJob status it sees meanwhile. What must hold after every fault and at the
end:

- at most one RayJob (by uid) per attempt, and never two attempts' RayJobs at once;
- `status.attempt`, `status.restarts` and `status.observedGeneration` never go down, and a
  finished job never leaves its terminal phase;
- each step reaches the state it reaches without kills, and the job ends as it would have
  (Succeeded after one retry, its children removed by the TTL; the deleted job's children gone).

Under KWOK no pod runs: what the runtime would report is written by the test, as in
test_operator.py. `RAYTRAIN_FAULT_SEED` picks other kill points; with `RAYTRAIN_FAULT_TABLE`
set the table is written to that file too (docs/failures.md shows one run's).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    T_KUBERAY,
    Operator,
    condition,
    crds,
    create,
    get,
    report_running,
    runtime_report,
    secret,
    trainjob,
    wait_condition,
)

pytestmark = pytest.mark.integration

__all__ = ["crds"]  # the fixture, used by name

KILLS = 20
#: The steps after whose action the API server is restarted (the operator is not killed then).
APISERVER_RESTARTS = ("attempt 0 fails", "suspend", "succeeded")
APISERVER_DOWN_SECONDS = 2.0
#: How long a step may take once the API server has restarted (at that step or an earlier one).
#: KubeRay's caches have taken up to about 100 s to see changes made after a restart of the server
#: (a RayJob's deletion, a resumed RayJob), and every step waits on KubeRay.
T_AFTER_RESTART = 360
POLL_SECONDS = 0.2
TERMINAL = {"Succeeded", "Failed"}


@dataclass
class Seen:
    """What the poller saw: RayJobs by uid, and regressions of the TrainJob's status."""

    rayjobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    overlaps: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    last: dict[str, Any] = field(default_factory=dict)
    errors: int = 0


class Poller(threading.Thread):
    def __init__(self, cluster: KubeCluster, ns: str, name: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.ns, self.name = cluster, ns, name
        self.seen = Seen()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        #: Polls finished, failed ones included (a deleted TrainJob makes every poll fail).
        self.rounds = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll()
            except Exception:  # a failed kubectl call; the next poll tries again
                self.seen.errors += 1
            self.rounds += 1
            self.stop.wait(POLL_SECONDS)

    def caught_up(self, timeout: float) -> None:
        """Wait until two whole polls began after this call: the poller has seen the cluster as
        it is now."""
        start = self.rounds
        wait_for(lambda: self.rounds >= start + 2, timeout, "two more polls of the cluster")

    def poll(self) -> None:
        items = self.cluster.get_json(
            "rayjobs.ray.io", "-n", self.ns, "-l", f"raytrain.dev/trainjob={self.name}"
        )["items"]
        tj = self.cluster.get_json("trainjobs.raytrain.dev", self.name, "-n", self.ns)
        now = time.monotonic()
        with self.lock:
            seen = self.seen
            attempts = set()
            for rj in items:
                meta = rj["metadata"]
                attempt = int(meta["labels"]["raytrain.dev/attempt"])
                attempts.add(attempt)
                seen.rayjobs.setdefault(meta["uid"], {"name": meta["name"], "attempt": attempt})
                seen.rayjobs[meta["uid"]]["last"] = now
            if len(attempts) > 1:
                seen.overlaps.append(f"RayJobs of attempts {sorted(attempts)} at once")
            status = tj.get("status") or {}
            current = {
                "attempt": status.get("attempt"),
                "restarts": status.get("restarts"),
                "observedGeneration": status.get("observedGeneration"),
                "phase": status.get("phase"),
            }
            before = seen.last
            for key in ("attempt", "restarts", "observedGeneration"):
                old, new = before.get(key), current[key]
                if old is not None and (new is None or new < old):
                    seen.regressions.append(f"{key} {old} -> {new}")
            if before.get("phase") in TERMINAL and current["phase"] != before["phase"]:
                seen.regressions.append(f"phase {before['phase']} -> {current['phase']}")
            seen.last = current

    def snapshot(self) -> tuple[dict[int, int], int, int]:
        """RayJob uids per attempt, overlaps and regressions so far."""
        with self.lock:
            per_attempt: dict[int, int] = {}
            for info in self.seen.rayjobs.values():
                per_attempt[info["attempt"]] = per_attempt.get(info["attempt"], 0) + 1
            return per_attempt, len(self.seen.overlaps), len(self.seen.regressions)


@dataclass
class Step:
    name: str
    action: Callable[[], Any]
    reached: Callable[[], Any]
    attempt: int
    job: str = ""


@dataclass
class Row:
    kill: int
    fault: str
    step: str
    delay: float
    rayjobs: int
    overlap: int
    regressions: int
    recovered: bool
    took: float = 0.0  # from the step's action to the step reached, faults included


def patch_spec(cluster: KubeCluster, ns: str, name: str, body: str) -> None:
    cluster.kubectl("patch", "trainjobs.raytrain.dev", name, "-n", ns, "--type=merge", "-p", body)


def steps(cluster: KubeCluster, ns: str, name: str) -> Iterator[Step]:
    def rayjob(attempt: int) -> Callable[[], Any]:
        return lambda: get(cluster, ns, "rayjobs.ray.io", f"{name}-{attempt}")

    def rayjob_alone(attempt: int) -> Callable[[], bool]:
        return lambda: bool(rayjob(attempt)()) and not rayjob(attempt - 1)()

    def running() -> Any:
        return wait_condition(cluster, ns, name, "Running", timeout=T_KUBERAY)

    def checkpoint_answered() -> None:
        requested = wait_for(
            lambda: (
                (get(cluster, ns, "trainjobs.raytrain.dev", name) or {})["metadata"]
                .get("annotations", {})
                .get("raytrain.dev/checkpoint-requested")
            ),
            T_CREATE,
            "the checkpoint request",
        )
        runtime_report(
            cluster, ns, name,
            {"phase": "Running", "attempt": 1, "checkpointing": False,
             "lastUpdatedTime": requested},
        )  # fmt: skip

    def children_gone() -> bool:
        tj = get(cluster, ns, "trainjobs.raytrain.dev", name) or {}
        marked = (tj.get("metadata", {}).get("annotations") or {}).get(
            "raytrain.dev/children-deleted"
        )
        return bool(marked) and rayjob(1)() is None

    yield Step(
        "create",
        lambda: (create(cluster, ns, secret(f"{name}-s3")),
                 create(cluster, ns, trainjob(name, backoffLimit=2, ttlSecondsAfterFinished=3))),
        rayjob(0), 0,
    )  # fmt: skip
    yield Step("running", lambda: report_running(cluster, ns, name, attempt=0), running, 0)
    yield Step(
        "attempt 0 fails",
        lambda: runtime_report(cluster, ns, name, {"phase": "Failed", "attempt": 0,
                                                   "message": "OOM"}),
        rayjob_alone(1), 1,
    )  # fmt: skip
    yield Step("retry running", lambda: report_running(cluster, ns, name, attempt=1), running, 1)
    yield Step(
        "suspend",
        lambda: (patch_spec(cluster, ns, name, '{"spec":{"suspend":true}}'),
                 checkpoint_answered()),
        lambda: wait_condition(cluster, ns, name, "Suspended"), 1,
    )  # fmt: skip
    yield Step(
        "resume",
        lambda: patch_spec(cluster, ns, name, '{"spec":{"suspend":false}}'),
        lambda: wait_condition(cluster, ns, name, "Suspended", "False"), 1,
    )  # fmt: skip
    yield Step("resumed running", lambda: report_running(cluster, ns, name, attempt=1), running, 1)
    yield Step(
        "succeeded",
        lambda: runtime_report(cluster, ns, name, {"phase": "Succeeded", "attempt": 1,
                                                   "progressPercentage": 100}),
        lambda: wait_condition(cluster, ns, name, "Succeeded"), 1,
    )  # fmt: skip
    yield Step("ttl", lambda: None, children_gone, 1)


def delete_steps(cluster: KubeCluster, ns: str, name: str) -> Iterator[Step]:
    def gone() -> bool:
        return all(
            get(cluster, ns, kind, child) is None
            for kind, child in [
                ("trainjobs.raytrain.dev", name),
                ("rayjobs.ray.io", f"{name}-0"),
                ("configmap", f"{name}-contract"),
                ("serviceaccount", f"{name}-runtime"),
            ]
        )

    yield Step(
        "create (2nd job)",
        lambda: (create(cluster, ns, secret(f"{name}-s3")), create(cluster, ns, trainjob(name))),
        lambda: get(cluster, ns, "rayjobs.ray.io", f"{name}-0"), 0, name,
    )  # fmt: skip
    yield Step(
        "delete (2nd job)",
        lambda: cluster.kubectl("delete", "trainjobs.raytrain.dev", name, "-n", ns, "--wait=false"),
        gone, 0, name,
    )  # fmt: skip


def plan_kills(rng: random.Random, n_steps: int) -> list[int]:
    """How many kills each step gets: one at least, the rest spread at random."""
    counts = [1] * n_steps
    for _ in range(KILLS - n_steps):
        counts[rng.randrange(n_steps)] += 1
    return counts


def format_table(seed: int, rows: list[Row], duplicates: int) -> str:
    lines = [
        f"seed {seed}: {KILLS} SIGKILLs of the operator, {len(APISERVER_RESTARTS)} restarts of "
        "the API server",
        "",
        "| # | fault | step | delay after the action | RayJobs of the attempt | overlaps | "
        "status regressions | step reached | after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.kill} | {r.fault} | {r.step} | {r.delay:.2f} s | {r.rayjobs} | {r.overlap} | "
            f"{r.regressions} | {'yes' if r.recovered else 'NO'} | {r.took:.1f} s |"
        )
    recovered = sum(r.recovered for r in rows)
    lines += ["", f"{recovered}/{len(rows)} recovered, {duplicates} duplicates"]
    return "\n".join(lines)


@pytest.mark.timeout(2400)
def test_twenty_sigkills_leave_no_duplicate_no_overlap_and_the_same_outcome(
    kube_cluster: KubeCluster, namespace: str, crds: None, tmp_path: Path
) -> None:
    ns, name, other = namespace, "kills", "kills-deleted"
    seed = int(os.environ.get("RAYTRAIN_FAULT_SEED") or 20261124)
    rng = random.Random(seed)
    operator = Operator(kube_cluster, ns, tmp_path / "operator.log")
    operator.start()
    pollers = {job: Poller(kube_cluster, ns, job) for job in (name, other)}
    rows: list[Row] = []
    try:
        plan = [*steps(kube_cluster, ns, name), *delete_steps(kube_cluster, ns, other)]
        kills = plan_kills(rng, len(plan))
        restarted = False
        for step, count in zip(plan, kills, strict=True):
            step.job = step.job or name
            began = time.monotonic()
            step.action()
            poller = pollers[step.job]
            if not poller.is_alive():
                poller.start()
            faults = 0
            if step.name in APISERVER_RESTARTS:
                delay = rng.uniform(0.0, 1.5)
                time.sleep(delay)
                kube_cluster.restart_apiserver(APISERVER_DOWN_SECONDS)
                rows.append(Row(len(rows) + 1, "API server restart", step.name, delay,
                                0, 0, 0, False))  # fmt: skip
                faults += 1
            for _ in range(count):
                delay = rng.uniform(0.0, 1.5)
                time.sleep(delay)
                operator.kill()
                operator.start()
                rows.append(Row(len(rows) + 1, "SIGKILL", step.name, delay, 0, 0, 0, False))
                faults += 1
            restarted = restarted or step.name in APISERVER_RESTARTS
            limit = T_AFTER_RESTART if restarted else T_KUBERAY
            wait_for(step.reached, limit, f"step {step.name!r} after the faults")
            took = time.monotonic() - began
            poller.caught_up(T_CREATE)  # the poller has seen what the step reached
            per_attempt, overlaps, regressions = poller.snapshot()
            for row in rows[-faults:]:
                row.rayjobs = per_attempt.get(step.attempt, 0)
                row.overlap, row.regressions, row.recovered = overlaps, regressions, True
                row.took = took
        for poller in pollers.values():
            poller.stop.set()
            poller.join(timeout=10)
        per_attempt, _, _ = pollers[name].snapshot()
        duplicates = sum(n - 1 for p in pollers.values() for n in p.snapshot()[0].values() if n > 1)
        table = format_table(seed, rows, duplicates)
        print(table)
        if os.environ.get("RAYTRAIN_FAULT_TABLE"):
            Path(os.environ["RAYTRAIN_FAULT_TABLE"]).write_text(table + "\n")

        assert [r.fault for r in rows].count("SIGKILL") == KILLS
        assert [r.step for r in rows if r.fault != "SIGKILL"] == list(APISERVER_RESTARTS)
        first, second = pollers[name].seen, pollers[other].seen
        assert duplicates == 0, (first.rayjobs, second.rayjobs)
        assert per_attempt == {0: 1, 1: 1}, first.rayjobs
        assert pollers[other].snapshot()[0] == {0: 1}, second.rayjobs
        assert first.overlaps == second.overlaps == [], (first.overlaps, second.overlaps)
        assert first.regressions == second.regressions == [], (
            first.regressions,
            second.regressions,
        )
        final = (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})["status"]
        assert (final["phase"], final["attempt"], final["restarts"]) == ("Succeeded", 1, 1)
        assert (condition(kube_cluster, ns, name, "Failed") or {}).get("status") != "True"
    finally:
        for poller in pollers.values():
            poller.stop.set()
        operator.stop()
        print(f"--- operator log ({operator.log}) ---\n{operator.tail(200)}")
