"""Your own training code on real pods without building an image (`raytrain submit --code`).

A folder that is in no image (a package, a helper module, a data file the loop opens by a
relative path, a file its .gitignore leaves out) trains on the real node's pods: the CLI stores
it in the job's bucket in MinIO, the driver and both workers import it. One line edited and the
job submitted again runs the new line, with no image build and no import into the node. The
TrainJob leaves every size at its default except CPU (the node has two). A retry after a
deleted head pod runs the snapshot the job was submitted with, by its hash (make test-faults).

With RAYTRAIN_CODE_RECORD=FILE the test appends the seconds from `raytrain submit` to the first
report, for the first submission and for the resubmission (benchmarks/realpod_code.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _code_project import user_project
from _wait import wait_for
from realpods import BUCKET, ON_REAL_NODE, wait_condition
from test_realpods import (
    DIGITS,
    START_TIMEOUT,
    TRAIN_TIMEOUT,
    RealWorld,
    _logs,
    _trainjob,
    real_world,
)

from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES

__all__ = ["real_world"]  # the module-scoped fixture, shared with test_realpods.py

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(1800)]

#: The CPU each pod asks for, the one size changed from the defaults: the node has 2 CPUs.
CPU = "250m"


def _manifest(path: Path, name: str, *, epochs: int, sleep: float = 0.0) -> Path:
    """digits.yaml's Secret and storage, the project's entrypoint, default sizes but CPU."""
    import yaml

    docs = [d for d in yaml.safe_load_all(DIGITS.read_text()) if d]
    for doc in docs:
        if doc.get("kind") != "TrainJob":
            continue
        doc["metadata"]["name"] = name
        spec = doc["spec"]
        spec["entrypoint"] = "mytrain.loop:train"
        spec["config"] = {"epochs": epochs, "sleep": sleep}
        spec["scaling"]["resourcesPerWorker"] = {"cpu": CPU}
        spec.pop("checkpoint", None)
        head = {k: dict(v) for k, v in DEFAULT_HEAD_RESOURCES.items()}
        head["requests"]["cpu"] = CPU
        spec["head"] = {**ON_REAL_NODE, "resources": head}
        spec["workerTemplate"] = dict(ON_REAL_NODE)
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _submit(world: RealWorld, namespace: str, manifest: Path, project: Path, *extra: str) -> Any:
    """`raytrain submit FILE --code DIR`, as a user in the cluster's namespace runs it; MinIO is
    on this namespace's loopback, the job's endpoint is the in-cluster Service."""
    proc = subprocess.run(
        [sys.executable, "-m", "raytrain.cli", "submit", str(manifest), "--code", str(project),
         "-n", namespace, "--s3-endpoint", world.minio.endpoint, "-o", "json", *extra],
        # The job's Secret in the file gives the credentials: no AWS variables, and no look-up
        # of an instance's metadata service (there is none here).
        env={**{k: v for k, v in world.cluster.env.items() if not k.startswith("AWS_")},
             "AWS_EC2_METADATA_DISABLED": "true"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)[0]


def _first_report(world: RealWorld, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    def reported() -> dict[str, Any] | None:
        tj = _trainjob(world, namespace, name)
        status = tj.get("status", {})
        failed = [c for c in status.get("conditions", []) if c["type"] == "Failed"]
        assert not (failed and failed[0]["status"] == "True"), status
        return tj if status.get("trainerStatus", {}).get("metrics") else None

    return wait_for(reported, timeout, f"the first report of {namespace}/{name}", interval=0.5)


def _answer(tj: dict[str, Any]) -> int:
    for m in tj["status"]["trainerStatus"]["metrics"]:
        if m["name"] == "answer":
            return int(float(m["value"]))
    raise AssertionError(f"no answer metric: {tj['status']['trainerStatus']}")


def _record(**seconds: float) -> None:
    path = os.environ.get("RAYTRAIN_CODE_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({k: round(v, 1) for k, v in seconds.items()}) + "\n")


@pytest.mark.long
def test_a_folder_in_no_image_trains_on_real_pods_and_an_edited_line_runs_when_resubmitted(
    real_world: RealWorld, namespace: str, tmp_path: Path
) -> None:
    project = user_project(tmp_path / "proj")
    manifest = _manifest(tmp_path / "mine.yaml", "mine", epochs=2)
    started = time.monotonic()
    submitted = _submit(real_world, namespace, manifest, project)
    _first_report(real_world, namespace, "mine", START_TIMEOUT + TRAIN_TIMEOUT)
    first_seconds = time.monotonic() - started
    code = submitted["code"]
    assert re.fullmatch(r"[0-9a-f]{64}", code["sha256"]), submitted
    assert code["uri"] == f"s3://{BUCKET}/checkpoints/code/{code['sha256']}.zip"

    done = wait_condition(real_world.cluster, namespace, "mine", "Succeeded",
                          START_TIMEOUT + TRAIN_TIMEOUT)  # fmt: skip
    assert _answer(done) == 42
    assert done["spec"]["code"] == code
    # What .gitignore leaves out stayed on this machine.
    import io
    import zipfile

    body = real_world.minio.client().get_object(Bucket=BUCKET, Key=code["uri"].split("/", 3)[3])
    names = zipfile.ZipFile(io.BytesIO(body["Body"].read())).namelist()
    assert "data/offset.txt" in names and "data/weights.bin" not in names, names

    # One line edited, the same manifest submitted again: no image build, no import.
    (project / "mytrain" / "helper.py").write_text("def answer() -> int:\n    return 99\n")
    started = time.monotonic()
    again = _submit(real_world, namespace, manifest, project, "--replace")
    first = _first_report(real_world, namespace, "mine", START_TIMEOUT + TRAIN_TIMEOUT)
    _record(submit_to_first_report_s=first_seconds,
            resubmit_to_first_report_s=time.monotonic() - started)  # fmt: skip
    assert again["code"]["sha256"] != code["sha256"]
    assert _answer(first) == 100
    done = wait_condition(real_world.cluster, namespace, "mine", "Succeeded", TRAIN_TIMEOUT)
    assert _answer(done) == 100
    logs = _logs(real_world, namespace, "mine", "--attempt", "0")
    assert f"code: snapshot sha256:{again['code']['sha256']}" in logs.stdout, logs.stderr


@pytest.mark.realpods_faults
@pytest.mark.realpods_second_cluster
def test_a_retry_after_a_deleted_head_pod_runs_the_same_code_snapshot(
    real_world: RealWorld, namespace: str, tmp_path: Path
) -> None:
    project = user_project(tmp_path / "proj")
    manifest = _manifest(tmp_path / "mine.yaml", "code-retry", epochs=40, sleep=1.0)
    code = _submit(real_world, namespace, manifest, project)["code"]
    tj = _first_report(real_world, namespace, "code-retry", START_TIMEOUT + TRAIN_TIMEOUT)
    # The folder changes after submission: the job must not pick that up.
    (project / "mytrain" / "helper.py").write_text("def answer() -> int:\n    return 7\n")
    cluster = real_world.cluster
    cluster.kubectl("delete", "pod", "-n", namespace, "--wait=false",
                    "-l", f"ray.io/cluster={tj['status']['rayClusterName']},"
                    "ray.io/node-type=head")  # fmt: skip
    done = wait_condition(cluster, namespace, "code-retry", "Succeeded",
                          2 * (START_TIMEOUT + TRAIN_TIMEOUT))  # fmt: skip
    assert done["status"]["restarts"] >= 1
    assert _answer(done) == 42
    for attempt in ("0", "1"):
        logs = _logs(real_world, namespace, "code-retry", "--attempt", attempt)
        assert f"code: snapshot sha256:{code['sha256']}" in logs.stdout, (attempt, logs.stderr)
