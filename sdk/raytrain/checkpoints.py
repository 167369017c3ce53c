"""What a run's checkpoints in storage are worth: each one checked against its manifest.

`TrainJobClient.list_checkpoints` (and `raytrain checkpoints NAME`) lists the checkpoint
directories of a job's run, newest first, and checks each with the rules the runtime uses before
a resume (``raytrain_contract.checkpoints.verify``): every file of the manifest there with its
size (one listing, nothing read), or with ``checksums`` every file read once and its CRC32C
compared. A checkpoint already marked rejected (``.raytrain/rejected.json``) is shown with the
mark's reason and not checked again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from raytrain.models import Checkpoints
from raytrain_contract import checkpoints as manifests
from raytrain_contract.timefmt import parse_rfc3339

State = Literal[
    "verified", "ok", "no-manifest", "bad-manifest", "missing", "size", "checksum", "rejected"
]
#: States of a checkpoint a resume can use.
USABLE: frozenset[str] = frozenset({"verified", "ok"})
#: States of a checkpoint whose manifest was complete and whose files no longer match it.
FAILED: frozenset[str] = frozenset({"bad-manifest", "missing", "size", "checksum"})

#: Exit codes of `raytrain checkpoints` (docs/sdk.md lists them).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_NOT_READABLE = 2
EXIT_FAILED = 3
EXIT_NONE_USABLE = 4


@dataclass(frozen=True)
class StoredCheckpoint:
    """One checkpoint directory of the run, and what checking it found."""

    name: str
    uri: str
    state: State
    """verified, ok (sizes match), no-manifest, bad-manifest, missing, size, checksum or
    rejected (marked earlier, see ``rejection``)."""
    detail: str = ""
    """What is wrong, in one sentence: the file, and what storage holds against the manifest."""
    time: dt.datetime | None = None
    """manifest.created, else the time in the directory's name (Ray Train's, the driver's
    clock, read as UTC)."""
    epoch: int | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    files: int = 0
    """Files in the manifest; without one, the files storage holds."""
    size: int = 0
    """Their bytes, the same way."""
    attempt: int | None = None
    """The attempt that wrote it (manifest.attempt)."""
    rejection: Mapping[str, Any] | None = None
    """The body of .raytrain/rejected.json when it is marked."""
    latest: bool = False
    """It is status.checkpoint.latestURI."""
    best: bool = False
    """It is status.checkpoint.bestURI."""
    resumed_from: bool = False
    """It is status.checkpoint.resumedFrom (what the current attempt resumed from)."""

    @property
    def usable(self) -> bool:
        return self.state in USABLE

    @property
    def failed(self) -> bool:
        """Its files no longer match a manifest that was complete: lost or damaged data."""
        return self.state in FAILED

    @property
    def marks(self) -> list[str]:
        return [
            m for m, on in (("latest", self.latest), ("best", self.best),
                            ("resumed-from", self.resumed_from)) if on
        ]  # fmt: skip


@dataclass(frozen=True)
class CheckpointReport:
    """A run's checkpoints in storage, newest first, and what the job's status says of them."""

    job: str
    namespace: str
    run: str
    """The run's directory: <spec.storage>/<status.runName>."""
    checksums: bool
    """Every file was read and its CRC32C compared (--verify); else sizes only."""
    checkpoints: Sequence[StoredCheckpoint]
    bytes_read: int = 0
    not_in_storage: Mapping[str, str] = field(default_factory=dict)
    """Checkpoints the status names (latest, best, resumed-from) that storage does not hold."""
    status: Checkpoints = field(default_factory=Checkpoints)
    """What the job's status says of its checkpoints."""
    score_attribute: str | None = None
    """spec.checkpoint.scoreAttribute: the metric that ranks them."""

    @property
    def newest_usable(self) -> StoredCheckpoint | None:
        return next((c for c in self.checkpoints if c.usable), None)

    @property
    def failed(self) -> list[StoredCheckpoint]:
        return [c for c in self.checkpoints if c.failed]

    @property
    def exit_code(self) -> int:
        """0: the newest usable checkpoint passed and none failed; 3: a checkpoint failed its
        check; 4: none is usable (none stored, none complete, or all marked rejected)."""
        if self.failed:
            return EXIT_FAILED
        if self.newest_usable is None:
            return EXIT_NONE_USABLE
        return EXIT_OK


def _same(a: str | None, b: str) -> bool:
    return bool(a) and str(a).rstrip("/") == b.rstrip("/")


def time_of(name: str, manifest: manifests.Manifest | None) -> dt.datetime | None:
    """When a checkpoint was written: its manifest says, else Ray Train's directory name
    (``checkpoint_2026-11-20_10-00-00.000000``)."""
    if manifest is not None:
        created = parse_rfc3339(manifest.created)
        if created is not None:
            return created
    stamp = name.removeprefix(manifests.CHECKPOINT_PREFIX)
    for fmt in ("%Y-%m-%d_%H-%M-%S.%f", "%Y-%m-%d_%H-%M-%S"):
        try:
            return dt.datetime.strptime(stamp, fmt).replace(tzinfo=dt.timezone.utc)
        except ValueError:
            continue
    return None


def _rejection_text(rejection: Mapping[str, Any]) -> str:
    who = []
    if rejection.get("attempt") is not None:
        who.append(f"attempt {rejection['attempt']}")
    if rejection.get("time"):
        who.append(str(rejection["time"]))
    by = f" ({', '.join(who)})" if who else ""
    return f"marked rejected{by}: {rejection.get('reason') or 'no reason given'}"


def check_one(store: manifests.Store, directory: str, *, checksums: bool) -> StoredCheckpoint:
    """Check one checkpoint directory (an s3:// URI with an S3 store)."""
    name = directory.rstrip("/").rsplit("/", 1)[-1]
    rejection = manifests.read_rejection(store, directory)
    manifest: manifests.Manifest | None = None
    if rejection is not None:
        read = manifests.read_manifest(store, directory)
        manifest = read if isinstance(read, manifests.Manifest) else None
        state: State = "rejected"
        detail = _rejection_text(rejection)
    else:
        verdict = manifests.verify(store, directory, checksums=checksums, honour_rejection=False)
        manifest = verdict.manifest
        if verdict.ok:
            state, detail = ("verified" if verdict.checked_checksums else "ok"), ""
        else:
            state, detail = verdict.problem or "bad-manifest", verdict.reason()
    if manifest is not None:
        files, size = len(manifest.files), manifest.total_bytes
    else:
        held = {
            p: s for p, s in store.sizes(directory).items() if not p.startswith(manifests.META_DIR)
        }
        files, size = len(held), sum(held.values())
    return StoredCheckpoint(
        name=name,
        uri=directory.rstrip("/"),
        state=state,
        detail=detail,
        time=time_of(name, manifest),
        epoch=manifest.epoch if manifest else None,
        metrics=dict(manifest.metrics) if manifest else {},
        files=files,
        size=size,
        attempt=manifest.attempt if manifest else None,
        rejection=rejection,
    )


def check_run(
    store: manifests.Store,
    run: str,
    *,
    job: str,
    namespace: str,
    checksums: bool,
    status: Mapping[str, Any] | None = None,
    reported: Checkpoints | None = None,
    score_attribute: str | None = None,
) -> CheckpointReport:
    """Every checkpoint of the run in ``run`` (newest first), each checked; ``status`` is the
    job's status.checkpoint, whose latestURI, bestURI and resumedFrom are marked (``reported``
    the same, as the SDK reads it)."""
    status = status or {}
    found = []
    for directory in manifests.checkpoint_dirs(store, run):
        one = check_one(store, directory, checksums=checksums)
        found.append(
            replace(
                one,
                latest=_same(status.get("latestURI"), one.uri),
                best=_same(status.get("bestURI"), one.uri),
                resumed_from=_same(status.get("resumedFrom"), one.uri),
            )
        )
    held = {c.uri for c in found}
    missing = {
        field_name: str(status[field_name]).rstrip("/")
        for field_name in ("latestURI", "bestURI", "resumedFrom")
        if status.get(field_name)
        and str(status[field_name]).rstrip("/") not in held
        and str(status[field_name]).startswith(run.rstrip("/") + "/")
    }
    return CheckpointReport(
        job=job,
        namespace=namespace,
        run=run.rstrip("/"),
        checksums=checksums,
        checkpoints=found,
        bytes_read=int(getattr(store, "bytes_read", 0)),
        not_in_storage=missing,
        status=reported or Checkpoints(),
        score_attribute=score_attribute,
    )
