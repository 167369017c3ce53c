"""A directory of training code as a snapshot in the job's storage (spec.code).

`raytrain submit FILE --code DIR` and `TrainJobClient.train(..., code=DIR)` pack DIR into a zip
archive, store it beside the job's checkpoints under ``<storage>/code/<sha256>.zip`` and record
the URI and the hash in ``spec.code``. The runtime puts the snapshot on the import path of the
driver and of every worker (trainer_runtime/code.py), so a code change needs no image build.

The archive is reproducible: members in sorted order with fixed timestamps and modes, so the
same files give the same hash and an unchanged directory is not stored twice. What `.gitignore`
files (the directory's own and those below it) leave out is left out here too, and so are
``.git``, ``__pycache__`` and compiled files. Past `MAX_BYTES` of files the pack stops with a
message saying what was largest: data and checkpoints belong in storage, not in the code.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

from raytrain.errors import InvalidJobError, RayTrainError

#: The most file bytes a snapshot may hold (before compression).
MAX_BYTES = 100 * 1024 * 1024
#: Names never packed, wherever they are.
ALWAYS_LEFT_OUT = frozenset({".git", "__pycache__", ".raytrain"})
LEFT_OUT_SUFFIXES = (".pyc", ".pyo")
#: Where snapshots go, relative to the job's storage path.
CODE_PREFIX = "code"
_EPOCH = (1980, 1, 1, 0, 0, 0)


class CodeUploadError(RayTrainError):
    """The snapshot could not be stored; the message names the storage and the fix."""


@dataclass(frozen=True)
class Snapshot:
    """A packed directory: the archive's bytes, their SHA-256 and what went in."""

    data: bytes
    sha256: str
    files: tuple[str, ...]
    size: int  # the files' bytes before compression

    def uri_under(self, storage_path: str) -> str:
        """Where the snapshot goes under a job's storage path (an s3:// URI or a directory)."""
        return f"{storage_path.rstrip('/')}/{CODE_PREFIX}/{self.sha256}.zip"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _ignore_specs(directory: Path) -> Callable[[Path, bool], bool]:
    """A predicate for paths under ``directory`` that .gitignore files leave out."""
    specs: dict[Path, pathspec.GitIgnoreSpec] = {}

    def spec_of(folder: Path) -> pathspec.GitIgnoreSpec:
        if folder not in specs:
            ignore = folder / ".gitignore"
            lines = ignore.read_text(errors="replace").splitlines() if ignore.is_file() else []
            specs[folder] = pathspec.GitIgnoreSpec.from_lines(lines)
        return specs[folder]

    def ignored(path: Path, is_dir: bool) -> bool:
        folder = path.parent
        while True:
            rel = path.relative_to(folder).as_posix() + ("/" if is_dir else "")
            if spec_of(folder).match_file(rel):
                return True
            if folder == directory:
                return False
            folder = folder.parent

    return ignored


def _walk(directory: Path) -> Iterator[Path]:
    ignored = _ignore_specs(directory)
    for root, dirs, files in os.walk(directory):
        here = Path(root)
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in ALWAYS_LEFT_OUT
            and not (here / d).is_symlink()
            and not ignored(here / d, True)
        )
        for name in sorted(files):
            path = here / name
            if name in ALWAYS_LEFT_OUT or name.endswith(LEFT_OUT_SUFFIXES):
                continue
            if ignored(path, False) or not path.is_file():
                continue
            yield path


def pack(directory: str | os.PathLike[str], max_bytes: int = MAX_BYTES) -> Snapshot:
    """Pack ``directory`` into a reproducible zip archive."""
    root = Path(directory).expanduser().resolve()
    if not root.is_dir():
        raise InvalidJobError(f"--code {str(directory)!r}: not a directory; name the folder of "
                              "your training code")  # fmt: skip
    paths = sorted(_walk(root), key=lambda p: p.relative_to(root).as_posix())
    sizes = {p: p.stat().st_size for p in paths}
    total = sum(sizes.values())
    if total > max_bytes:
        largest = sorted(paths, key=lambda p: -sizes[p])[:3]
        named = ", ".join(f"{p.relative_to(root)} ({_size(sizes[p])})" for p in largest)
        raise InvalidJobError(
            f"--code {str(directory)!r}: {_size(total)} of files, over the "
            f"{_size(max_bytes)} a code snapshot may hold (largest: {named}); list "
            "data, checkpoints and virtualenvs in a .gitignore of that folder, and read data "
            "with spec.datasets or from storage"
        )
    if not any(p.suffix == ".py" for p in paths):
        raise InvalidJobError(
            f"--code {str(directory)!r}: no Python file in it (after .gitignore); name the "
            "folder that holds the module spec.entrypoint imports"
        )
    buffer = io.BytesIO()
    names = []
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in paths:
            name = path.relative_to(root).as_posix()
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            executable = path.stat().st_mode & stat.S_IXUSR
            info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
            names.append(name)
    data = buffer.getvalue()
    return Snapshot(data, hashlib.sha256(data).hexdigest(), tuple(names), total)


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _credentials_from(secret: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, str]:
    """AWS credentials from a Secret document (``data`` base64, or ``stringData``)."""
    import base64

    def value(key: str | None) -> str | None:
        if not key:
            return None
        plain = (secret.get("stringData") or {}).get(key)
        if plain is not None:
            return str(plain)
        encoded = (secret.get("data") or {}).get(key)
        return base64.b64decode(encoded).decode() if encoded is not None else None

    found = {
        "aws_access_key_id": value(keys.get("accessKeyIdKey") or "AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": value(keys.get("secretAccessKeyKey") or "AWS_SECRET_ACCESS_KEY"),
        "aws_session_token": value(keys.get("sessionTokenKey")),
    }
    return {k: v for k, v in found.items() if v}


@dataclass(frozen=True)
class S3Target:
    """How this machine reaches a job's S3 storage."""

    endpoint: str | None
    region: str | None
    credentials: Mapping[str, str]


def s3_target(
    s3: Mapping[str, Any],
    *,
    endpoint: str | None = None,
    secret_lookup: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> S3Target:
    """The endpoint and credentials to upload with.

    The endpoint: ``endpoint`` (``--s3-endpoint``), else ``$AWS_ENDPOINT_URL_S3`` or
    ``$AWS_ENDPOINT_URL``, else the job's spec.storage.s3.endpoint. The credentials: the AWS
    SDK's own chain (environment, profile, web identity) when it finds any, else the job's
    credentials Secret (``secret_lookup(name)``: from the same file, or read from the cluster).
    """
    chosen = (
        endpoint
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or s3.get("endpoint")
    )
    credentials: dict[str, str] = {}
    import boto3

    if boto3.Session().get_credentials() is None:
        ref = s3.get("credentialsSecret") or {}
        secret = secret_lookup(ref["name"]) if ref.get("name") and secret_lookup else None
        if secret is not None:
            credentials = _credentials_from(secret, ref)
    return S3Target(chosen, s3.get("region"), credentials)


def s3_client(target: S3Target, *, connect_timeout: float | None = None) -> Any:
    """A boto3 S3 client for ``target`` (path-style addressing, as MinIO and most S3-compatible
    stores want), from a session of its own: the credentials of the environment as it is now,
    not as boto3's default session first found them."""
    import boto3
    from botocore.config import Config

    timeouts = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    return boto3.session.Session().client(
        "s3",
        endpoint_url=target.endpoint,
        region_name=target.region or os.environ.get("AWS_REGION") or "us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}, **timeouts),
        **target.credentials,
    )


def upload_s3(snapshot: Snapshot, uri: str, target: S3Target) -> bool:
    """Store the archive at ``uri``; False when an archive of that hash is there already."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = _split_s3(uri)
    client = s3_client(target)
    where = f"{uri} (endpoint {target.endpoint or 'AWS'})"
    try:
        head = client.head_object(Bucket=bucket, Key=key)
        if int(head.get("ContentLength", -1)) == len(snapshot.data):
            return False
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status not in (404, 403):
            raise CodeUploadError(f"storing the code snapshot at {where} failed: {exc}") from exc
    except BotoCoreError as exc:
        raise CodeUploadError(
            f"storing the code snapshot at {where} failed: {exc}; this machine must reach the "
            "job's S3 endpoint: pass --s3-endpoint (or set AWS_ENDPOINT_URL) when the job's "
            "endpoint is an address inside the cluster"
        ) from exc
    try:
        client.put_object(
            Bucket=bucket,
            Key=key,
            Body=snapshot.data,
            ContentType="application/zip",
            Metadata={"sha256": snapshot.sha256},
        )
    except (ClientError, BotoCoreError) as exc:
        raise CodeUploadError(
            f"storing the code snapshot at {where} failed: {exc}; check the bucket, its "
            "credentials (the AWS environment, or the job's spec.storage.s3.credentialsSecret) "
            "and --s3-endpoint"
        ) from exc
    return True


def function_source(func: Callable[..., Any], into: Path) -> str:
    """Write ``func``'s source as a module of its own in ``into``; return the entrypoint.

    Like a function handed to Kubeflow's CustomTrainer: what the function imports, it imports in
    its own body, since nothing else of the file it was written in goes with it.
    """
    import inspect
    import textwrap

    name = getattr(func, "__name__", "")
    if not name.isidentifier() or name == "<lambda>":
        raise InvalidJobError(
            "code=: a function passed as the training loop must be a named function defined "
            "with def (not a lambda or a callable object)"
        )
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as exc:
        raise InvalidJobError(
            f"code=: the source of {name!r} cannot be read ({exc}); define it in a file, or "
            "pass the folder of your training code instead"
        ) from exc
    module = "raytrain_train_loop"
    into.mkdir(parents=True, exist_ok=True)
    (into / f"{module}.py").write_text(
        f'"""The training loop {name} as `TrainJobClient.train` stored it."""\n\n{source}'
    )
    return f"{module}:{name}"


def attach(
    manifest: dict[str, Any],
    snapshot: Snapshot,
    *,
    storage: Mapping[str, Any],
    endpoint: str | None = None,
    secret_lookup: Callable[[str], Mapping[str, Any] | None] | None = None,
    local_storage: bool = False,
) -> str:
    """Store ``snapshot`` in the job's storage and record it in ``manifest``'s spec.code.

    ``storage`` is the job's effective spec.storage. ``local_storage``: storage.pvc names a
    directory of this machine (``raytrain run --local``), where the archive is copied. Returns
    the URI.
    """
    if storage.get("s3"):
        s3 = storage["s3"]
        uri = snapshot.uri_under(str(s3["uri"]))
        target = s3_target(s3, endpoint=endpoint, secret_lookup=secret_lookup)
        upload_s3(snapshot, uri, target)
    elif storage.get("pvc") and local_storage:
        uri = snapshot.uri_under(str(storage["pvc"]["mountPath"]))
        path = Path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (path.is_file() and path.stat().st_size == len(snapshot.data)):
            partial = path.with_suffix(".partial")
            partial.write_bytes(snapshot.data)
            partial.replace(path)
    elif storage.get("pvc"):
        raise InvalidJobError(
            "--code: the job's spec.storage is a PVC, which this machine cannot write; a code "
            "snapshot needs spec.storage.s3 (the job's own bucket), or build an image FROM "
            "the trainer runtime image with your code in it (docs/images.md)"
        )
    else:
        raise InvalidJobError("--code: the job has no spec.storage to keep the snapshot in")
    manifest.setdefault("spec", {})["code"] = {"uri": uri, "sha256": snapshot.sha256}
    return uri
