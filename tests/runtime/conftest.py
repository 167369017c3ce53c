"""Fixtures for the runtime tests: a local Ray (2 CPUs) and a real S3 server on loopback.

``s3_server`` is MinIO, built once from the Go module proxy by e2e/minio/build.sh (cached) and
started on a free port for the session. In a required run (CI, or RAYTRAIN_REQUIRE_ALL=1:
tests/_required.py) a failure to build or start it fails the tests. Elsewhere, when MinIO cannot
be built (no Go), moto's server stands in, with a loud warning: it is correct enough for
checkpoints, too slow to measure anything with.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _ports import free_port
from _required import required
from pydantic import TypeAdapter

from raytrain_contract import (
    CheckpointSettings,
    Contract,
    FailureSettings,
    ReportSettings,
    Scaling,
    Storage,
    TorchSettings,
    TrainJobRef,
    dump_contract,
)

REPO = Path(__file__).resolve().parents[2]
ACCESS_KEY, SECRET_KEY, REGION = "raytrain", "raytrain-secret", "us-east-1"
_PAUSE = threading.Event()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until truthy, failing with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        _PAUSE.wait(0.2)


@dataclass
class S3Server:
    endpoint: str
    kind: str  # "minio" or "moto"
    bucket: str

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}),
        )

    def keys(self, prefix: str) -> list[str]:
        paginator = self.client().get_paginator("list_objects_v2")
        out: list[str] = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return out

    def checkpoint_dirs(self, prefix: str) -> set[str]:
        """Names of the ``checkpoint_*`` directories directly under ``prefix``."""
        out = set()
        for key in self.keys(prefix.rstrip("/") + "/"):
            parts = key[len(prefix) :].lstrip("/").split("/")
            if len(parts) > 1 and parts[0].startswith("checkpoint_"):
                out.add(parts[0])
        return out


def _live(endpoint: str) -> bool:
    with urllib.request.urlopen(f"{endpoint}/minio/health/live", timeout=2) as r:
        return r.status == 200


def _build_minio() -> str:
    proc = subprocess.run(
        ["bash", str(REPO / "e2e/minio/build.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"e2e/minio/build.sh failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    bucket = "raytrain"
    try:
        binary = _build_minio()
    except Exception as exc:
        if required() or shutil.which("go") is not None:
            pytest.fail(f"MinIO could not be built: {exc}")
        warnings.warn(
            f"MinIO could not be built ({exc}); FALLING BACK TO MOTO's server. "
            "Correctness only: do not read any timing from this run.",
            stacklevel=1,
        )
        print("\n!!! S3 FALLBACK: moto server instead of MinIO !!!\n", file=sys.stderr)
        yield from _moto(bucket)
        return
    data = tempfile.mkdtemp(prefix="raytrain-minio-")
    port, console = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "MINIO_ROOT_USER": ACCESS_KEY,
        "MINIO_ROOT_PASSWORD": SECRET_KEY,
        "MINIO_BROWSER": "off",
    }
    log = open(os.path.join(data, "..", f"minio-{port}.log"), "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [binary, "server", "--quiet", "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{console}", data],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: proc.poll() is None and _live(endpoint), 60, f"MinIO at {endpoint}")
        server = S3Server(endpoint, "minio", bucket)
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(data, ignore_errors=True)


def _moto(bucket: str) -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        s3 = S3Server(f"http://127.0.0.1:{port}", "moto", bucket)
        s3.client().create_bucket(Bucket=bucket)
        yield s3
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_env(s3_server: S3Server) -> Iterator[S3Server]:
    """The standard AWS variables the operator puts in the pods, for this server."""
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"] = ACCESS_KEY
    os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET_KEY
    yield s3_server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def ray_local(s3_env: S3Server) -> Iterator[None]:
    """One local Ray for the session: 2 CPUs, enough for 2 workers of 1 CPU each."""
    import ray

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    os.chdir(REPO)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def make_contract_doc(
    *,
    run_name: str | None = None,
    entrypoint: str = "examples.digits.train:train_loop_per_worker",
    config: dict[str, Any] | None = None,
    storage: dict[str, Any],
    num_to_keep: int | None = 2,
    max_failures: int = 0,
    min_interval: float = 0.0,
) -> dict[str, Any]:
    """A contract document built with the contract model, as the operator builds one."""
    contract = Contract(
        train_job=TrainJobRef(
            namespace="team-a", name="digits", uid="5f0c2a7e-91b3-4c1d-9e0f-123456789abc"
        ),
        run_name=run_name or f"digits-{uuid.uuid4().hex[:12]}",
        entrypoint=entrypoint,
        config=config if config is not None else {"epochs": 3, "lr": 0.1},
        scaling=Scaling(num_workers=2, resources_per_worker={"CPU": 1.0}),
        torch=TorchSettings(backend="gloo", timeout_seconds=300),
        storage=TypeAdapter(Storage).validate_python(storage),
        checkpoint=CheckpointSettings(num_to_keep=num_to_keep),
        failure=FailureSettings(max_failures=max_failures),
        report=ReportSettings(min_interval_seconds=min_interval),
    )
    return dump_contract(contract)


@pytest.fixture
def make_doc() -> Callable[..., dict[str, Any]]:
    """Build a contract document (v1) for a test run; keyword arguments as make_contract_doc."""
    return make_contract_doc
