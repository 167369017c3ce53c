"""The checkpoint manifest: what a checkpoint holds, written once all of it is stored.

A checkpoint directory of a run (``<storage>/<run>/checkpoint_<time>/``) is trusted only with a
complete manifest beside its files, ``.raytrain/manifest.json``: every file's path, size and
CRC32C, the run, the attempt and its fence that wrote it, the epoch and the metrics. The runtime
writes it after every file is stored and before the checkpoint is reported, so a directory
without one (a pod killed mid-upload, or between the upload and the manifest) is never the
job's latest or best checkpoint.

CRC32C because it costs almost nothing: the ``google-crc32c`` package computes it with the
CPU's CRC instruction at several GB/s (a sha256 here is about 1.4 GB/s), and it is the checksum S3
itself can store and check per object (``x-amz-checksum-crc32c``). It finds truncation and
corruption; it is not meant to resist someone who forges files on purpose (storage credentials
guard that).

Checking a checkpoint (``verify``) compares the manifest with what storage holds: sizes always
(a listing, no reads), checksums when asked (every byte read once). Both the runtime (pyarrow
filesystems) and the CLI (boto3, from a user's machine) check through the small ``Store``
protocol, so the rules live here once.

A checkpoint found wanting is marked, never deleted: ``.raytrain/rejected.json`` in its
directory says when, by which attempt and why.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any, Literal, Protocol

import google_crc32c
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from raytrain_contract.timefmt import rfc3339

#: Inside a checkpoint directory: the manifest, the ranks' parts of it and the rejection mark.
META_DIR = ".raytrain"
MANIFEST_NAME = "manifest.json"
PART_PREFIX = "part-"
REJECTED_NAME = "rejected.json"
MANIFEST_FORMAT = 1
#: How the runtime's message begins when a resume finds no checkpoint it can use: the operator
#: knows by it that the failure is the same on every attempt (no retry).
NO_CHECKPOINT = "no checkpoint to resume from:"
#: Ray Train's checkpoint directories inside a run's directory start with this.
CHECKPOINT_PREFIX = "checkpoint_"

_CHUNK = 8 << 20

Problem = Literal["no-manifest", "bad-manifest", "missing", "size", "checksum", "rejected"]


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    path: str = Field(min_length=1)  # relative to the checkpoint directory, "/"-separated
    size: int = Field(ge=0)
    #: Hex CRC32C of the whole file; None when it could not be computed where it was written
    #: (a custom upload function): then only the size is checked.
    crc32c: str | None = None


class Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: int = MANIFEST_FORMAT
    run: str
    checkpoint: str  # the directory's name
    attempt: int | None = None
    #: The writer's fence besides the attempt: the Ray job that ran it.
    fence: str | None = None
    epoch: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    files: list[FileEntry]
    created: str

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


class Store(Protocol):
    """What checking needs of a storage backend. Paths are "/"-separated, absolute in it."""

    def sizes(self, directory: str) -> dict[str, int]:
        """Every file under ``directory`` (recursively): relative path -> size. Missing: {}."""

    def read(self, path: str) -> bytes | None:
        """A small file's bytes, or None when it is not there."""

    def open(self, path: str) -> IO[bytes]:
        """A stream of a file's bytes."""

    def write(self, path: str, data: bytes) -> None:
        """Write a small file whole."""


def crc32c_of_stream(stream: IO[bytes]) -> str:
    crc = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        crc = google_crc32c.extend(crc, chunk)
    return f"{crc:08x}"


def scan_local(directory: str, *, checksums: bool = True) -> list[FileEntry]:
    """The entries of every file under a local ``directory`` (its own ``.raytrain`` left out)."""
    entries: list[FileEntry] = []
    for root, dirs, files in os.walk(directory):
        if root == directory and META_DIR in dirs:
            dirs.remove(META_DIR)
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, directory).replace(os.sep, "/")
            crc = None
            if checksums:
                with open(full, "rb") as f:
                    crc = crc32c_of_stream(f)
            entries.append(FileEntry(path=rel, size=os.path.getsize(full), crc32c=crc))
    return entries


def meta_path(checkpoint_dir: str, name: str) -> str:
    return f"{checkpoint_dir.rstrip('/')}/{META_DIR}/{name}"


def part_name(rank: int) -> str:
    return f"{PART_PREFIX}{rank}.json"


def dumps(model: BaseModel) -> bytes:
    return json.dumps(model.model_dump(mode="json"), indent=1, sort_keys=True).encode()


def write_part(store: Store, checkpoint_dir: str, rank: int, entries: Iterable[FileEntry]) -> None:
    """One rank's files of a checkpoint, written by that rank once they are stored."""
    body = {"rank": rank, "files": [e.model_dump(mode="json") for e in entries]}
    store.write(meta_path(checkpoint_dir, part_name(rank)), json.dumps(body).encode())


def read_parts(store: Store, checkpoint_dir: str) -> list[FileEntry] | None:
    """Every rank's part of a checkpoint merged (a path written twice: the later rank's entry);
    None when no rank wrote a part (the checkpoint was not stored through the runtime)."""
    names = [
        p
        for p in store.sizes(f"{checkpoint_dir.rstrip('/')}/{META_DIR}")
        if p.startswith(PART_PREFIX) and p.endswith(".json")
    ]
    if not names:
        return None
    merged: dict[str, FileEntry] = {}
    for name in sorted(names, key=lambda n: int(n[len(PART_PREFIX) : -5] or 0)):
        data = store.read(meta_path(checkpoint_dir, name))
        if data is None:
            continue
        for item in json.loads(data)["files"]:
            entry = FileEntry.model_validate(item)
            merged[entry.path] = entry
    return [merged[p] for p in sorted(merged)]


def write_manifest(store: Store, checkpoint_dir: str, manifest: Manifest) -> None:
    """The last write of a checkpoint: after it, the checkpoint can be trusted."""
    store.write(meta_path(checkpoint_dir, MANIFEST_NAME), dumps(manifest))


def read_manifest(store: Store, checkpoint_dir: str) -> Manifest | str:
    """The checkpoint's manifest, or why there is none ("no-manifest" / "bad-manifest: ...")."""
    data = store.read(meta_path(checkpoint_dir, MANIFEST_NAME))
    if data is None:
        return "no-manifest"
    try:
        return Manifest.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        return f"bad-manifest: {where}: {first['msg']}"
    except ValueError as exc:
        return f"bad-manifest: {exc}"


def read_rejection(store: Store, checkpoint_dir: str) -> dict[str, Any] | None:
    data = store.read(meta_path(checkpoint_dir, REJECTED_NAME))
    if data is None:
        return None
    try:
        body = json.loads(data)
    except ValueError:
        return {"reason": "rejected (its rejection record is unreadable)"}
    return body if isinstance(body, dict) else {"reason": str(body)}


@dataclass
class Verdict:
    """What checking one checkpoint found."""

    checkpoint: str  # the directory, as the store names it
    manifest: Manifest | None = None
    problem: Problem | None = None
    #: One sentence: the file, what was wrong and by how much.
    detail: str = ""
    checked_checksums: bool = False
    files_checked: int = 0
    extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def name(self) -> str:
        return self.checkpoint.rstrip("/").rsplit("/", 1)[-1]

    def reason(self) -> str:
        """Why it cannot be used, for a status, an Event or a log line."""
        return self.detail or "verified"


def verify(
    store: Store,
    checkpoint_dir: str,
    *,
    checksums: bool,
    manifest: Manifest | None = None,
    honour_rejection: bool = True,
) -> Verdict:
    """Check ``checkpoint_dir`` against its manifest: sizes always, checksums when asked.

    ``manifest`` when the caller already read it (e.g. checking a local copy of a checkpoint
    against the manifest read from storage). A checkpoint marked rejected stays rejected
    unless ``honour_rejection`` is False (a check on demand looks again).
    """
    v = Verdict(checkpoint_dir)
    if honour_rejection:
        rejection = read_rejection(store, checkpoint_dir)
        if rejection is not None:
            v.problem = "rejected"
            v.detail = f"marked rejected earlier: {rejection.get('reason', 'no reason given')}"
            return v
    if manifest is None:
        read = read_manifest(store, checkpoint_dir)
        if isinstance(read, str):
            v.problem = "no-manifest" if read == "no-manifest" else "bad-manifest"
            v.detail = (
                "no manifest (.raytrain/manifest.json): its upload did not finish"
                if read == "no-manifest"
                else f"its manifest is unreadable ({read.removeprefix('bad-manifest: ')})"
            )
            return v
        manifest = read
    v.manifest = manifest
    held = {p: s for p, s in store.sizes(checkpoint_dir).items() if not p.startswith(META_DIR)}
    for entry in manifest.files:
        size = held.get(entry.path)
        if size is None:
            v.problem, v.detail = "missing", f"file {entry.path} is missing"
            return v
        if size != entry.size:
            v.problem = "size"
            v.detail = f"file {entry.path} is {size} bytes, the manifest says {entry.size}"
            return v
    v.extra = sorted(set(held) - {e.path for e in manifest.files})
    if checksums:
        v.checked_checksums = True
        base = checkpoint_dir.rstrip("/")
        for entry in manifest.files:
            if entry.crc32c is None:
                continue
            with store.open(f"{base}/{entry.path}") as stream:
                got = crc32c_of_stream(stream)
            if got != entry.crc32c:
                v.problem = "checksum"
                v.detail = f"file {entry.path} has CRC32C {got}, the manifest says {entry.crc32c}"
                return v
            v.files_checked += 1
    return v


def mark_rejected(store: Store, verdict: Verdict, *, attempt: int | None, by: str) -> None:
    """Mark a checkpoint rejected (its files stay): why, when, and by whom."""
    body = {
        "reason": verdict.reason(),
        "problem": verdict.problem,
        "attempt": attempt,
        "by": by,
        "time": rfc3339(time.time()),
    }
    store.write(meta_path(verdict.checkpoint, REJECTED_NAME), json.dumps(body).encode())


def checkpoint_dirs(store: Store, run_dir: str) -> list[str]:
    """The run's checkpoint directories, newest first (their names sort by time)."""
    # Directories only: Ray Train's checkpoint_manager_snapshot.json shares the prefix.
    held = store.sizes(run_dir)
    names = {p.split("/", 1)[0] for p in held if p.startswith(CHECKPOINT_PREFIX) and "/" in p}
    return [f"{run_dir.rstrip('/')}/{n}" for n in sorted(names, reverse=True)]


def newest_good(
    store: Store,
    candidates: Iterable[str],
    *,
    checksums: bool,
    on_reject: Callable[[Verdict], None] | None = None,
) -> tuple[Verdict | None, list[Verdict]]:
    """The first of ``candidates`` (newest first) that verifies, and those rejected before it."""
    rejected: list[Verdict] = []
    for candidate in candidates:
        verdict = verify(store, candidate, checksums=checksums)
        if verdict.ok:
            return verdict, rejected
        rejected.append(verdict)
        if on_reject is not None:
            on_reject(verdict)
    return None, rejected


def none_usable_message(rejected: list[Verdict], uri: Callable[[str], str]) -> str:
    listed = "; ".join(f"{uri(v.checkpoint)}: {v.reason()}" for v in rejected)
    return (
        f"{NO_CHECKPOINT} none of the run's {len(rejected)} checkpoint(s) passes its check "
        f"({listed}). "
        "Nothing was deleted. To go on, create the TrainJob again: a new TrainJob starts a new "
        "run, from spec.resumeFrom when it names a checkpoint you trust (`raytrain checkpoints "
        "NAME --verify` checks them), else from scratch"
    )


def local_store() -> Store:
    """A Store over this machine's filesystem (absolute paths)."""
    return _LocalStore()


class _LocalStore:
    def sizes(self, directory: str) -> dict[str, int]:
        out: dict[str, int] = {}
        if not os.path.isdir(directory):
            return out
        for root, _dirs, files in os.walk(directory):
            for name in files:
                full = os.path.join(root, name)
                out[os.path.relpath(full, directory).replace(os.sep, "/")] = os.path.getsize(full)
        return out

    def read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def open(self, path: str) -> IO[bytes]:
        return open(path, "rb")

    def write(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
