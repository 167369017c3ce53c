"""A job's S3 storage read from this machine with boto3: the ``Store`` that checks checkpoints.

``raytrain_contract.checkpoints`` checks a checkpoint against its manifest through a small
``Store`` protocol; the runtime's store is a pyarrow filesystem in the pods, this one a boto3
client on the user's machine. Paths are ``s3://bucket/key`` URIs, so what the checks return
(a checkpoint's directory) is the URI users see in the job's status.

The client is built as `raytrain submit --code` builds its own (raytrain._code): this machine's
AWS credentials (environment, profile, web identity), else the job's credentials Secret, and
the endpoint of ``--s3-endpoint`` / ``$AWS_ENDPOINT_URL`` / spec.storage.s3.endpoint. Every
failure to reach the bucket becomes a `StorageAccessError` that says what to set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, cast

from raytrain._code import S3Target, s3_client
from raytrain.errors import StorageAccessError

#: Seconds to wait for the endpoint's TCP connection: an in-cluster name or a closed port
#: fails in seconds, not after botocore's default minute.
CONNECT_TIMEOUT = 5.0

_DENIED = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
     "InvalidToken", "403", "Forbidden", "AllAccessDisabled"}
)  # fmt: skip
_ABSENT = frozenset({"NoSuchKey", "404", "NotFound"})


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ("bucket", "a/b")."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


class S3Store:
    """``raytrain_contract.checkpoints.Store`` over one S3 endpoint; paths are s3:// URIs."""

    def __init__(
        self,
        target: S3Target,
        *,
        credentials_from: str,
        client: Any = None,
        page_size: int | None = None,
    ) -> None:
        self.target = target
        #: Keys per listing request (None: the server's most, 1,000 on S3).
        self.page_size = page_size
        #: Where the credentials came from, for messages ("this machine's AWS credentials ...").
        self.credentials_from = credentials_from
        self._client = client if client is not None else s3_client(
            target, connect_timeout=CONNECT_TIMEOUT
        )  # fmt: skip
        #: Bytes read through ``open`` (what --verify cost).
        self.bytes_read = 0

    @property
    def endpoint(self) -> str:
        return self.target.endpoint or "AWS S3"

    def sizes(self, directory: str) -> dict[str, int]:
        bucket, key = split_uri(directory)
        prefix = key.rstrip("/") + "/" if key.strip("/") else ""
        out: dict[str, int] = {}
        with self._errors("listing", directory):
            paging = {"PaginationConfig": {"PageSize": self.page_size}} if self.page_size else {}
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix, **paging
            )
            for page in pages:
                for item in page.get("Contents") or ():
                    rel = str(item["Key"])[len(prefix) :]
                    if rel and not rel.endswith("/"):
                        out[rel] = int(item["Size"])
        return out

    def read(self, path: str) -> bytes | None:
        bucket, key = split_uri(path)
        with self._errors("reading", path, absent_ok=True):
            body = self._client.get_object(Bucket=bucket, Key=key)["Body"]
            try:
                data: bytes = body.read()
            finally:
                body.close()
            return data
        return None  # not there

    def open(self, path: str) -> IO[bytes]:
        bucket, key = split_uri(path)
        with self._errors("reading", path):
            body = self._client.get_object(Bucket=bucket, Key=key)["Body"]
        return cast(IO[bytes], _Counted(body, self, path))

    def write(self, path: str, data: bytes) -> None:
        bucket, key = split_uri(path)
        with self._errors("writing", path):
            self._client.put_object(Bucket=bucket, Key=key, Body=data)

    @contextmanager
    def _errors(self, verb: str, uri: str, *, absent_ok: bool = False) -> Iterator[None]:
        """Turn botocore's exceptions into a `StorageAccessError` naming the fix; with
        ``absent_ok`` a missing object is no error (the block is left, the caller goes on)."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        doing = f"{verb} {uri}"
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error") or {}
            code = str(error.get("Code") or "")
            if absent_ok and code in _ABSENT:
                return
            raise StorageAccessError(self._client_error(doing, uri, code, exc)) from None
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise StorageAccessError(
                f"{doing}: {exc}. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                "AWS_PROFILE) to credentials that can read the bucket, or give your account "
                "`get` on the job's spec.storage.s3.credentialsSecret"
            ) from None
        except (EndpointConnectionError, ConnectTimeoutError) as exc:
            raise StorageAccessError(
                f"{doing}: cannot reach the S3 endpoint {self.endpoint} ({exc}). An endpoint "
                "such as http://minio.<namespace>:9000 is a name only pods resolve: pass "
                "--s3-endpoint URL (or set AWS_ENDPOINT_URL) to an address this machine "
                "reaches the same store at (a `kubectl port-forward`, an ingress)"
            ) from None
        except BotoCoreError as exc:
            raise StorageAccessError(
                f"{doing} through {self.endpoint} failed: {exc}; check --s3-endpoint (or "
                "AWS_ENDPOINT_URL), the job's spec.storage.s3 and your AWS credentials"
            ) from None

    def _client_error(self, doing: str, uri: str, code: str, exc: Exception) -> str:
        bucket = split_uri(uri)[0]
        if code in _DENIED:
            return (
                f"{doing}: S3 at {self.endpoint} refused {self.credentials_from} ({code}). "
                f"They need s3:ListBucket and s3:GetObject on bucket {bucket!r}: set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) to credentials "
                "that have them, and check --s3-endpoint points at the job's store"
            )
        if code == "NoSuchBucket":
            return (
                f"{doing}: there is no bucket {bucket!r} at {self.endpoint}; check the job's "
                "spec.storage.s3.uri, and that --s3-endpoint (or AWS_ENDPOINT_URL) reaches the "
                "store the job's pods use"
            )
        return f"{doing} through {self.endpoint} failed: {exc}"


class _Counted:
    """A body stream that adds what is read to its store's ``bytes_read``."""

    def __init__(self, body: Any, store: S3Store, path: str) -> None:
        self._body = body
        self._store = store
        self._path = path

    def read(self, size: int = -1) -> bytes:
        with self._store._errors("reading", self._path):
            data: bytes = self._body.read(size if size >= 0 else None)
        self._store.bytes_read += len(data)
        return data

    def close(self) -> None:
        self._body.close()

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
