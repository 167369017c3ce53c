"""Out-of-memory kills inside the Ray head's container: the watcher beside the driver
(trainer_runtime/oomwatch.py) and what the operator then says (status.outOfMemory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _factories import trainjob
from test_status_machine import cond, rayjob, run
from test_triage import container, pod

from raytrain_operator.status.triage import FailureClass
from trainer_runtime import oomwatch

HEAD_ENV = {
    "RAYTRAIN_TRAINJOB_NAMESPACE": "team",
    "RAYTRAIN_TRAINJOB_NAME": "digits",
    "RAYTRAIN_POD_NAME": "digits-0-raycluster-abcde-head-xyz",
    "RAYTRAIN_ATTEMPT": "0",
}


def _v1(root: Path, kills: int, limit: int = 1 << 30, peak: int = 1 << 30) -> oomwatch.Cgroup:
    root.mkdir(parents=True, exist_ok=True)
    (root / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n")
    (root / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (root / "memory.max_usage_in_bytes").write_text(f"{peak}\n")
    found = oomwatch.Cgroup.find(v1=root, v2=root / "none")
    assert found is not None
    return found


def test_the_kill_count_is_read_from_either_cgroup_version(tmp_path: Path) -> None:
    assert _v1(tmp_path / "v1", kills=3).kills() == 3
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n")
    (v2 / "memory.max").write_text("max\n")
    found = oomwatch.Cgroup.find(v1=tmp_path / "none", v2=v2)
    assert found is not None and found.v2 and found.kills() == 2
    assert found.limit() is None  # "max" is no limit
    assert oomwatch.Cgroup.find(v1=tmp_path / "none", v2=tmp_path / "none") is None


class _Patches:
    def __init__(self, fail: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail = fail

    def patch_status(self, body: dict[str, Any]) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("connection refused")
        self.bodies.append(body)


def test_a_kill_is_recorded_with_the_largest_process_that_vanished(tmp_path: Path) -> None:
    cgroup = _v1(tmp_path, kills=0, limit=1 << 30, peak=(1 << 30) - 4096)
    driver = oomwatch.Process(40, "python -m trainer_runtime", 450 << 20)
    controller = oomwatch.Process(41, "ray::TrainController.run", 390 << 20)
    raylet = oomwatch.Process(12, "/usr/bin/raylet --node_id=x", 60 << 20)
    looks = [
        {12: raylet, 40: driver, 41: controller},
        {12: raylet, 40: driver, 41: controller},
        {12: raylet},  # the kernel killed the driver; its controller went with it
        {12: raylet},
    ]
    kills = iter([0, 1, 1])
    patches = _Patches(fail=1)

    def sleep(_: float) -> None:
        (tmp_path / "memory.oom_control").write_text(f"oom_kill {next(kills)}\n")

    oomwatch.watch(HEAD_ENV, cgroup, patches, sleep=sleep, look=lambda: looks.pop(0), rounds=3)
    # The first write failed (a starved pod's API call): the next round writes the same kill.
    assert len(patches.bodies) == 1
    body = patches.bodies[0]["status"]["outOfMemory"]
    assert body["attempt"] == 0 and body["pod"] == HEAD_ENV["RAYTRAIN_POD_NAME"]
    assert body["container"] == "ray-head" and body["kills"] == 1
    assert body["process"] == "python -m trainer_runtime" and body["processMemory"] == "450Mi"
    assert body["limit"] == "1024Mi" and body["peak"] == "1024Mi"


def test_no_kill_writes_nothing(tmp_path: Path) -> None:
    cgroup = _v1(tmp_path, kills=0)
    patches = _Patches()
    oomwatch.watch(HEAD_ENV, cgroup, patches, sleep=lambda _: None, look=dict, rounds=5)
    assert patches.bodies == []


def test_the_processes_are_read_from_proc(tmp_path: Path) -> None:
    for pid, cmd, pages in ((7, b"ray::TrainController.run\0", 100), (8, b"", 5)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(cmd)
        (tmp_path / str(pid) / "statm").write_text(f"900 {pages} 3 0 0 0 0\n")
    (tmp_path / "self").mkdir()
    seen = oomwatch.processes(tmp_path)
    assert list(seen) == [7]  # pid 8 is a kernel thread (no command line)
    assert seen[7].what == "ray::TrainController.run" and seen[7].rss == 100 * oomwatch._PAGE


def test_the_watcher_starts_once_and_only_on_a_trainjobs_head(tmp_path: Path) -> None:
    cgroup = _v1(tmp_path / "cg", kills=0)
    started: list[list[str]] = []

    class Child:
        pid = 4242

    def spawn(command: list[str]) -> Child:
        started.append(command)
        return Child()

    pidfile = tmp_path / "pid"
    said = oomwatch.start_beside({}, spawn=spawn, pidfile=pidfile, cgroup=cgroup)
    assert "not a TrainJob's Ray head" in said and started == []
    said = oomwatch.start_beside(HEAD_ENV, spawn=spawn, pidfile=pidfile, cgroup=cgroup)
    assert said == "started the out-of-memory watcher (pid 4242)"
    assert started[0][1:] == ["-m", "trainer_runtime.oomwatch"]
    assert pidfile.read_text() == "4242"
    # A live pid in the file: no second watcher (this test's own pid stands in for it).
    import os

    pidfile.write_text(str(os.getpid()))
    said = oomwatch.start_beside(HEAD_ENV, spawn=spawn, pidfile=pidfile, cgroup=cgroup)
    assert said.startswith("the out-of-memory watcher runs") and len(started) == 1
    (tmp_path / "cg" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")
    said = oomwatch.start_beside(HEAD_ENV, spawn=spawn, pidfile=tmp_path / "p2", cgroup=cgroup)
    assert "does not count OOM kills" in said


RECORD = {
    "attempt": 0,
    "pod": "digits-0-raycluster-abcde-head-xyz",
    "container": "ray-head",
    "kills": 1,
    "process": "python -m trainer_runtime",
    "processMemory": "450Mi",
    "limit": "1024Mi",
    "peak": "1024Mi",
}


def test_a_kill_in_the_head_names_the_head_its_process_and_the_field_to_raise() -> None:
    small = {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    tj = trainjob(backoffLimit=2, head={"resources": small})
    st: dict[str, Any] = {"attempt": 0, "restarts": 0, "outOfMemory": RECORD}
    # The submitter lost the job server: KubeRay's words say nothing of memory.
    rj = rayjob(deployment="Failed", job_status="RUNNING")
    p = run(tj, st, rj, attempt_pods=[])
    assert p.attempt_failure is not None
    assert p.attempt_failure.failure_class is FailureClass.OOM_KILLED
    message = cond(p, "Failed")["message"]
    assert cond(p, "Failed")["reason"] == "OOMKilled"
    assert "the Ray head (pod digits-0-raycluster-abcde-head-xyz) ran out of memory" in message
    assert "killed python -m trainer_runtime, 450Mi resident" in message
    assert "spec.head.resources.limits.memory (now 1Gi)" in message
    assert "resourcesPerWorker" not in message
    # OOMKilled is not retried by default: the same limit fails the same way.
    assert p.status.get("restarts", 0) == 0


def test_a_kill_of_another_attempt_or_a_worker_the_pods_named_stays_as_it_was() -> None:
    rj = rayjob(deployment="Failed", job_status="FAILED")
    st: dict[str, Any] = {"attempt": 1, "restarts": 1, "outOfMemory": RECORD}
    p = run(trainjob(backoffLimit=1), st, rayjob("digits-1", deployment="Failed"))
    assert p.attempt_failure is not None
    assert p.attempt_failure.failure_class is FailureClass.UNKNOWN
    st = {"attempt": 0, "restarts": 0, "outOfMemory": RECORD}
    killed = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    worker = pod(phase="Running", containers=[container(state=killed)])
    p = run(trainjob(backoffLimit=0), st, rj, attempt_pods=[worker])
    assert p.attempt_failure is not None
    assert p.attempt_failure.failure_class is FailureClass.OOM_KILLED
    assert "ran out of memory: the kernel" not in p.attempt_failure.message
