"""What the checkpoint manifest costs: a 1 GiB save and a verified restore through our wiring.

Two storage targets: S3 (MinIO on loopback, built by e2e/minio/build.sh, reached through the
``pyarrow.fs.S3FileSystem`` that ``trainer_runtime.storage.s3_filesystem`` builds) and a local
directory through ``pyarrow.fs.LocalFileSystem`` (what a PVC mount is to a worker).

The checkpoint is made once by the script: random bytes in five files, the way a model and
optimizer checkpoint looks (one file of 3/4 of the total, the optimizer state, a scaler, RNG
state, a small JSON).

Save, per round, one rank:

* baseline: Ray Train's persist step, ``create_dir`` then Ray's own
  ``_pyarrow_fs_copy_files`` from the local directory into a fresh checkpoint directory;
* with manifest: ``manifests.save_with_part`` around the same create_dir and copy (the sizes
  and CRC32C of the local files computed while the copy runs, then rank 0's part), and
  ``manifests.finish_manifest`` (the controller's merge into ``manifest.json``).

Restore, per round, of one checkpoint saved with its manifest before the rounds:

* baseline: Ray's ``_download_from_fs_path`` into a fresh local directory, what
  ``Checkpoint.to_directory()`` / ``as_directory()`` does for a checkpoint in remote storage;
* verified: ``manifests.fetch_verified`` (sizes by a listing, then the download with each
  file's CRC32C computed as its bytes arrive; on a local directory, the CRC32C in place), what a
  worker runs before its loop when spec.checkpoint.verify is Checksums.

In each round the two arms of an operation run back to back, the one that goes first
alternating from round to round (AB, BA, AB, ...). What each arm wrote is deleted after it,
outside the timing. The page cache is not dropped (that needs privileges): the source files
are warm (just written, as a loop's checkpoint is when Ray uploads it), and so is what MinIO
and the local target hold when it is read back. Printed: every round, the medians, the ratio of
medians (with manifest / baseline) and the spread of the per-round ratios, then where the
manifest's time goes. With the defaults it also replaces its section of benchmarks/RESULTS.md.

    python benchmarks/checkpoint_manifest.py [--rounds 6] [--mib 1024] [--targets s3,local]
        [--note TEXT] [--no-results]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.fs as pafs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from _ports import free_port  # noqa: E402  (one helper, shared with the tests)
from _stats import load_avg, machine, stamp, summary  # noqa: E402

KEY, SECRET, REGION = "raytrain", "raytrain-secret", "us-east-1"
BUCKET = "bench"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
HEADING = "## Checkpoint manifest: 1 GiB save and verified restore"
#: The section goes after this one when RESULTS.md has none yet.
AFTER = "## Checkpoint save/restore through our storage wiring vs raw boto3"
GOALS = {"save": 1.05, "restore": 1.10}
DEFAULT_MIB = 1024

#: The checkpoint's files: (relative path, share of the total in 1/1024ths).
LAYOUT = [
    ("model.pt", 768),
    ("optimizer/state.pt", 240),
    ("optimizer/scaler.pt", 15),
    ("rng_state.pt", 1),
]
CHUNK = 8 << 20


def make_checkpoint(directory: Path, mib: int) -> tuple[int, int]:
    """Random bytes in LAYOUT's files plus a small JSON; returns (bytes, files)."""
    total = mib << 20
    written = 0
    for rel, share in LAYOUT:
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        size = total * share // 1024
        with open(path, "wb") as f:
            left = size
            while left > 0:
                n = min(CHUNK, left)
                f.write(os.urandom(n))
                left -= n
        written += size
    state = b'{"epoch": 3, "global_step": 12000, "best_metric": 0.4187}\n'
    (directory / "trainer_state.json").write_bytes(state)
    return written + len(state), len(LAYOUT) + 1


def ram_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def test_runs() -> str:
    """The pytest processes running beside this script: their command lines, shortened."""
    found: list[str] = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit():
            continue
        try:
            argv = [
                a.decode(errors="replace")
                for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if a
            ]
        except OSError:
            continue
        if not argv:
            continue
        program = os.path.basename(argv[0])
        if program == "pytest" or (program.startswith("python") and argv[1:3] == ["-m", "pytest"]):
            found.append(" ".join([program, *argv[1:]])[:100])
    return "; ".join(sorted(found)) or "none"


def start_minio(data: str) -> tuple[subprocess.Popen[bytes], str]:
    build = subprocess.run(
        ["bash", str(REPO / "e2e/minio/build.sh")], capture_output=True, text=True, check=False
    )
    if build.returncode != 0:
        sys.exit(f"e2e/minio/build.sh failed:\n{build.stderr[-3000:]}")
    binary = build.stdout.strip().splitlines()[-1]
    port, console = free_port(), free_port()
    env = {
        **os.environ,
        "MINIO_ROOT_USER": KEY,
        "MINIO_ROOT_PASSWORD": SECRET,
        "MINIO_BROWSER": "off",
    }
    proc = subprocess.Popen(
        [binary, "server", "--quiet", "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{console}", data],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            sys.exit(f"MinIO exited with {proc.returncode} before it served {endpoint}")
        try:
            with urllib.request.urlopen(f"{endpoint}/minio/health/live", timeout=2) as r:
                if r.status == 200:
                    return proc, endpoint
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            sys.exit(f"MinIO did not start at {endpoint}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class Target:
    name: str
    fs: pafs.FileSystem
    root: str  # where the checkpoints go, as the filesystem names it
    uri: Callable[[str], str]


@dataclass
class Arms:
    """One operation's rounds on one target: seconds per round for each arm."""

    base: list[float] = field(default_factory=list)
    variant: list[float] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [v / b for b, v in zip(self.base, self.variant, strict=True)]

    def ratio_of_medians(self) -> float:
        return statistics.median(self.variant) / statistics.median(self.base)


def checkpoint_name(n: int) -> str:
    """A name in Ray Train's format (checkpoint_<date>_<time>.<micros>), one per n."""
    return f"checkpoint_2026-11-28_12-00-00.{n:06d}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--mib", type=int, default=DEFAULT_MIB, help="checkpoint size in MiB")
    ap.add_argument("--targets", default="s3,local")
    ap.add_argument("--note", default="", help="a sentence for RESULTS.md (e.g. what else ran)")
    ap.add_argument("--no-results", action="store_true", help="do not write RESULTS.md")
    args = ap.parse_args()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not targets or set(targets) - {"s3", "local"}:
        sys.exit("--targets: a comma-separated list of s3 and local")
    command = "python benchmarks/checkpoint_manifest.py" + "".join(
        f" {shlex.quote(a)}" for a in sys.argv[1:]
    )

    import boto3
    from botocore.config import Config
    from ray.train.v2._internal.execution.storage import (
        _download_from_fs_path,
        _pyarrow_fs_copy_files,
    )

    from raytrain_contract import checkpoints as ck
    from trainer_runtime import manifests
    from trainer_runtime.storage import s3_filesystem

    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    work = Path(tempfile.mkdtemp(prefix="ckpt-manifest-bench-"))
    minio: subprocess.Popen[bytes] | None = None
    lines: list[str] = []

    def out(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    try:
        source = work / "source"
        source.mkdir()
        local_fs = pafs.LocalFileSystem()
        size, nfiles = make_checkpoint(source, args.mib)
        src = str(source)

        built: list[Target] = []
        for name in targets:
            if name == "s3":
                minio, endpoint = start_minio(str(work / "minio"))
                os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = KEY, SECRET
                fs = s3_filesystem(endpoint, REGION)
                boto3.client(
                    "s3",
                    endpoint_url=endpoint,
                    aws_access_key_id=KEY,
                    aws_secret_access_key=SECRET,
                    region_name=REGION,
                    config=Config(s3={"addressing_style": "path"}),
                ).create_bucket(Bucket=BUCKET)
                built.append(Target("s3", fs, BUCKET, lambda p: f"s3://{p}"))
            else:
                (work / "pvc").mkdir()
                built.append(Target("local", local_fs, str(work / "pvc"), lambda p: p))

        counter = iter(range(1, 1_000_000))

        def save_base(t: Target, r: int) -> float:
            run = f"save-{r}-base"
            dest = f"{t.root}/{run}/{checkpoint_name(next(counter))}"
            start = time.perf_counter()
            t.fs.create_dir(dest)
            _pyarrow_fs_copy_files(
                source=src,
                destination=dest,
                source_filesystem=local_fs,
                destination_filesystem=t.fs,
            )
            took = time.perf_counter() - start
            t.fs.delete_dir(f"{t.root}/{run}")
            return took

        split: dict[str, dict[str, list[float]]] = {}
        fetch_split: dict[str, dict[str, list[float]]] = {}

        def save_manifest(t: Target, run: str, keep: bool = False) -> tuple[float, str]:
            dest = f"{t.root}/{run}/{checkpoint_name(next(counter))}"

            def upload() -> Any:
                t.fs.create_dir(dest)
                _pyarrow_fs_copy_files(
                    source=src,
                    destination=dest,
                    source_filesystem=local_fs,
                    destination_filesystem=t.fs,
                )
                return SimpleNamespace(checkpoint=SimpleNamespace(filesystem=t.fs, path=dest))

            marks = [time.perf_counter()]
            # What a worker runs (manifests.install_part_writer): the upload with the CRC32C of
            # the local files computed alongside it, then the rank's part.
            manifests.save_with_part(src, upload, rank=0)
            marks.append(time.perf_counter())
            manifest = manifests.finish_manifest(
                t.fs,
                dest,
                run=run,
                attempt=0,
                fence="raysubmit_bench",
                epoch=3,
                metrics={"loss": 0.4187},
            )
            marks.append(time.perf_counter())
            if manifest is None or len(manifest.files) != nfiles:
                sys.exit(f"{t.name}: finish_manifest wrote no manifest of {nfiles} files")
            if not keep:
                steps = split.setdefault(t.name, {"upload": [], "manifest": []})
                for key, a, b in zip(steps, marks, marks[1:], strict=False):
                    steps[key].append(b - a)
                t.fs.delete_dir(f"{t.root}/{run}")
            return marks[-1] - marks[0], dest

        def save_manifest_round(t: Target, r: int) -> float:
            return save_manifest(t, f"save-{r}-manifest")[0]

        def read_all(directory: str) -> int:
            """Every byte of a checkpoint read once, as a loop loading it reads them."""
            total = 0
            for root, _dirs, files in os.walk(directory):
                for f in files:
                    with open(os.path.join(root, f), "rb") as stream:
                        while chunk := stream.read(8 << 20):
                            total += len(chunk)
            return total

        def restore_base(t: Target, path: str, _round: int) -> float:
            if t.name == "local":
                # A mounted volume: as_directory() hands the loop the path itself, no copy;
                # what a restore costs is the loop reading the files.
                start = time.perf_counter()
                read_all(path)
                return time.perf_counter() - start
            local = tempfile.mkdtemp(prefix="restore-", dir=work)
            start = time.perf_counter()
            _download_from_fs_path(fs=t.fs, fs_path=path, local_path=local)
            took = time.perf_counter() - start
            shutil.rmtree(local)
            return took

        def restore_verified(t: Target, path: str, _round: int) -> float:
            workdir = tempfile.mkdtemp(prefix="resume-", dir=work)
            start = time.perf_counter()
            index, fetched = manifests.fetch_verified(
                manifests.PyArrowStore(t.fs),
                t.fs,
                path,
                uri=t.uri,
                attempt=0,
                workdir=workdir,
            )
            if t.name == "local":
                read_all(path)  # checked in place, then read by the loop
            took = time.perf_counter() - start
            in_place = t.name == "local"
            if index != 0 or fetched.rejected or (fetched.local is None) != in_place:
                sys.exit(f"{t.name}: fetch_verified did not verify {path}: {fetched}")
            shutil.rmtree(workdir)
            return took

        out(f"checkpoint_manifest: {stamp()}; {machine()}; {ram_gib():.0f} GiB RAM")
        out(f"pytest runs at the start: {test_runs()}")
        out(
            f"checkpoint: {size} bytes ({size / 2**30:.3f} GiB) in {nfiles} files, the largest "
            f"{args.mib * LAYOUT[0][1] // 1024} MiB; one rank; {args.rounds} rounds, the arm "
            "that goes first alternating (AB, BA, ...)"
        )
        out(
            f"{'target':6} {'op':7} {'round':>5} {'order':5} {'load1':>5} "
            f"{'baseline s':>10} {'manifest s':>10} {'ratio':>6}"
        )
        results: dict[tuple[str, str], Arms] = {}
        for t in built:
            # The restore's checkpoint, saved with its manifest in a run of its own, the run's
            # marker written as the first manifest-writing driver writes it.
            run_dir = f"{t.root}/restore-run"
            _, restore_path = save_manifest(t, "restore-run", keep=True)
            manifests.legacy_before(manifests.PyArrowStore(t.fs), run_dir)
            ops: list[tuple[str, Callable[[int], float], Callable[[int], float]]] = [
                ("save", partial(save_base, t), partial(save_manifest_round, t)),
                (
                    "restore",
                    partial(restore_base, t, restore_path),
                    partial(restore_verified, t, restore_path),
                ),
            ]
            for op, base, variant in ops:
                arms = results.setdefault((t.name, op), Arms())
                for r in range(args.rounds):
                    load1 = os.getloadavg()[0]
                    if r % 2 == 0:
                        order, b, v = "AB", base(r), variant(r)
                    else:
                        order = "BA"
                        v = variant(r)
                        b = base(r)
                    arms.base.append(b)
                    arms.variant.append(v)
                    out(
                        f"{t.name:6} {op:7} {r + 1:>5} {order:5} {load1:5.2f} "
                        f"{b:10.3f} {v:10.3f} {v / b:6.3f}"
                    )
            steps = fetch_split.setdefault(t.name, {"list": [], "download": []})
            for _ in range(args.rounds if t.name == "s3" else 0):
                store = manifests.PyArrowStore(t.fs)
                local = tempfile.mkdtemp(prefix="split-", dir=work)
                marks = [time.perf_counter()]
                ck.checkpoint_dirs(store, run_dir)
                store.read(f"{run_dir}/{ck.META_DIR}/{manifests.MARKER_NAME}")
                verdict = ck.verify(store, restore_path, checksums=False)
                marks.append(time.perf_counter())
                assert verdict.manifest is not None
                checked = manifests.download_checked(
                    t.fs, restore_path, local, verdict.manifest, verdict.extra
                )
                marks.append(time.perf_counter())
                if not (verdict.ok and checked.ok):
                    sys.exit(f"{t.name}: the restore's checkpoint failed its check")
                for key, a, b in zip(steps, marks, marks[1:], strict=False):
                    steps[key].append(b - a)
                shutil.rmtree(local)
            t.fs.delete_dir(run_dir)
        out(f"load average at the end (1/5/15 min): {load_avg()}")
        out(f"pytest runs at the end: {test_runs()}")
        out("A = baseline, B = with manifest (save) / verified (restore); ratio = B / A")
        out()
        out("where the time goes (seconds per round; the same calls, timed one by one):")
        labels = {
            "upload": "save: save_with_part (Ray's copy, CRC32C alongside, part)",
            "manifest": "save: finish_manifest",
            "list": "restore: run listing, marker, verify by sizes",
            "download": "restore: download_checked (CRC32C as the bytes arrive)",
        }
        for name in split:
            for key, values in {**split[name], **fetch_split.get(name, {})}.items():
                out(f"  {name:6} {labels[key]:52} {summary(values)}")
        table = [
            "| target | operation | baseline median s | with manifest median s | ratio of medians "
            "| per-round ratios | goal | met |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        verdicts: list[str] = []
        for (name, op), arms in results.items():
            ratio = arms.ratio_of_medians()
            goal = GOALS[op]
            met = "met" if ratio <= goal else "NOT MET"
            what = "save" if op == "save" else "verified restore"
            verdicts.append(f"{name} {what}: {ratio:.3f} (goal <= {goal:.2f}): {met}")
            table.append(
                f"| {name} | {what} | {statistics.median(arms.base):.3f} | "
                f"{statistics.median(arms.variant):.3f} | {ratio:.3f} | "
                f"{summary(arms.ratios())} | <= {goal:.2f} | {met} |"
            )
        out("RESULT checkpoint_manifest: " + "; ".join(verdicts))
        print()
        print("\n".join(table))

        if args.no_results:
            print("RESULTS.md not written (--no-results)")
        elif args.mib != DEFAULT_MIB or args.rounds < 5 or set(targets) != {"s3", "local"}:
            print("RESULTS.md not written: its section is for 1 GiB, both targets, >= 5 rounds")
        else:
            write_results(started, command, lines, table, args.note)
            print(f"RESULTS.md: section '{HEADING[3:]}' written")
    finally:
        if minio is not None:
            stop(minio)
        shutil.rmtree(work, ignore_errors=True)


def write_results(
    started: str, command: str, lines: list[str], table: list[str], note: str
) -> None:
    """Replace (or add) this script's section of RESULTS.md with this run."""
    when = f"{started}-{time.strftime('%H:%M', time.gmtime())} UTC"
    body = [
        HEADING,
        "",
        "`python benchmarks/checkpoint_manifest.py` writes this section (defaults: `--rounds 6`,",
        "1 GiB, both targets). The checkpoint: 1 GiB of random bytes in five files (768 MiB",
        "model, 240 + 15 MiB optimizer state, 1 MiB RNG state, a small JSON), one rank. Save: Ray",
        "Train's persist step (`create_dir` + Ray's `_pyarrow_fs_copy_files`) against",
        "`manifests.save_with_part` around the same step (CRC32C of the local files computed",
        "while the copy runs, then the rank's part) + `finish_manifest`. Restore:",
        "on S3, Ray's `_download_from_fs_path` (what `Checkpoint.to_directory()` does for a",
        "checkpoint in storage) against `manifests.fetch_verified` (run listing, sizes, download",
        "with CRC32C as the bytes arrive); on the local directory, where the loop reads the",
        "checkpoint in place, one read of every file against `fetch_verified` (CRC32C in place)",
        "+ that read.",
        "Targets: MinIO on loopback through",
        "`trainer_runtime.storage.s3_filesystem`, and a local directory through",
        "`pyarrow.fs.LocalFileSystem` (what a PVC mount is). Each round runs both arms back to",
        "back, the first alternating (AB, BA, ...); ratio = with manifest / baseline; the goal is",
        "on the ratio of medians. Warm, not cold: the page cache was not dropped (that needs",
        "privileges), so the source files (just written, as a loop's checkpoint is when Ray",
        "uploads it) and the stored copies the restores read back stay in memory (the RAM",
        "printed below holds them several times over): no figure here includes a disk read.",
        "Machine: 2 cores, shared with other work (the load and the pytest runs are printed).",
        "",
        f"Run {when}, `{command}`:",
        "",
        "```",
        *lines,
        "```",
        "",
        "Goals: ratio of medians <= 1.05 on save, <= 1.10 on a verified restore.",
        "",
        *table,
    ]
    if note:
        body += ["", note]
    text = RESULTS.read_text()
    start = text.find(f"\n{HEADING}\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        tail = text[end:] if end >= 0 else "\n"
        text = text[: start + 1] + "\n".join(body) + "\n" + tail
    else:
        anchor = text.find(f"\n{AFTER}")
        end = text.find("\n## ", anchor + 1) if anchor >= 0 else -1
        if end >= 0:
            text = text[: end + 1] + "\n".join(body) + "\n" + text[end:]
        else:
            text = text.rstrip("\n") + "\n\n" + "\n".join(body) + "\n"
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
