"""Reaching a job's Ray dashboard: `kubectl port-forward` to the head Service, run as a child.

kubectl is used rather than the client's websocket port-forward because it already handles
every auth plugin, reconnects per connection, and is what a `kubectl raytrain` user has anyway.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import threading
from collections import deque
from dataclasses import dataclass
from types import TracebackType

from raytrain.errors import DashboardUnavailableError

#: Ray's dashboard (and job submission API) port on the head.
DASHBOARD_PORT = 8265
_FORWARDING = re.compile(r"Forwarding from (?P<address>\S+):(?P<port>\d+) -> \d+")


@dataclass(frozen=True)
class DashboardTarget:
    """The Service in front of the current Ray head, and the dashboard's port on it."""

    namespace: str
    service: str
    ray_cluster: str
    attempt: int
    port: int = DASHBOARD_PORT


class DashboardSession:
    """A running `kubectl port-forward`; `url` is the dashboard on this machine.

    Use it as a context manager, or call `close()`: the kubectl child ends with it.
    """

    def __init__(
        self,
        target: DashboardTarget,
        *,
        local_port: int,
        address: str,
        kubectl: str,
        kubeconfig: str | None,
        context: str | None,
        timeout: float,
    ) -> None:
        self.target = target
        binary = shutil.which(kubectl)
        manual = (
            f"kubectl port-forward -n {target.namespace} svc/{target.service} "
            f"{local_port or DASHBOARD_PORT}:{target.port}"
        )
        if binary is None:
            raise DashboardUnavailableError(
                f"{kubectl!r} is not on PATH; install kubectl, pass kubectl=... (--kubectl), or "
                f"forward yourself: {manual}"
            )
        cmd = [binary]
        if context:
            cmd.append(f"--context={context}")
        cmd += [
            "port-forward",
            "-n",
            target.namespace,
            f"--address={address}",
            f"svc/{target.service}",
            f"{local_port or ''}:{target.port}",
        ]
        env = dict(os.environ)
        if kubeconfig:
            env["KUBECONFIG"] = kubeconfig
        self.command = cmd
        self.process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=20)
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_reader.start()
        self.local_address, self.local_port = self._wait_ready(timeout, manual)

    def _drain_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line.rstrip())

    def _wait_ready(self, timeout: float, manual: str) -> tuple[str, int]:
        try:
            while True:
                line = self._lines.get(timeout=timeout)
                if line is None:
                    break
                match = _FORWARDING.search(line)
                if match:
                    return match["address"], int(match["port"])
        except queue.Empty:
            self.close()
            raise DashboardUnavailableError(
                f"`{' '.join(self.command)}` did not start forwarding within {timeout:.0f}s: "
                f"{self.stderr or 'no output'}"
            ) from None
        self.wait()
        raise DashboardUnavailableError(
            f"`{' '.join(self.command)}` exited {self.process.returncode}: "
            f"{self.stderr or 'no output'} (try it by hand: {manual})"
        )

    @property
    def stderr(self) -> str:
        """kubectl's last error lines."""
        return " | ".join(self._stderr)

    @property
    def url(self) -> str:
        host = self.local_address
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        return f"http://{host}:{self.local_port}"

    def wait(self) -> int:
        """Block until kubectl exits (the head went away, or close() from another thread)."""
        code = self.process.wait()
        self._stderr_reader.join(timeout=5)  # its last words, for the error message
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> DashboardSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
