"""Checkpoint storage wiring: a ``pyarrow`` filesystem plus the path Ray Train writes under.

S3 (AWS or any S3-compatible endpoint) goes through ``pyarrow.fs.S3FileSystem`` with the
endpoint and region from the contract and credentials from the standard AWS environment
variables (or, without them, the AWS SDK's default chain, which covers IRSA's web identity).
A PVC is a shared mount at the same path in every pod: the local filesystem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow.fs as pafs

from raytrain_contract import Storage


@dataclass(frozen=True)
class StorageTarget:
    filesystem: pafs.FileSystem
    path: str  # the path inside ``filesystem`` (``bucket/prefix`` for S3)
    scheme: str  # "s3" or "" for a mounted path

    def uri(self, fs_path: str) -> str:
        """The URI a person can use for a path inside this filesystem."""
        return f"{self.scheme}://{fs_path}" if self.scheme else fs_path


#: Ray Train's checkpoint directories inside a run's directory start with this.
CHECKPOINT_PREFIX = "checkpoint_"


def s3_filesystem(endpoint: str | None, region: str | None) -> pafs.S3FileSystem:
    kwargs: dict[str, object] = {}
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL") or None
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parsed.netloc
        kwargs["scheme"] = parsed.scheme or "https"
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    key = os.environ.get("AWS_ACCESS_KEY_ID")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        kwargs["access_key"] = key
        kwargs["secret_key"] = secret
        token = os.environ.get("AWS_SESSION_TOKEN")
        if token:
            kwargs["session_token"] = token
    return pafs.S3FileSystem(**kwargs)


def storage_target(storage: Storage) -> StorageTarget:
    if storage.type == "s3":
        fs = s3_filesystem(storage.endpoint, storage.region)
        return StorageTarget(fs, storage.path.removeprefix("s3://").rstrip("/"), "s3")
    os.makedirs(storage.path, exist_ok=True)
    return StorageTarget(pafs.LocalFileSystem(), storage.path.rstrip("/") or "/", "")


def resolve_uri(uri: str, default: StorageTarget) -> tuple[pafs.FileSystem, str]:
    """Filesystem and path for a dataset URI: ``s3://`` uses the S3 wiring, else a local path."""
    if uri.startswith("s3://"):
        fs = default.filesystem if default.scheme == "s3" else s3_filesystem(None, None)
        return fs, uri.removeprefix("s3://")
    return pafs.LocalFileSystem(), uri
