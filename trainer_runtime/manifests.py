"""Checkpoint manifests in a run: written after every save, checked before every resume.

Saving (raytrain_contract.checkpoints has the format):

1. In each training worker, ``install_part_writer`` wraps Ray Train's upload of a reported
   checkpoint: the rank's files are listed with their sizes and CRC32C from the local directory
   the loop wrote (still in the page cache, so this costs a fraction of the upload), and once
   the upload is done the rank writes its part, ``.raytrain/part-<rank>.json``.
2. On Ray Train's controller, after every rank's report of the round arrived (so every part is
   there), ``finish_manifest`` merges the parts into ``.raytrain/manifest.json`` with the run,
   the attempt, the Ray job, the epoch and the metrics. Only then is the checkpoint reported to
   the TrainJob. Ray Train registers the checkpoint just before (its snapshot names it), so a
   pod killed in between leaves a checkpoint without a manifest: the next resume passes over it.

Resuming:

1. On the driver, before the trainer starts (``check_run``): the run's checkpoints in Ray
   Train's snapshot, newest first, are checked against their manifests by size (a listing, no
   reads) until one passes. Those that fail are marked rejected in storage (their files stay)
   and dropped from the snapshot, so Ray Train neither hands them out nor deletes them later.
   None passing fails the attempt with a message that names each one: a job never restarts
   from scratch on its own.
2. In each worker, when ``spec.checkpoint.verify`` is Checksums (the default), ``with_verified``
   downloads the checkpoint Ray Train hands out, checks every file's CRC32C against the
   manifest on the local copy, and gives the loop that copy (``get_checkpoint().as_directory()``
   then reads it in place: the download the loop would have made anyway, made once). A failed
   checksum marks the checkpoint and moves on to the next older one; the ranks agree on the
   oldest any of them had to fall back to.

Runs begun by a runtime that wrote no manifests keep working: the first manifest-writing driver
records in ``<run>/.raytrain/manifests.json`` which checkpoints were already there, and those
are used unverified (and said to be).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

import google_crc32c
import pyarrow.fs as pafs

from raytrain_contract import checkpoints as ck
from raytrain_contract.timefmt import rfc3339
from trainer_runtime.entrypoint import wrap_loop
from trainer_runtime.storage import StorageTarget, resolve_uri

log = logging.getLogger("trainer_runtime")

#: Ray Train's snapshot of a run's checkpoints, in the run's directory.
SNAPSHOT_NAME = "checkpoint_manager_snapshot.json"
#: Which checkpoints of the run predate manifests (written once, by the first driver that
#: writes manifests).
MARKER_NAME = "manifests.json"
#: Seconds the controller waits between registering a checkpoint and writing its manifest.
#: Fault injection for tests only (a pod killed in that window): unset, there is no wait.
MANIFEST_DELAY_ENV = "RAYTRAIN_TEST_MANIFEST_DELAY_S"


class PyArrowStore:
    """``raytrain_contract.checkpoints.Store`` over a pyarrow filesystem."""

    def __init__(self, filesystem: pafs.FileSystem) -> None:
        self.fs = filesystem

    def sizes(self, directory: str) -> dict[str, int]:
        base = directory.rstrip("/")
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {
            i.path[len(base) + 1 :]: int(i.size or 0) for i in infos if i.type == pafs.FileType.File
        }

    def read(self, path: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(path, compression=None) as f:
                data: bytes = f.read()
                return data
        except (FileNotFoundError, IsADirectoryError):
            return None
        except OSError as exc:
            if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
                return None
            raise

    def open(self, path: str) -> IO[bytes]:
        # The stored bytes, never decompressed by their name (a checkpoint's "x.gz" stays gzip).
        return self.fs.open_input_stream(path, compression=None)  # type: ignore[no-any-return]

    def write(self, path: str, data: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        if isinstance(self.fs, pafs.LocalFileSystem):
            os.makedirs(parent, exist_ok=True)
            ck.local_store().write(path, data)
            return
        self.fs.create_dir(parent, recursive=True)
        with self.fs.open_output_stream(path) as f:
            f.write(data)


# -- saving ---------------------------------------------------------------------------------------


_SCANNER: ThreadPoolExecutor | None = None


def _scanner() -> ThreadPoolExecutor:
    global _SCANNER
    if _SCANNER is None:
        _SCANNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-crc32c")
    return _SCANNER


#: Ray Train's own chunk for checkpoint transfers (pyarrow's default of 1 MiB is slower).
COPY_CHUNK = 64 << 20


def install_part_writer() -> None:
    """In a training worker: every checkpoint upload ends with this rank's manifest part.

    Wraps Ray Train's internal ``TrainContext._upload_checkpoint`` (once per process). Without
    it no checkpoint would ever verify, so a Ray without that method fails the run at once.
    """
    from ray.train.v2._internal.execution.context import TrainContext

    original = getattr(TrainContext, "_upload_checkpoint", None)
    if original is None:
        raise RuntimeError(
            "this Ray has no TrainContext._upload_checkpoint: the runtime cannot write "
            "checkpoint manifests with it; use the Ray version of the trainer-runtime image"
        )
    if getattr(original, "_raytrain_parts", False):
        return
    signature = inspect.signature(original)

    def upload_with_part(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        checkpoint = bound.arguments.get("checkpoint")
        custom = bound.arguments.get("checkpoint_upload_fn")
        if (
            checkpoint is None
            or custom is not None
            or not isinstance(checkpoint.filesystem, pafs.LocalFileSystem)
        ):
            report = original(*bound.args, **bound.kwargs)
            persisted = getattr(report, "checkpoint", None)
            if persisted is not None:
                # A custom upload: what it stored, by size only.
                store = PyArrowStore(persisted.filesystem)
                entries = [
                    ck.FileEntry(path=p, size=s)
                    for p, s in sorted(store.sizes(persisted.path).items())
                    if not p.startswith(ck.META_DIR)
                ]
                ck.write_part(store, persisted.path, self.get_world_rank(), entries)
            return report
        delete_after = bool(bound.arguments.get("delete_local_checkpoint_after_upload"))
        bound.arguments["delete_local_checkpoint_after_upload"] = False
        return save_with_part(
            checkpoint.path,
            lambda: original(*bound.args, **bound.kwargs),
            rank=self.get_world_rank(),
            delete_after=delete_after,
        )

    upload_with_part._raytrain_parts = True  # type: ignore[attr-defined]
    TrainContext._upload_checkpoint = upload_with_part  # type: ignore[method-assign]


def save_with_part(
    local_path: str, upload: Callable[[], Any], *, rank: int, delete_after: bool = False
) -> Any:
    """Upload a rank's local checkpoint directory and write its manifest part.

    ``upload`` stores the files and returns Ray Train's report (its ``checkpoint`` the stored
    one). The checksums are computed while it runs: the upload waits on storage and the
    checksums on the CPU, so together they take about as long as the upload alone. The local
    directory is deleted (``delete_after``) once both are done.
    """
    scan = _scanner().submit(ck.scan_local, local_path)
    try:
        report = upload()
    finally:
        with contextlib.suppress(Exception):
            scan.result()
    entries = scan.result()  # the scan's own error, should it have failed
    persisted = getattr(report, "checkpoint", None)
    if persisted is not None:
        ck.write_part(PyArrowStore(persisted.filesystem), persisted.path, rank, entries)
    if delete_after:
        try:
            shutil.rmtree(local_path)
        except OSError:
            log.exception("could not delete the local checkpoint %s", local_path)
    return report


def install_rejection_guard() -> None:
    """On Ray Train's controller: a checkpoint marked rejected is never deleted.

    Ray Train's retention (``numToKeep``) deletes the checkpoints that fall out of its list. A
    checkpoint a worker found corrupted is still in that list until the next attempt's driver
    drops it from the snapshot, so the retention could delete it; the mark keeps it. Wraps
    the ``delete_fs_path`` Ray Train's checkpoint manager calls (once per process).
    """
    from ray.train.v2._internal.execution.checkpoint import checkpoint_manager

    original = getattr(checkpoint_manager, "delete_fs_path")  # noqa: B009 (not exported)
    if getattr(original, "_raytrain_guard", False):
        return

    def delete_unless_rejected(fs: pafs.FileSystem, fs_path: str) -> None:
        if PyArrowStore(fs).read(ck.meta_path(fs_path, ck.REJECTED_NAME)) is not None:
            log.warning("checkpoint %s is marked rejected: kept, not deleted by numToKeep", fs_path)
            return
        original(fs=fs, fs_path=fs_path)

    delete_unless_rejected._raytrain_guard = True  # type: ignore[attr-defined]
    setattr(checkpoint_manager, "delete_fs_path", delete_unless_rejected)  # noqa: B010


def finish_manifest(
    filesystem: pafs.FileSystem,
    checkpoint_path: str,
    *,
    run: str,
    attempt: int | None,
    fence: str | None,
    epoch: int | None,
    metrics: Mapping[str, Any],
) -> ck.Manifest | None:
    """On the controller, once every rank reported: merge the parts into the manifest."""
    store = PyArrowStore(filesystem)
    entries = ck.read_parts(store, checkpoint_path)
    if entries is None:
        log.error(
            "checkpoint %s has no manifest part from any rank: it was not stored through the "
            "runtime's upload, and no resume will use it",
            checkpoint_path,
        )
        return None
    delay = float(os.environ.get(MANIFEST_DELAY_ENV) or 0)
    if delay > 0:
        log.warning(
            "%s=%g: waiting before the manifest of %s", MANIFEST_DELAY_ENV, delay, checkpoint_path
        )
        time.sleep(delay)
    manifest = ck.Manifest(
        run=run,
        checkpoint=checkpoint_path.rstrip("/").rsplit("/", 1)[-1],
        attempt=attempt,
        fence=fence,
        epoch=epoch,
        metrics={k: v for k, v in metrics.items() if _jsonable(v)},
        files=entries,
        created=rfc3339(time.time()),
    )
    ck.write_manifest(store, checkpoint_path, manifest)
    return manifest


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# -- resuming: the driver's check -----------------------------------------------------------------


@dataclass
class Rejection:
    uri: str
    problem: str
    reason: str
    attempt: int | None
    time: str

    def status(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "problem": self.problem,
            "reason": self.reason,
            "attempt": self.attempt,
            "time": self.time,
        }


@dataclass
class ResumeCheck:
    """What the driver found in the run before training."""

    resumed_from: str | None = None  # URI of the checkpoint Ray Train will hand out
    unverified: bool = False  # it predates manifests
    rejected: list[Rejection] = field(default_factory=list)
    error: str | None = None  # none usable: the attempt fails with this


class NoUsableCheckpoint(RuntimeError):
    """Every checkpoint of the run failed its check."""


def rejection(
    verdict: ck.Verdict, target_uri: Callable[[str], str], attempt: int | None
) -> Rejection:
    return Rejection(
        uri=target_uri(verdict.checkpoint),
        problem=verdict.problem or "",
        reason=verdict.reason(),
        attempt=attempt,
        time=rfc3339(time.time()),
    )


def legacy_before(store: ck.Store, run_dir: str) -> str:
    """Checkpoints of the run named at or before this predate manifests ("" when none do).

    Recorded by the first driver that writes manifests, from what the run holds then.
    """
    marker = f"{run_dir}/{ck.META_DIR}/{MARKER_NAME}"
    data = store.read(marker)
    if data is not None:
        with contextlib.suppress(ValueError, AttributeError):
            return str(json.loads(data).get("legacyUpTo") or "")
        return ""
    existing = [d.rsplit("/", 1)[-1] for d in ck.checkpoint_dirs(store, run_dir)]
    with_manifest = [
        n for n in existing if store.read(ck.meta_path(f"{run_dir}/{n}", ck.MANIFEST_NAME))
    ]
    legacy = "" if with_manifest else (existing[0] if existing else "")
    store.write(marker, json.dumps({"legacyUpTo": legacy, "time": rfc3339(time.time())}).encode())
    return legacy


def is_legacy(name: str, legacy_up_to: str) -> bool:
    return bool(legacy_up_to) and name <= legacy_up_to


def check_run(target: StorageTarget, run_name: str, attempt: int | None) -> ResumeCheck:
    """Before the trainer starts: make Ray Train's latest checkpoint of the run one that passes.

    Reads Ray Train's snapshot (absent: a new run, nothing to check). The newest checkpoint
    whose files match its manifest by size stays latest; newer ones that do not are marked
    rejected and dropped from the snapshot (the original is kept beside it).
    """
    store = PyArrowStore(target.filesystem)
    run_dir = f"{target.path.rstrip('/')}/{run_name}"
    result = ResumeCheck()
    snapshot_path = f"{run_dir}/{SNAPSHOT_NAME}"
    raw = store.read(snapshot_path)
    legacy_up_to = legacy_before(store, run_dir)
    if raw is None:
        return result
    snapshot = json.loads(raw)
    results = snapshot.get("checkpoint_results") or []
    indices = snapshot.get("checkpoint_report_indices") or []
    if not results:
        return result
    order = sorted(
        range(len(results)), key=lambda i: indices[i] if i < len(indices) else i, reverse=True
    )
    chosen: str | None = None
    bad: set[str] = set()
    for i in order:
        name = results[i]["checkpoint_dir_name"]
        path = f"{run_dir}/{name}"
        if (
            is_legacy(name, legacy_up_to)
            and store.read(ck.meta_path(path, ck.MANIFEST_NAME)) is None
        ):
            chosen, result.unverified = name, True
            break
        verdict = ck.verify(store, path, checksums=False)
        if verdict.ok:
            chosen = name
            break
        bad.add(name)
        found = rejection(verdict, target.uri, attempt)
        result.rejected.append(found)
        log.warning("checkpoint %s cannot be resumed from: %s", found.uri, found.reason)
        if verdict.problem != "rejected":
            ck.mark_rejected(store, verdict, attempt=attempt, by="driver")
    if chosen is None:
        result.error = ck.none_usable_message(
            [ck.Verdict(r.uri, detail=r.reason) for r in result.rejected], lambda u: u
        )
        return result
    result.resumed_from = target.uri(f"{run_dir}/{chosen}")
    if bad:
        _drop_from_snapshot(store, snapshot_path, raw, snapshot, bad, chosen, attempt)
    return result


def _drop_from_snapshot(
    store: PyArrowStore,
    path: str,
    raw: bytes,
    snapshot: dict[str, Any],
    bad: set[str],
    latest: str,
    attempt: int | None,
) -> None:
    """Ray Train's snapshot without ``bad``, ``latest`` its latest; the original kept beside."""
    store.write(f"{path}.before-attempt-{attempt}", raw)
    keep = [
        i
        for i, r in enumerate(snapshot["checkpoint_results"])
        if r["checkpoint_dir_name"] not in bad
    ]
    snapshot["checkpoint_results"] = [snapshot["checkpoint_results"][i] for i in keep]
    if "checkpoint_report_indices" in snapshot:
        snapshot["checkpoint_report_indices"] = [
            snapshot["checkpoint_report_indices"][i] for i in keep
        ]
    by_name = {r["checkpoint_dir_name"]: r for r in snapshot["checkpoint_results"]}
    snapshot["latest_checkpoint_result"] = by_name[latest]
    pending = snapshot.get("pending_training_results") or []
    specs = snapshot.get("pending_validation_specs") or []
    kept = [
        (r, s) for r, s in zip(pending, specs, strict=False) if r["checkpoint_dir_name"] not in bad
    ]
    if "pending_training_results" in snapshot:
        snapshot["pending_training_results"] = [r for r, _ in kept]
        snapshot["pending_validation_specs"] = [s for _, s in kept]
    for key in (
        "validated_checkpoint_dir_names",
        "timed_out_validation_checkpoint_dir_names",
        "failed_validation_checkpoint_dir_names",
    ):
        if key in snapshot:
            snapshot[key] = [n for n in snapshot[key] if n not in bad]
    store.write(path, json.dumps(snapshot).encode())


# -- resuming: the workers' checksums -------------------------------------------------------------


@dataclass
class Fetched:
    local: str | None  # the verified local copy handed to the loop (None: the original)
    uri: str | None
    rejected: list[Rejection]
    path: str | None = None  # the checkpoint used, in its filesystem


def fetch_verified(
    store: ck.Store,
    filesystem: pafs.FileSystem,
    handed: str,
    *,
    uri: Callable[[str], str],
    attempt: int | None,
    workdir: str,
    start_at: int = 0,
) -> tuple[int, Fetched]:
    """Download the handed checkpoint (or the newest older one that verifies) and check it.

    Returns the index of the one used in the list of candidates (the handed one, then the
    older checkpoints of its run, newest first), so that ranks can agree.
    """
    run_dir, name = handed.rstrip("/").rsplit("/", 1)
    older = [d for d in ck.checkpoint_dirs(store, run_dir) if d.rsplit("/", 1)[-1] < name]
    candidates = [handed.rstrip("/"), *older]
    legacy_up_to = ""
    marker = store.read(f"{run_dir}/{ck.META_DIR}/{MARKER_NAME}")
    if marker is not None:
        with contextlib.suppress(ValueError, AttributeError):
            legacy_up_to = str(json.loads(marker).get("legacyUpTo") or "")
    rejected: list[Rejection] = []
    for index in range(start_at, len(candidates)):
        path = candidates[index]
        cname = path.rsplit("/", 1)[-1]
        verdict = ck.verify(store, path, checksums=False)
        if verdict.problem == "no-manifest" and is_legacy(cname, legacy_up_to):
            log.info("checkpoint %s predates manifests: used unverified", uri(path))
            return index, Fetched(None, uri(path), rejected, path)
        if verdict.ok and isinstance(filesystem, pafs.LocalFileSystem):
            # A mounted volume (a PVC): the loop reads it in place, so it is checked in place.
            verdict = ck.verify(
                store, path, checksums=True, manifest=verdict.manifest, honour_rejection=False
            )
            if verdict.ok:
                return index, Fetched(None, uri(path), rejected, path)
        elif verdict.ok:
            assert verdict.manifest is not None
            local = tempfile.mkdtemp(prefix="checkpoint-", dir=workdir)
            verdict = download_checked(filesystem, path, local, verdict.manifest, verdict.extra)
            if verdict.ok:
                return index, Fetched(local, uri(path), rejected, path)
            shutil.rmtree(local, ignore_errors=True)
        found = rejection(verdict, uri, attempt)
        if verdict.problem == "rejected":
            # Marked by another rank of this attempt a moment ago: the same finding, say it so.
            mark = ck.read_rejection(store, path) or {}
            if mark.get("attempt") == attempt and mark.get("problem"):
                found.problem, found.reason = str(mark["problem"]), str(mark.get("reason"))
        rejected.append(found)
        log.warning("checkpoint %s cannot be resumed from: %s", found.uri, found.reason)
        if verdict.problem != "rejected":
            with contextlib.suppress(OSError):
                ck.mark_rejected(store, verdict, attempt=attempt, by="worker")
    raise NoUsableCheckpoint(
        ck.none_usable_message([ck.Verdict(r.uri, detail=r.reason) for r in rejected], lambda u: u)
    )


#: Files of one checkpoint downloaded at once (Ray's own download, pyarrow's copy_files, also
#: copies the files of a directory side by side).
DOWNLOAD_THREADS = 4


def _download_one(filesystem: pafs.FileSystem, source: str, target: str) -> int:
    """Copy one file to ``target``, returning its CRC32C, computed as the bytes arrive: a
    thread reads the next chunk from storage while this one is checked and written."""
    import queue
    import threading

    os.makedirs(os.path.dirname(target), exist_ok=True)
    chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=2)

    def read() -> None:
        try:
            with filesystem.open_input_stream(source, compression=None) as stream:
                while chunk := stream.read(COPY_CHUNK):
                    chunks.put(chunk)
            chunks.put(None)
        except BaseException as exc:  # handed to the consumer, which raises it
            chunks.put(exc)

    reader = threading.Thread(target=read, daemon=True, name="checkpoint-download")
    reader.start()
    crc = 0
    with open(target, "wb") as out:
        while (chunk := chunks.get()) is not None:
            if isinstance(chunk, BaseException):
                raise chunk
            crc = google_crc32c.extend(crc, chunk)
            out.write(chunk)
    reader.join()
    return crc


def download_checked(
    filesystem: pafs.FileSystem,
    path: str,
    local: str,
    manifest: ck.Manifest,
    extra: list[str] | None = None,
) -> ck.Verdict:
    """Download a checkpoint to ``local``, computing each file's CRC32C as its bytes arrive.

    One pass over the bytes, the files side by side (DOWNLOAD_THREADS), so the check costs
    little beyond the download. A file whose checksum differs makes the verdict (the largest
    such file, when several differ). ``extra``: files the directory holds beside the
    manifest's, copied as they are.
    """
    verdict = ck.Verdict(path, manifest=manifest, checked_checksums=True)
    base = path.rstrip("/")
    entries = sorted(manifest.files, key=lambda e: e.size, reverse=True)
    with ThreadPoolExecutor(
        max_workers=max(1, min(DOWNLOAD_THREADS, len(entries))),
        thread_name_prefix="checkpoint-file",
    ) as pool:
        crcs = list(
            pool.map(
                lambda e: _download_one(
                    filesystem,
                    f"{base}/{e.path}",
                    os.path.join(local, *e.path.split("/")),
                ),
                entries,
            )
        )
    for entry, crc in zip(entries, crcs, strict=True):
        if entry.crc32c is not None and f"{crc:08x}" != entry.crc32c:
            verdict.problem = "checksum"
            verdict.detail = (
                f"file {entry.path} has CRC32C {crc:08x}, the manifest says {entry.crc32c}"
            )
            return verdict
        verdict.files_checked += 1
    for rel in extra or []:
        target = os.path.join(local, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        pafs.copy_files(
            f"{base}/{rel}",
            target,
            source_filesystem=filesystem,
            destination_filesystem=pafs.LocalFileSystem(),
            chunk_size=COPY_CHUNK,
        )
    return verdict


def _agree(index: int) -> int:
    """The largest candidate index of any rank (the oldest fallback), when ranks are grouped."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return index
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return index
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    value = torch.tensor([index], dtype=torch.int64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return int(value.item())


def with_verified(
    train_fn: Callable[..., Any],
    target: StorageTarget,
    *,
    attempt: int | None,
    checksums: bool,
    queue: Any = None,
    seed: str | None = None,
) -> Callable[..., Any]:
    """``train_fn`` that first writes manifest parts on save and, with ``checksums``, hands
    the loop a verified local copy of the checkpoint it resumes from (same arity).

    ``seed`` is spec.resumeFrom's checkpoint while the run has none of its own: it is checked
    alone (no falling back to another checkpoint of that run), and one without a manifest, a
    checkpoint the user brought, is used as it is.
    """
    seed_path = resolve_uri(seed, target)[1].rstrip("/") if seed else None

    def verified(run: Callable[[], Any]) -> Any:
        install_part_writer()
        if not checksums:
            return run()
        from ray.train import Checkpoint
        from ray.train.v2._internal.execution.context import get_train_context

        context = get_train_context()
        handed = context.checkpoint
        if handed is None:
            return run()
        store = PyArrowStore(handed.filesystem)
        if seed_path is not None and handed.path.rstrip("/") == seed_path:
            return _run_seed(run, context, store, handed, seed or "", target, attempt)
        workdir = tempfile.mkdtemp(prefix="raytrain-resume-")
        try:
            index, fetched = fetch_verified(
                store,
                handed.filesystem,
                handed.path,
                uri=target.uri,
                attempt=attempt,
                workdir=workdir,
            )
            agreed = _agree(index)
            if agreed != index:
                if fetched.local is not None:
                    shutil.rmtree(fetched.local, ignore_errors=True)
                earlier = fetched.rejected
                _, fetched = fetch_verified(
                    store,
                    handed.filesystem,
                    handed.path,
                    uri=target.uri,
                    attempt=attempt,
                    workdir=workdir,
                    start_at=agreed,
                )
                fetched.rejected = earlier + fetched.rejected
            if fetched.local is not None:
                context.checkpoint = Checkpoint(fetched.local)
            elif fetched.path is not None and fetched.path != handed.path.rstrip("/"):
                # Used in place (a mounted volume, or one older than manifests), and older
                # than the one Ray Train handed out.
                context.checkpoint = Checkpoint(fetched.path, filesystem=handed.filesystem)
            if context.get_world_rank() == 0 and queue is not None and fetched.rejected:
                with contextlib.suppress(Exception):
                    queue.put_nowait(
                        (
                            "resume",
                            {
                                "resumed_from": fetched.uri,
                                "rejected": [r.status() for r in fetched.rejected],
                            },
                            None,
                        )
                    )
            return run()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    return wrap_loop(train_fn, verified)


def _run_seed(
    run: Callable[[], Any],
    context: Any,
    store: PyArrowStore,
    handed: Any,
    seed: str,
    target: StorageTarget,
    attempt: int | None,
) -> Any:
    from ray.train import Checkpoint

    verdict = ck.verify(store, handed.path, checksums=False)
    if verdict.problem == "no-manifest":
        log.info("spec.resumeFrom %s has no manifest: used as it is, unverified", seed)
        return run()
    if verdict.ok and isinstance(handed.filesystem, pafs.LocalFileSystem):
        # A mounted volume: checked where the loop reads it.
        verdict = ck.verify(store, handed.path, checksums=True, manifest=verdict.manifest)
        if verdict.ok:
            return run()
    workdir = tempfile.mkdtemp(prefix="raytrain-resume-")
    try:
        if verdict.ok and not isinstance(handed.filesystem, pafs.LocalFileSystem):
            assert verdict.manifest is not None
            local = f"{workdir}/checkpoint"
            verdict = download_checked(
                handed.filesystem, handed.path, local, verdict.manifest, verdict.extra
            )
            if verdict.ok:
                context.checkpoint = Checkpoint(local)
                return run()
        raise NoUsableCheckpoint(
            f"{ck.NO_CHECKPOINT} spec.resumeFrom names {seed}, which fails its check: "
            f"{verdict.reason()}. "
            "Nothing was deleted. Name another checkpoint in spec.resumeFrom (a TrainJob's "
            "status.checkpoint.latestURI, or one `raytrain checkpoints NAME` lists as ok)"
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
