"""Checkpoint save/restore through our storage wiring vs a raw boto3 transfer, same MinIO.

Ours: the ``pyarrow.fs.S3FileSystem`` that ``trainer_runtime.storage`` builds, driven by the
functions Ray Train V2 itself uses to persist and fetch a checkpoint directory
(``_upload_to_fs_path`` / ``_download_from_fs_path``). Baseline: boto3's ``upload_file`` /
``download_file`` (its default multipart, multi-threaded transfer) of the same files. The
result is a ratio per direction (ours / boto3 time; < 1 means ours is faster), median of runs.

    python benchmarks/checkpoint_vs_boto3.py [--mb 256] [--files 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from _ports import free_port  # noqa: E402  (one helper, shared with the tests)

KEY, SECRET = "raytrain", "raytrain-secret"


def start_minio(data: str) -> tuple[subprocess.Popen[bytes], str]:
    build = subprocess.run(["bash", str(REPO / "e2e/minio/build.sh")], capture_output=True,
                           text=True, check=True)  # fmt: skip
    binary = build.stdout.strip().splitlines()[-1]
    port, console = free_port(), free_port()
    env = {**os.environ, "MINIO_ROOT_USER": KEY, "MINIO_ROOT_PASSWORD": SECRET}
    proc = subprocess.Popen(
        [binary, "server", "--quiet", "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{console}", data],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/minio/health/live", timeout=2) as r:
                if r.status == 200:
                    return proc, endpoint
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"MinIO did not start at {endpoint}")
        threading.Event().wait(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import boto3
    from botocore.config import Config
    from ray.train.v2._internal.execution.storage import (
        _download_from_fs_path,
        _upload_to_fs_path,
    )

    from raytrain_contract import S3Storage
    from trainer_runtime.storage import storage_target

    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    proc, endpoint = start_minio(str(work / "minio"))
    try:
        os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = KEY, SECRET
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY,
                          aws_secret_access_key=SECRET, region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}))  # fmt: skip
        s3.create_bucket(Bucket="bench")
        src = work / "checkpoint"
        src.mkdir()
        per_file = args.mb * 1024 * 1024 // args.files
        for i in range(args.files):
            (src / f"shard_{i}.bin").write_bytes(os.urandom(per_file))
        total_mb = per_file * args.files / 2**20

        target = storage_target(S3Storage(path="s3://bench/ours", endpoint=endpoint,
                                        region="us-east-1"))  # fmt: skip
        results: dict[str, list[float]] = {
            k: [] for k in ("ours_up", "ours_down", "b3_up", "b3_down")
        }
        for r in range(args.repeats):
            dest = f"{target.path}/checkpoint_{r}"
            t = time.perf_counter()
            _upload_to_fs_path(str(src), target.filesystem, dest)
            results["ours_up"].append(time.perf_counter() - t)
            out = work / f"ours_{r}"
            t = time.perf_counter()
            _download_from_fs_path(target.filesystem, dest, str(out))
            results["ours_down"].append(time.perf_counter() - t)
            shutil.rmtree(out)

            t = time.perf_counter()
            for f in sorted(src.iterdir()):
                s3.upload_file(str(f), "bench", f"boto3/checkpoint_{r}/{f.name}")
            results["b3_up"].append(time.perf_counter() - t)
            out = work / f"b3_{r}"
            out.mkdir()
            t = time.perf_counter()
            for f in sorted(src.iterdir()):
                s3.download_file("bench", f"boto3/checkpoint_{r}/{f.name}", str(out / f.name))
            results["b3_down"].append(time.perf_counter() - t)
            shutil.rmtree(out)

        med = {k: statistics.median(v) for k, v in results.items()}
        up, down = med["ours_up"] / med["b3_up"], med["ours_down"] / med["b3_down"]
        for k, v in med.items():
            print(f"{k:10s} {v:7.2f} s  {total_mb / v:7.1f} MB/s")
        print(
            f"RESULT checkpoint_vs_boto3: {total_mb:.0f} MB in {args.files} files, median of "
            f"{args.repeats}: save ratio {up:.2f} (ours {total_mb / med['ours_up']:.0f} MB/s vs "
            f"boto3 {total_mb / med['b3_up']:.0f} MB/s), restore ratio {down:.2f} "
            f"(ours {total_mb / med['ours_down']:.0f} MB/s vs "
            f"boto3 {total_mb / med['b3_down']:.0f} MB/s)"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
