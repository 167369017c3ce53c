"""Checkpoint save/restore through our storage wiring vs a raw boto3 transfer, same MinIO.

Ours: the ``pyarrow.fs.S3FileSystem`` that ``trainer_runtime.storage`` builds, driven by the
functions Ray Train V2 itself uses to persist and fetch a checkpoint directory
(``_upload_to_fs_path`` / ``_download_from_fs_path``). Baseline: boto3's ``upload_file`` /
``download_file`` (its default multipart, multi-threaded transfer) of the same files. Each
repetition saves and restores once per arm, the arm that goes first alternating, and deletes
what it wrote (outside the timing). Printed: every repetition, the median, IQR and min/max per
direction and arm, the ratio of median times per direction (ours / boto3; < 1 means ours is
faster), and the load average and CPU count as the OS reports them.

    python benchmarks/checkpoint_vs_boto3.py [--mb 256] [--files 4] [--repeats 6]
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
from _stats import load_avg, machine, stamp, summary  # noqa: E402

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
    ap.add_argument("--repeats", type=int, default=6)
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
        files = sorted(src.iterdir())

        def ours(r: int) -> tuple[float, float]:
            dest = f"{target.path}/checkpoint_{r}"
            t = time.perf_counter()
            _upload_to_fs_path(str(src), target.filesystem, dest)
            up = time.perf_counter() - t
            out = work / f"ours_{r}"
            t = time.perf_counter()
            _download_from_fs_path(target.filesystem, dest, str(out))
            down = time.perf_counter() - t
            shutil.rmtree(out)
            target.filesystem.delete_dir(dest)
            return up, down

        def boto(r: int) -> tuple[float, float]:
            prefix = f"boto3/checkpoint_{r}"
            t = time.perf_counter()
            for f in files:
                s3.upload_file(str(f), "bench", f"{prefix}/{f.name}")
            up = time.perf_counter() - t
            out = work / f"b3_{r}"
            out.mkdir()
            t = time.perf_counter()
            for f in files:
                s3.download_file("bench", f"{prefix}/{f.name}", str(out / f.name))
            down = time.perf_counter() - t
            shutil.rmtree(out)
            for f in files:
                s3.delete_object(Bucket="bench", Key=f"{prefix}/{f.name}")
            return up, down

        print(f"checkpoint_vs_boto3: {stamp()}; {machine()}")
        print(
            f"{total_mb:.0f} MB in {args.files} files, MinIO on loopback, {args.repeats} "
            "repetitions, the arm that goes first alternating"
        )
        print(f"{'rep':>3} {'order':14} {'load1':>5} {'ours up':>8} {'ours down':>9} "
              f"{'boto3 up':>8} {'boto3 down':>10}  (seconds)")  # fmt: skip
        results: dict[str, list[float]] = {
            k: [] for k in ("ours_up", "ours_down", "b3_up", "b3_down")
        }
        for r in range(args.repeats):
            load1 = os.getloadavg()[0]
            first_ours = r % 2 == 0
            if first_ours:
                (ou, od), (bu, bd) = ours(r), boto(r)
            else:
                (bu, bd), (ou, od) = boto(r), ours(r)
            for k, took in zip(results, (ou, od, bu, bd), strict=True):
                results[k].append(took)
            order = "ours, boto3" if first_ours else "boto3, ours"
            print(f"{r + 1:>3} {order:14} {load1:5.2f} {ou:8.2f} {od:9.2f} {bu:8.2f} "
                  f"{bd:10.2f}", flush=True)  # fmt: skip

        print(f"load average at the end (1/5/15 min): {load_avg()}")
        for k, v in results.items():
            print(f"{k:10s} s     {summary(v, '{:.2f}')}")
            print(f"{k:10s} MB/s  {summary([total_mb / x for x in v], '{:.0f}')}")
        med = {k: statistics.median(v) for k, v in results.items()}
        up, down = med["ours_up"] / med["b3_up"], med["ours_down"] / med["b3_down"]
        print(
            f"RESULT checkpoint_vs_boto3: {total_mb:.0f} MB in {args.files} files, "
            f"{args.repeats} repetitions, ratio of median times (ours / boto3): save {up:.2f} "
            f"(ours {total_mb / med['ours_up']:.0f} MB/s vs "
            f"boto3 {total_mb / med['b3_up']:.0f} MB/s), restore {down:.2f} "
            f"(ours {total_mb / med['ours_down']:.0f} MB/s vs "
            f"boto3 {total_mb / med['b3_down']:.0f} MB/s)"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
