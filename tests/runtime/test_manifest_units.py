"""The runtime's manifest steps without a Ray cluster: the save with its part, the driver's
check of a run (on a local directory, the way a PVC is mounted) and the legacy marker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.fs as pafs
import pytest

from raytrain_contract import checkpoints as ck
from trainer_runtime import manifests
from trainer_runtime.storage import StorageTarget

pytestmark = pytest.mark.runtime

LOCAL = pafs.LocalFileSystem()


def write_files(directory: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_bytes(data)


def save(tmp_path: Path, run_dir: Path, name: str, files: dict[str, bytes], epoch: int) -> str:
    """A checkpoint saved as a worker and the controller save one: files, part, manifest."""
    source = tmp_path / f"src-{name}"
    write_files(source, files)
    dest = str(run_dir / name)

    def upload() -> Any:
        LOCAL.create_dir(dest)
        pafs.copy_files(str(source), dest, source_filesystem=LOCAL, destination_filesystem=LOCAL)
        return SimpleNamespace(checkpoint=SimpleNamespace(filesystem=LOCAL, path=dest))

    manifests.save_with_part(str(source), upload, rank=0, delete_after=True)
    assert not source.exists(), "the local copy was not deleted after the upload"
    manifests.finish_manifest(LOCAL, dest, run=run_dir.name, attempt=0, fence="r-0", epoch=epoch,
                              metrics={"epoch": epoch, "blob": object()})  # fmt: skip
    return dest


def test_a_save_writes_the_files_part_and_manifest(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    files = {"model.pt": os.urandom(5000), "nested/opt.pt": os.urandom(10)}
    dest = save(tmp_path, run_dir, "checkpoint_1", files, epoch=4)
    m = ck.read_manifest(ck.local_store(), dest)
    assert isinstance(m, ck.Manifest)
    assert {f.path: f.size for f in m.files} == {"model.pt": 5000, "nested/opt.pt": 10}
    assert (m.attempt, m.fence, m.epoch) == (0, "r-0", 4)
    assert m.metrics == {"epoch": 4}, "a value JSON cannot hold was kept"
    assert ck.verify(ck.local_store(), dest, checksums=True).ok


def test_an_upload_that_fails_raises_its_own_error_and_writes_no_part(tmp_path: Path) -> None:
    source = tmp_path / "src"
    write_files(source, {"model.pt": b"x" * 100})

    def upload() -> Any:
        raise OSError("the bucket refused the upload")

    with pytest.raises(OSError, match="refused"):
        manifests.save_with_part(str(source), upload, rank=0, delete_after=True)
    assert source.exists(), "the local checkpoint was deleted though its upload failed"


def snapshot(run_dir: Path, names: list[str]) -> None:
    """Ray Train's snapshot of a run, in the fields check_run reads and rewrites."""
    results = [{"checkpoint_dir_name": n, "metrics": {}} for n in names]
    body = {
        "ray_version": "2.60.0",
        "checkpoint_results": results,
        "checkpoint_report_indices": list(range(len(names))),
        "latest_checkpoint_result": results[-1],
        "pending_training_results": [],
        "pending_validation_specs": [],
        "current_report_index": len(names),
        "validated_checkpoint_dir_names": [],
        "timed_out_validation_checkpoint_dir_names": [],
        "failed_validation_checkpoint_dir_names": names[-1:],
    }
    (run_dir / manifests.SNAPSHOT_NAME).write_text(json.dumps(body))


def test_the_driver_drops_a_damaged_latest_from_the_snapshot_and_marks_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    run_dir = root / "run"
    names = [f"checkpoint_2026-12-0{i}_00-00-00.000000" for i in (1, 2, 3)]
    for i, n in enumerate(names):
        save(tmp_path, run_dir, n, {"model.pt": os.urandom(100 + i)}, epoch=i)
    snapshot(run_dir, names)
    (run_dir / names[2] / "model.pt").write_bytes(b"short")
    target = StorageTarget(LOCAL, str(root), "")

    check = manifests.check_run(target, "run", attempt=1)
    assert check.error is None
    assert check.resumed_from == str(run_dir / names[1])
    (r,) = check.rejected
    assert (r.uri, r.problem, r.attempt) == (str(run_dir / names[2]), "size", 1)
    assert "model.pt is 5 bytes, the manifest says 102" in r.reason
    after = json.loads((run_dir / manifests.SNAPSHOT_NAME).read_text())
    assert [x["checkpoint_dir_name"] for x in after["checkpoint_results"]] == names[:2]
    assert after["checkpoint_report_indices"] == [0, 1]
    assert after["latest_checkpoint_result"]["checkpoint_dir_name"] == names[1]
    assert after["failed_validation_checkpoint_dir_names"] == []
    assert (run_dir / f"{manifests.SNAPSHOT_NAME}.before-attempt-1").exists()
    assert (run_dir / names[2] / ".raytrain" / "rejected.json").exists()
    assert (run_dir / names[2] / "model.pt").exists()

    # The next attempt finds it marked and says so, without touching the snapshot again.
    again = manifests.check_run(target, "run", attempt=2)
    assert again.resumed_from == str(run_dir / names[1]) and again.rejected == []


def test_checkpoints_from_before_manifests_are_used_unverified(tmp_path: Path) -> None:
    root = tmp_path / "store"
    run_dir = root / "run"
    old = "checkpoint_2026-11-01_00-00-00.000000"
    write_files(run_dir / old, {"model.pt": b"written by a runtime without manifests"})
    snapshot(run_dir, [old])
    target = StorageTarget(LOCAL, str(root), "")
    check = manifests.check_run(target, "run", attempt=3)
    assert (check.resumed_from, check.unverified, check.rejected) == (
        str(run_dir / old), True, [])  # fmt: skip
    marker = json.loads((run_dir / ".raytrain" / manifests.MARKER_NAME).read_text())
    assert marker["legacyUpTo"] == old
    # A later checkpoint without a manifest is not one.
    new = "checkpoint_2026-12-01_00-00-00.000000"
    write_files(run_dir / new, {"model.pt": b"upload cut short"})
    snapshot(run_dir, [old, new])
    check = manifests.check_run(target, "run", attempt=4)
    assert check.resumed_from == str(run_dir / old)
    assert [r.problem for r in check.rejected] == ["no-manifest"]


def test_no_checkpoint_that_passes_fails_with_every_one_named(tmp_path: Path) -> None:
    root = tmp_path / "store"
    run_dir = root / "run"
    names = [f"checkpoint_2026-12-0{i}_00-00-00.000000" for i in (1, 2)]
    for n in names:
        save(tmp_path, run_dir, n, {"model.pt": b"abc"}, epoch=0)
        (run_dir / n / "model.pt").unlink()
    snapshot(run_dir, names)
    check = manifests.check_run(StorageTarget(LOCAL, str(root), ""), "run", attempt=1)
    assert check.resumed_from is None and check.error is not None
    assert check.error.startswith(ck.NO_CHECKPOINT)
    for n in names:
        assert f"{run_dir / n}: file model.pt is missing" in check.error
    assert all((run_dir / n).exists() for n in names)


def test_on_a_mounted_volume_a_checkpoint_is_checked_in_place(tmp_path: Path) -> None:
    """A PVC: no copy to the worker's disk; a same-size corruption still fails its checksum,
    and the resume falls back to the checkpoint before it, in place too."""
    run_dir = tmp_path / "pvc" / "run"
    old = save(tmp_path, run_dir, "checkpoint_2026-12-01_00-00-00.000000", {"m.pt": b"a" * 64}, 0)
    new = save(tmp_path, run_dir, "checkpoint_2026-12-02_00-00-00.000000", {"m.pt": b"b" * 64}, 1)
    Path(new, "m.pt").write_bytes(b"c" * 64)
    workdir = tmp_path / "work"
    workdir.mkdir()
    index, fetched = manifests.fetch_verified(
        manifests.PyArrowStore(LOCAL), LOCAL, new, uri=lambda p: p, attempt=1,
        workdir=str(workdir),
    )  # fmt: skip
    assert (index, fetched.local, fetched.path) == (1, None, old)
    assert [r.problem for r in fetched.rejected] == ["checksum"]
    assert list(workdir.iterdir()) == [], "a mounted checkpoint was copied"


def test_a_download_checks_each_file_as_it_arrives_and_never_unpacks_one(tmp_path: Path) -> None:
    import gzip

    run_dir = tmp_path / "store" / "run"
    files = {"model.pt": os.urandom(3 << 20), "opt/state.gz": gzip.compress(b"x" * 1000)}
    dest = save(tmp_path, run_dir, "checkpoint_2026-12-01_00-00-00.000000", files, 0)
    manifest = ck.read_manifest(ck.local_store(), dest)
    assert isinstance(manifest, ck.Manifest)
    (Path(dest) / "notes.txt").write_text("a file the manifest does not list")
    good = manifests.download_checked(LOCAL, dest, str(tmp_path / "a"), manifest, ["notes.txt"])
    assert good.ok and good.files_checked == 2
    for rel, data in files.items():
        assert (tmp_path / "a" / rel).read_bytes() == data, f"{rel} changed on the way"
    assert (tmp_path / "a" / "notes.txt").exists()

    data = bytearray(files["model.pt"])
    data[-1] ^= 0x01
    Path(dest, "model.pt").write_bytes(bytes(data))
    bad = manifests.download_checked(LOCAL, dest, str(tmp_path / "b"), manifest)
    assert bad.problem == "checksum" and bad.reason().startswith("file model.pt has CRC32C")
