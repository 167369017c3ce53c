"""The run log on S3 (MinIO on loopback): the writer replaces whole objects (S3 has no append),
and ``python -m trainer_runtime.runlog cat`` reads them with the pods' AWS variables."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

from raytrain_contract import S3Storage
from trainer_runtime.runlog import EXIT_MISSING, open_run_log
from trainer_runtime.storage import storage_target

pytestmark = [pytest.mark.runtime]


def _cat(s3_env: Any, path: str) -> subprocess.CompletedProcess[bytes]:
    # What the reader pod has: AWS_ENDPOINT_URL and the credentials, no contract.
    env = dict(os.environ, AWS_ENDPOINT_URL=s3_env.endpoint, AWS_REGION="us-east-1")
    return subprocess.run(
        [sys.executable, "-m", "trainer_runtime.runlog", "cat", path],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_written_files_are_whole_objects_that_cat_reads_back(s3_env: Any) -> None:
    prefix = f"runlog-{uuid.uuid4().hex[:8]}"
    target = storage_target(
        S3Storage(
            path=f"s3://{s3_env.bucket}/{prefix}", endpoint=s3_env.endpoint, region="us-east-1"
        )
    )
    log = open_run_log(target, "digits-5f0c2a7e91b3", 1)
    assert log.uri == f"s3://{s3_env.bucket}/{prefix}/digits-5f0c2a7e91b3/attempt-1"
    log.write_output("epoch 0\n")
    log.flush()
    log.write_output("epoch 1\n")
    log.metric({"epoch": 1, "loss": 0.1}, None, step=2)
    log.worker_errors({0: "exception: builtins.ValueError\n"})
    log.flush()

    base = f"{prefix}/digits-5f0c2a7e91b3/attempt-1/"
    assert sorted(s3_env.keys(base)) == [
        base + "driver.log",
        base + "metrics.jsonl",
        base + "worker-0.error.txt",
    ]
    uri = f"s3://{s3_env.bucket}/{base}"
    proc = _cat(s3_env, uri + "driver.log")
    assert (proc.returncode, proc.stdout) == (0, b"epoch 0\nepoch 1\n"), proc.stderr

    proc = _cat(s3_env, uri + "worker-1.error.txt")
    assert proc.returncode == EXIT_MISSING and proc.stdout == b""
    assert b"holds: driver.log, metrics.jsonl, worker-0.error.txt" in proc.stderr

    proc = _cat(s3_env, f"s3://{s3_env.bucket}/{prefix}/digits-5f0c2a7e91b3/attempt-9/driver.log")
    assert proc.returncode == EXIT_MISSING and b"does not exist" in proc.stderr
