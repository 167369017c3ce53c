"""The user's code snapshot (spec.code): fetched from storage, checked, and put on the path.

`raytrain submit --code DIR` stores DIR as a zip archive in the job's own storage, named by the
SHA-256 of its bytes, and records the URI and the hash in the TrainJob. Before Ray starts, the
driver downloads the archive with the job's storage wiring (S3 or the shared mount), refuses it
when its hash differs from the recorded one (every attempt runs the code the job was submitted
with, never a newer upload), and extracts it into a directory of its own. That directory goes
first on the driver's import path and becomes its working directory, and it is Ray's
``working_dir`` for the job, so every training worker imports the same modules and finds the
same relative files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.fs as pafs

from raytrain_contract import CodeSnapshot, Contract
from trainer_runtime.storage import resolve_uri, storage_target

log = logging.getLogger("trainer_runtime.code")

_CHUNK = 1 << 20
#: Where snapshots are extracted, one directory per hash (the driver's own disk).
CODE_ROOT_ENV = "RAYTRAIN_CODE_DIR"


class CodeError(RuntimeError):
    """The code snapshot cannot be used; the message names spec.code and the fix."""


def _resubmit() -> str:
    return "submit the code again (raytrain submit FILE --code DIR) as a new TrainJob"


def download(snapshot: CodeSnapshot, contract: Contract, dest: Path) -> str:
    """Copy the archive to ``dest``; return the SHA-256 of the bytes copied."""
    target = storage_target(contract.storage)
    fs, path = resolve_uri(snapshot.uri, target)
    try:
        info = fs.get_file_info(path)
    except OSError as exc:
        raise CodeError(
            f"spec.code.uri {snapshot.uri!r}: the storage cannot be read ({exc}); check "
            "spec.storage and its credentials"
        ) from exc
    if info.type != pafs.FileType.File:
        raise CodeError(
            f"spec.code.uri {snapshot.uri!r}: no such archive in the job's storage (it was "
            f"deleted, or never uploaded); {_resubmit()}"
        )
    digest = hashlib.sha256()
    try:
        with fs.open_input_stream(path) as src, dest.open("wb") as out:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise CodeError(f"spec.code.uri {snapshot.uri!r}: reading it failed: {exc}") from exc
    return digest.hexdigest()


def extract(archive: Path, into: Path) -> None:
    """Unpack ``archive`` into ``into``, refusing members that would land outside it."""
    with zipfile.ZipFile(archive) as zf:
        for member in zf.infolist():
            name = PurePosixPath(member.filename)
            if name.is_absolute() or ".." in name.parts:
                raise CodeError(f"the code archive holds {member.filename!r}, outside its root")
            if stat.S_ISLNK(member.external_attr >> 16):
                raise CodeError(f"the code archive holds a symbolic link, {member.filename!r}")
        zf.extractall(into)


def fetch(contract: Contract, root: Path | None = None) -> Path:
    """The snapshot's directory, downloaded, checked and extracted (once per hash)."""
    snapshot = contract.code
    if snapshot is None:
        raise ValueError("the contract names no code snapshot")
    base = root or Path(os.environ.get(CODE_ROOT_ENV) or tempfile.gettempdir()) / "raytrain-code"
    final = base / snapshot.sha256
    if final.is_dir():
        return final
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{snapshot.sha256[:12]}-", dir=base))
    try:
        archive = work / "code.zip"
        actual = download(snapshot, contract, archive)
        if actual != snapshot.sha256:
            raise CodeError(
                f"spec.code.uri {snapshot.uri!r}: the archive's SHA-256 is {actual}, the job "
                f"records {snapshot.sha256} (spec.code.sha256): it was replaced after the job "
                f"was submitted, and other code will not run under this job; {_resubmit()}"
            )
        tree = work / "tree"
        try:
            extract(archive, tree)
        except zipfile.BadZipFile as exc:
            raise CodeError(f"spec.code.uri {snapshot.uri!r} is not a zip archive: {exc}") from exc
        try:
            os.replace(tree, final)
        except OSError:
            if not final.is_dir():  # else another process of this pod extracted it first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


#: Ray Train moves each worker into a directory of its own unless this is "0"; with a snapshot,
#: the snapshot is the working directory, so the loop's relative paths mean what they meant in
#: the user's folder.
CHDIR_ENV = "RAY_CHDIR_TO_TRIAL_DIR"


def use(directory: Path) -> dict[str, Any]:
    """Put ``directory`` first on this process's path and make it the working directory; return
    the ``runtime_env`` that gives Ray's workers the same."""
    path = str(directory)
    if path not in sys.path:
        sys.path.insert(0, path)
    os.chdir(path)
    # Read where the trainer is built: this process and, to be sure, every Ray process.
    os.environ[CHDIR_ENV] = "0"
    return {"working_dir": path, "env_vars": {CHDIR_ENV: "0"}}


def prepare(contract: Contract) -> dict[str, Any] | None:
    """The runtime_env for ``ray.init`` when the job has a code snapshot, else None."""
    if contract.code is None:
        return None
    directory = fetch(contract)
    files = sum(1 for p in directory.rglob("*") if p.is_file())
    log.info(
        "code snapshot sha256:%s from %s: %d files in %s",
        contract.code.sha256,
        contract.code.uri,
        files,
        directory,
    )
    return use(directory)
