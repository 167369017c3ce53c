"""The real node's Unix sockets have paths short enough to bind, whatever HOME and the cluster's
name make of its state dir (e2e/realnode/node.sh), and a path that would still be too long
stops `cluster.sh up --real-node` before anything starts, naming the path and the fix.

A socket's path holds at most 107 bytes. The demo's DRA driver socket under
~/.cache/raytrain/state/raytrain-demo/realnode/kubelet/plugins_registry/ was 110 for root, and
`up` failed ("bind: invalid argument"); the node's sockets now live in /run/raytrain/<hash of
the state dir>/. These run the scripts' own checks, with nothing started.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE_SH = ROOT / "e2e" / "realnode" / "node.sh"
CLUSTER_SH = ROOT / "e2e" / "controlplane" / "cluster.sh"
MAX = 107
LONG_NAME = "a-cluster-whose-name-is-long-" * 2
ENV = {k: v for k, v in os.environ.items() if k not in ("RAYTRAIN_RUN_DIR", "RAYTRAIN_NETNS")}


def check_sockets(state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(NODE_SH), "check-sockets"],
        env={**ENV, "REALNODE_STATE": str(state), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sockets_stay_short_under_a_long_home_and_cluster_name(tmp_path: Path) -> None:
    home = tmp_path / ("home-of-a-user-with-a-long-path-" * 3)
    states = [home / ".cache/raytrain/state" / name / "realnode" for name in (LONG_NAME, "b")]
    paths = []
    for state in states:
        proc = check_sockets(state)
        assert proc.returncode == 0, proc.stderr
        found = proc.stdout.split()
        # containerd's (grpc, ttrpc), the DRA driver's (registration, service), the kubelet's.
        assert len(found) == 5, found
        assert any(
            p.endswith("/plugins_registry/dra.realnode.raytrain.dev-reg.sock") for p in found
        )
        for path in found:
            assert len(path.encode()) <= MAX, (len(path.encode()), path)
            assert path.startswith("/run/raytrain/"), path
            assert str(state) not in path, path
        paths.append(found)
    # One directory per node: two state dirs never share a socket.
    assert not set(paths[0]) & set(paths[1]), paths


def test_a_socket_path_still_too_long_stops_up_before_anything_starts(tmp_path: Path) -> None:
    run_dir = tmp_path / ("sockets-" * 10)
    state = tmp_path / "state"
    # An empty cache: should the check not stop it, nothing could start either.
    env = {
        **ENV,
        "RAYTRAIN_RUN_DIR": str(run_dir),
        "RAYTRAIN_STATE": str(state),
        "RAYTRAIN_CACHE": str(tmp_path / "cache"),
        "RAYTRAIN_CLUSTER": "demo",
    }
    proc = subprocess.run(
        ["bash", str(CLUSTER_SH), "up", "--real-node"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    message = proc.stderr
    # The path, its length, the limit and the fix.
    named = re.search(
        rf"socket ({re.escape(str(run_dir))}/[0-9a-f]{{12}}/\S+) would be (\d+) bytes", message
    )
    assert named, message
    assert int(named.group(2)) == len(named.group(1).encode()) > MAX, message
    assert f"over the {MAX}" in message, message
    assert "set RAYTRAIN_RUN_DIR to a directory with a shorter path" in message, message
    assert "cannot start with these paths" in message, message
    # Nothing started: no cluster state, no sockets dir.
    assert sorted(p.name for p in state.iterdir()) == ["demo.lock"], list(state.iterdir())
    assert not run_dir.exists()
