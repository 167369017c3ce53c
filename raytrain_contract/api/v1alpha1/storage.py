"""Where a TrainJob keeps its checkpoints and code, and where a new run starts from.

Storage (a ReadWriteMany claim or an S3 bucket), which checkpoints are kept, resumeFrom and the
code snapshot of `raytrain submit --code`.
"""

from __future__ import annotations

from enum import Enum

from pydantic import ConfigDict, Field

from raytrain_contract.api.v1alpha1.common import (
    DNS_SUBDOMAIN,
    NAME_PATTERN,
    RESERVED_MOUNT_PATHS,
    SECRET_KEY,
    Model,
    rule,
)


class ScoreOrder(str, Enum):
    MAX = "max"
    MIN = "min"


class PVCStorage(Model):
    """A ReadWriteMany PersistentVolumeClaim mounted at the same path on head and every worker."""

    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """PersistentVolumeClaim in the TrainJob's namespace; it must allow ReadWriteMany."""
    mount_path: str = Field(
        default="/mnt/raytrain",
        max_length=1024,
        pattern=r"^(/[^/:]+)+$",
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "!self.matches('/[.][.]?(/|$)')",
                    "spec.storage.pvc.mountPath must be a plain absolute path without '.' or "
                    "'..' segments, e.g. /mnt/raytrain",
                ),
                rule(
                    "!(self in " + repr(list(RESERVED_MOUNT_PATHS)) + ") && "
                    "!self.startsWith('/etc/raytrain/') && !self.startsWith('/dev/') && "
                    "!self.startsWith('/proc/') && !self.startsWith('/sys/')",
                    "spec.storage.pvc.mountPath must not hide or nest in a directory the pods "
                    "need (/dev/shm, /etc/raytrain, /tmp, /usr, /app...); use a directory of its "
                    "own such as /mnt/raytrain",
                ),
            ]
        },
    )
    """Where the claim is mounted in every pod (an absolute path of its own)."""
    sub_path: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^[^:]*$",
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "!self.matches('(^|/)[.][.](/|$)')",
                    "spec.storage.pvc.subPath must stay inside the claim: remove the '..' "
                    "segments (e.g. runs/digits)",
                ),
            ]
        },
    )
    """Directory inside the claim that holds this job's runs, relative to mountPath (no '..')."""


class SecretKeys(Model):
    """A Secret holding S3 credentials."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Name of the Secret in the TrainJob's namespace."""
    access_key_id_key: str = Field(
        default="AWS_ACCESS_KEY_ID", min_length=1, max_length=253, pattern=SECRET_KEY
    )
    """Key of the access key id in the Secret."""
    secret_access_key_key: str = Field(
        default="AWS_SECRET_ACCESS_KEY", min_length=1, max_length=253, pattern=SECRET_KEY
    )
    """Key of the secret access key in the Secret."""
    session_token_key: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=SECRET_KEY
    )
    """Key of an optional session token in the Secret."""


class S3Storage(Model):
    """An S3 (or S3-compatible) location for checkpoints and results."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "!(has(self.credentialsSecret) && has(self.serviceAccountName))",
                    "spec.storage.s3: set credentialsSecret or serviceAccountName (IRSA), not both",
                )
            ]
        }
    )

    uri: str = Field(
        max_length=1024,
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$')",
                    "spec.storage.s3.uri must look like s3://bucket/prefix "
                    "(lower-case bucket name, 3-63 characters)",
                ),
                rule(
                    "!self.matches('/[.][.]?(/|$)') && !self.matches('[[:cntrl:]]')",
                    "spec.storage.s3.uri: the prefix must not contain '.' or '..' segments or "
                    "control characters (they would leave the prefix); write it like "
                    "s3://bucket/team/runs",
                ),
            ]
        },
    )
    """Bucket and prefix, `s3://bucket/prefix`."""
    endpoint: str | None = Field(
        default=None,
        max_length=512,
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "self.matches('^https?://[^/]+/?$')",
                    "spec.storage.s3.endpoint must be a URL such as http://minio.storage:9000 "
                    "(scheme and host, no path)",
                ),
                rule(
                    "!self.matches('^[^/]*//[^/]*@')",
                    "spec.storage.s3.endpoint must not hold credentials (user:password@ before "
                    "the host): the endpoint is copied into the contract ConfigMap and a plain "
                    "environment variable; give the scheme and host only and put the keys in the "
                    "Secret named by spec.storage.s3.credentialsSecret",
                ),
            ]
        },
    )
    """Endpoint of an S3-compatible store (MinIO, Ceph); unset for AWS S3. Scheme and host only:
    credentials go in credentialsSecret, never in the URL."""
    region: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"
    )
    """Region of the bucket."""
    credentials_secret: SecretKeys | None = None
    """Secret with an access key; its values reach the pods as env, never the status."""
    service_account_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    """Service account whose cloud identity (IRSA, workload identity) reaches the bucket."""


class StorageSpec(Model):
    """Where checkpoints live (RunConfig.storage_path). Required: no TrainJob trains on
    ephemeral storage. Set exactly one of pvc or s3."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "(has(self.pvc) ? 1 : 0) + (has(self.s3) ? 1 : 0) == 1",
                    "spec.storage: set exactly one of storage.pvc (a ReadWriteMany claim) or "
                    "storage.s3 (a bucket URI)",
                )
            ]
        }
    )

    pvc: PVCStorage | None = None
    """A ReadWriteMany claim mounted in every pod."""
    s3: S3Storage | None = None
    """An S3 or S3-compatible bucket."""


class CheckpointVerify(str, Enum):
    CHECKSUMS = "Checksums"
    SIZES = "Sizes"


class CheckpointSpec(Model):
    """Which checkpoints are kept (Ray Train's CheckpointConfig)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "!has(self.scoreOrder) || has(self.scoreAttribute)",
                    "spec.checkpoint.scoreOrder needs spec.checkpoint.scoreAttribute "
                    "(the reported metric to rank checkpoints by)",
                )
            ]
        }
    )

    num_to_keep: int | None = Field(default=None, ge=1, le=100000)
    """Checkpoints kept; older (or worse-scoring) ones are removed by Ray Train. Unset: keep all."""
    score_attribute: str | None = Field(default=None, min_length=1, max_length=256)
    """Reported metric that ranks checkpoints."""
    score_order: ScoreOrder | None = None
    """max or min: whether a higher or a lower score is better. Default max."""
    verify: CheckpointVerify | None = None
    """How a checkpoint is checked against its manifest before a resume uses it. Checksums
    (the default): every file's size and CRC32C, computed as each worker downloads it. Sizes:
    the sizes only, for checkpoints too large to read twice; a corrupted file of the right size
    then reaches the loop."""


class ResumeFromSpec(Model):
    """Where a new run starts: the latest checkpoint of another TrainJob, or a checkpoint named
    by its location. Used while this job's own run has no checkpoint; once it has one, every
    later attempt resumes from its own. Set exactly one field."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "(has(self.trainJob) ? 1 : 0) + (has(self.checkpoint) ? 1 : 0) == 1",
                    "spec.resumeFrom: set exactly one of resumeFrom.trainJob (a TrainJob of this "
                    "namespace whose latest checkpoint to start from) or resumeFrom.checkpoint "
                    "(the checkpoint's location)",
                )
            ]
        }
    )

    train_job: str | None = Field(default=None, max_length=63, pattern=NAME_PATTERN)
    """A TrainJob in this namespace: the run starts from its status.checkpoint.latestURI, read
    when this job's first RayJob is created (and kept in status.resumedFrom)."""
    checkpoint: str | None = Field(
        default=None,
        max_length=1024,
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "(self.startsWith('s3://') || self.startsWith('/')) && "
                    "!self.matches('/[.][.]?(/|$)') && !self.matches('[[:cntrl:]]')",
                    "spec.resumeFrom.checkpoint must be a checkpoint directory: an s3:// URI "
                    "or an absolute path under spec.storage.pvc.mountPath, without '.' or '..' "
                    "segments (a TrainJob's status.checkpoint.latestURI is one)",
                )
            ]
        },
    )
    """A checkpoint directory: an s3:// URI (read with this job's S3 settings and credentials)
    or an absolute path under spec.storage.pvc.mountPath."""


class CodeSpec(Model):
    """A snapshot of the training code, made by `raytrain submit --code DIR` (or the SDK's
    `train(code=...)`): a zip archive in the job's own storage, named by the SHA-256 of its
    bytes. The runtime downloads it, checks the hash, and puts it on the import path (and as the
    working directory) of the driver and of every training worker, so the entrypoint can name a
    module or script of it. Every attempt of the job (retries, resumes, a resume after suspend)
    runs this same snapshot; the hash cannot change while the job runs."""

    uri: str = Field(
        max_length=1024,
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    "(self.startsWith('s3://') || self.startsWith('/')) && "
                    "self.endsWith('.zip') && !self.matches('/[.][.]?(/|$)') && "
                    "!self.matches('[[:cntrl:]]')",
                    "spec.code.uri must be a zip archive: an s3:// URI or an absolute path under "
                    "spec.storage.pvc.mountPath ending in .zip, without '.' or '..' segments "
                    "(raytrain submit --code DIR writes one)",
                )
            ]
        },
    )
    """Where the archive is: an s3:// URI (read with this job's S3 settings and credentials) or
    an absolute path under spec.storage.pvc.mountPath."""
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    """The SHA-256 of the archive's bytes, in lower-case hex; a download that does not match it
    fails the attempt instead of running other code."""
