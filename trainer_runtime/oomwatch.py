"""``python -m trainer_runtime.oomwatch``: out-of-memory kills inside the Ray head's container.

When the head's container passes its memory limit, the kernel's OOM killer kills one process
in it, the one with the most memory: often the driver, Ray Train's controller or the dashboard
(whose job server the submitter talks to), rarely the container's first process. The kubelet
marks a container ``OOMKilled`` only when the container ends, so a head that lost its driver
or job server to the kernel keeps running, the attempt fails with no word of memory, and the
operator could only say Unknown. What the kernel did is counted in the container's memory
cgroup (``oom_kill`` in ``memory.oom_control`` on cgroup v1, in ``memory.events`` on v2).

The driver starts this watcher beside itself on the head (:func:`start_beside`), in a session
of its own so it outlives the driver and the job's process group. Once a second it reads the
count and the pod's processes (the pod shares one process namespace). When the count grows, the
processes that vanished since the last look are the ones killed; the watcher writes
``status.outOfMemory`` (attempt, pod, container, how many kills, the largest process that died
with its resident memory, the cgroup's limit and peak) to the TrainJob with the head's service
account, which may patch its own TrainJob's status. The operator names the head, the process
and ``spec.head.resources.limits.memory`` when the attempt then fails. The watcher itself holds
a few MiB, so the kernel never picks it first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("trainer_runtime.oomwatch")

POLL_SECONDS = 1.0
#: The head's Ray container (KubeRay's name for it in our templates).
HEAD_CONTAINER = "ray-head"
#: Where a running watcher leaves its pid, so a second driver in the same container starts none.
PIDFILE = Path("/tmp/raytrain-oomwatch.pid")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")
#: The longest process description kept (a Ray worker's title or a command line).
PROCESS_LIMIT = 120
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: A limit this high is no limit (cgroup v1 writes the largest page-aligned 64-bit number).
_UNLIMITED = 1 << 60


class Patcher(Protocol):
    def patch_status(self, body: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Cgroup:
    """The container's memory cgroup as the container sees it (its own subtree)."""

    root: Path
    v2: bool

    @classmethod
    def find(cls, v1: Path = CGROUP_V1, v2: Path = CGROUP_V2) -> Cgroup | None:
        if (v1 / "memory.oom_control").is_file():
            return cls(v1, v2=False)
        if (v2 / "memory.events").is_file():
            return cls(v2, v2=True)
        return None

    def kills(self) -> int | None:
        """OOM kills in this cgroup so far; None where the kernel does not count them."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            text = (self.root / name).read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None

    def _bytes(self, *names: str) -> int | None:
        for name in names:
            try:
                value = (self.root / name).read_text().strip()
            except OSError:
                continue
            if value.isdigit() and int(value) < _UNLIMITED:
                return int(value)
        return None

    def limit(self) -> int | None:
        return self._bytes("memory.max" if self.v2 else "memory.limit_in_bytes")

    def peak(self) -> int | None:
        return self._bytes("memory.peak" if self.v2 else "memory.max_usage_in_bytes")


@dataclass(frozen=True)
class Process:
    pid: int
    what: str
    rss: int


def processes(proc: Path = Path("/proc")) -> dict[int, Process]:
    """The processes this one can see: pid -> what runs (Ray's title or the command line)."""
    seen: dict[int, Process] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            pages = int((entry / "statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        what = " ".join(part.decode(errors="replace") for part in cmdline.split(b"\0") if part)
        if not what:
            continue  # a kernel thread or a zombie
        seen[int(entry.name)] = Process(int(entry.name), what[:PROCESS_LIMIT], pages * _PAGE)
    return seen


def _mib(value: int | None) -> str | None:
    return None if value is None else f"{value / (1 << 20):.0f}Mi"


def record(
    environ: Mapping[str, str],
    kills: int,
    gone: list[Process],
    cgroup: Cgroup,
    now: datetime | None = None,
) -> dict[str, Any]:
    """``status.outOfMemory``: what the kernel killed in this container, as far as it shows."""
    attempt = environ.get("RAYTRAIN_ATTEMPT", "")
    body: dict[str, Any] = {
        "attempt": int(attempt) if attempt.isdigit() else None,
        "pod": environ.get("RAYTRAIN_POD_NAME"),
        "container": HEAD_CONTAINER,
        "kills": kills,
        "limit": _mib(cgroup.limit()),
        "peak": _mib(cgroup.peak()),
        "time": (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if gone:
        victim = max(gone, key=lambda p: p.rss)
        body["process"] = victim.what
        body["processMemory"] = _mib(victim.rss)
    return body


def watch(
    environ: Mapping[str, str],
    cgroup: Cgroup,
    patcher: Patcher,
    *,
    sleep: Callable[[float], None] = time.sleep,
    look: Callable[[], dict[int, Process]] = processes,
    rounds: int | None = None,
) -> None:
    """Report each growth of the cgroup's OOM kill count, with the processes that vanished."""
    reported = 0
    before = look()
    done = 0
    while rounds is None or done < rounds:
        done += 1
        sleep(POLL_SECONDS)
        now = look()
        kills = cgroup.kills() or 0
        if kills > reported:
            gone = [p for pid, p in before.items() if pid not in now]
            body = record(environ, kills, gone, cgroup)
            log.warning("the kernel killed a process for memory in this container: %s", body)
            try:
                patcher.patch_status({"status": {"outOfMemory": body}})
                reported = kills
            except Exception as exc:  # the API may be slow to answer a starved pod: try again
                log.warning("recording it failed (%s: %s)", type(exc).__name__, exc)
        before = now if kills <= reported else {**before, **now}


def start_beside(
    environ: Mapping[str, str],
    *,
    spawn: Callable[[list[str]], Any] | None = None,
    pidfile: Path = PIDFILE,
    cgroup: Cgroup | None = None,
) -> str:
    """Start the watcher in a session of its own when this is a TrainJob's Ray head.

    Said in words for the driver's log; never raises (the watcher only adds a diagnosis).
    """
    needed = ("RAYTRAIN_TRAINJOB_NAMESPACE", "RAYTRAIN_TRAINJOB_NAME", "RAYTRAIN_POD_NAME")
    if not all(environ.get(key) for key in needed):
        return "not a TrainJob's Ray head: no out-of-memory watcher"
    found = cgroup or Cgroup.find()
    if found is None or found.kills() is None:
        return "this kernel does not count OOM kills per cgroup: no out-of-memory watcher"
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        return f"the out-of-memory watcher runs (pid {pid})"
    except (OSError, ValueError):
        pass
    command = [sys.executable, "-m", "trainer_runtime.oomwatch"]
    try:
        if spawn is not None:
            child = spawn(command)
        else:
            child = subprocess.Popen(
                command,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        pidfile.write_text(str(child.pid))
    except OSError as exc:
        return f"the out-of-memory watcher did not start ({type(exc).__name__}: {exc})"
    return f"started the out-of-memory watcher (pid {child.pid})"


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # The driver's own score may be raised (Ray raises its workers'): ours need not be.
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("0")
    cgroup = Cgroup.find()
    if cgroup is None:
        return 0
    from trainer_runtime.kube import KubernetesTransport

    transport = KubernetesTransport(
        os.environ["RAYTRAIN_TRAINJOB_NAMESPACE"], os.environ["RAYTRAIN_TRAINJOB_NAME"]
    )
    watch(os.environ, cgroup, transport)
    return 0


if __name__ == "__main__":
    sys.exit(main())
