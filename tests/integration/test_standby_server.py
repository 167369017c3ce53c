"""A standby never writes: two operator processes on the real API server, one holds the peering,
and the other sends no write at all, not even for a job it had queued before it paused.

The witness is the API server's audit log of writes (the session's cluster runs with
RAYTRAIN_AUDIT=1, e2e/controlplane/cluster.sh): each operator names itself in its user agent
(`--identity`), so every write either process sends is attributed to it. The older instance
starts alone, takes a job with a 45 s activeDeadlineSeconds to its RayJob and so holds a pass
due at the deadline in its queue; then a newer instance (higher priority) starts and the older
pauses. At the deadline the newer one fails the job; the older one runs no pass (its own
metrics) and writes nothing (the audit log), though it resyncs the whole set every 2 s when it
works. When the newer one exits, the older resumes and writes again.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _required import required
from _wait import wait_for
from conftest import CLUSTER_SH, REPO, KubeCluster
from test_operator import T_CREATE, Operator, crds, create, get, secret, trainjob
from test_operator_wake import counter

pytestmark = pytest.mark.integration

PEERING_CRDS = REPO / "charts" / "raytrain-operator" / "crds" / "kopf-peering.yaml"
PEERING = ("--peering-mode=required", "--peering-name=raytrain-operator")
DEADLINE = 45

__all__ = ["crds"]  # the fixture, used by name


def audit_log() -> Path:
    path = Path(
        subprocess.run(
            ["bash", str(CLUSTER_SH), "audit-log"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    if not path.is_file():
        message = (
            f"no audit log at {path}: start the cluster with RAYTRAIN_AUDIT=1 "
            "(tests/integration/conftest.py does when it starts one)"
        )
        if required():
            pytest.fail(message)
        pytest.skip(message)
    return path


def writes_by(log: Path, identity: str, offset: int = 0) -> list[dict[str, Any]]:
    """The writes the process of `identity` sent, from byte `offset` of the audit log on."""
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line still being written
        if identity in str(entry.get("userAgent") or ""):
            found.append(entry)
    return found


def summary(entries: list[dict[str, Any]]) -> list[str]:
    return [f"{e.get('verb')} {e.get('requestURI')} -> {e.get('responseStatus', {}).get('code')}"
            for e in entries]  # fmt: skip


def passes(op: Operator) -> float:
    return counter(op.metrics(), "raytrain_reconciles_total")


def test_a_paused_instance_writes_nothing_not_even_for_jobs_it_had_queued(
    kube_cluster: KubeCluster, namespace: str, crds: None, tmp_path: Path
) -> None:
    ns = namespace
    log = audit_log()
    kube_cluster.kubectl("apply", "--server-side", "-f", str(PEERING_CRDS))
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev", "--timeout=60s"
    )
    kube_cluster.apply(
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
         "metadata": {"name": "raytrain-operator"}},
        namespace=ns,
    )  # fmt: skip
    tag = secrets.token_hex(3)
    older_id, newer_id = f"standby-older-{tag}", f"standby-newer-{tag}"
    older = Operator(kube_cluster, ns, tmp_path / "older.log",
                     extra_args=(*PEERING, f"--identity={older_id}"))  # fmt: skip
    newer = Operator(kube_cluster, ns, tmp_path / "newer.log",
                     extra_args=(*PEERING, f"--identity={newer_id}"))  # fmt: skip
    older.start()
    try:
        create(kube_cluster, ns, secret("deadline-s3"))
        create(kube_cluster, ns, trainjob("deadline", activeDeadlineSeconds=DEADLINE))
        wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", "deadline-0"), T_CREATE,
                 "the older instance to create the RayJob")  # fmt: skip
        wait_for(
            lambda: ((get(kube_cluster, ns, "trainjobs.raytrain.dev", "deadline") or {})
                     .get("status") or {}).get("startTime"),
            T_CREATE, "the older instance to record the start",
        )  # fmt: skip
        # The filter sees this process's writes (the RayJob, the status): it is not vacuous.
        assert writes_by(log, older_id), "no write of the older instance in the audit log"
        # Its pass at the deadline is queued.
        assert counter(older.metrics(), "raytrain_wakeups_total", cause="due") >= 1

        newer.start()
        try:
            wait_for(lambda: "Pausing: peer" in older.since_start(), T_CREATE,
                     "the older instance's engine to pause")  # fmt: skip
            paused_at = log.stat().st_size
            passes_paused = passes(older)
            # The newer instance fails the job at its deadline; the older one holds the same
            # due pass in its queue and resyncs every 2 s when it works.
            wait_for(
                lambda: any(
                    c.get("type") == "Failed" and c.get("status") == "True"
                    for c in ((get(kube_cluster, ns, "trainjobs.raytrain.dev", "deadline") or {})
                              .get("status") or {}).get("conditions") or []
                ),
                DEADLINE + T_CREATE, "the newer instance to fail the job at its deadline",
            )  # fmt: skip
            assert writes_by(log, newer_id, paused_at), "the newer instance wrote nothing"
            # Three more resyncs of the working instance (2 s apart): the older one, were it
            # working, would have resynced too.
            resyncs = counter(newer.metrics(), "raytrain_resyncs_total")
            wait_for(lambda: counter(newer.metrics(), "raytrain_resyncs_total") >= resyncs + 3,
                     T_CREATE, "three resyncs of the working instance")  # fmt: skip
            assert passes(older) == passes_paused, older.tail(60)
            assert summary(writes_by(log, older_id, paused_at)) == []
        finally:
            newer.stop()  # a clean exit takes it out of the peering object
        wait_for(lambda: "Resuming: no peer" in older.since_start(), T_CREATE,
                 "the older instance to resume")  # fmt: skip
        resumed_at = log.stat().st_size
        create(kube_cluster, ns, secret("after-s3"))
        create(kube_cluster, ns, trainjob("after"))
        wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", "after-0"), T_CREATE,
                 "the older instance to take over")  # fmt: skip
        assert writes_by(log, older_id, resumed_at)
    finally:
        older.stop()
        newer.stop()
        print(f"--- older ---\n{older.tail(120)}\n--- newer ---\n{newer.tail(120)}")
