"""The checkpoint manifest (raytrain_contract.checkpoints) on a local directory, and what the
reporter tells the TrainJob when a resume passes checkpoints over."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import google_crc32c
import pytest

from raytrain_contract import checkpoints as ck
from trainer_runtime.reporter import RecordingTransport, Reporter

STORE = ck.local_store()


def make_checkpoint(
    root: Path, name: str, files: dict[str, bytes], *, manifest: bool = True
) -> str:
    directory = root / name
    for rel, data in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_bytes(data)
    if manifest:
        m = ck.Manifest(
            run="run",
            checkpoint=name,
            attempt=0,
            epoch=1,
            metrics={"loss": 0.5},
            files=ck.scan_local(str(directory)),
            created="2026-12-03T00:00:00Z",
        )
        ck.write_manifest(STORE, str(directory), m)
    return str(directory)


FILES = {"model.pt": os.urandom(3000), "extra/optim.pt": os.urandom(1000)}


def test_a_manifest_lists_every_file_with_its_size_and_crc32c(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, "checkpoint_1", FILES)
    m = ck.read_manifest(STORE, d)
    assert isinstance(m, ck.Manifest)
    assert {f.path: (f.size, f.crc32c) for f in m.files} == {
        rel: (len(data), f"{google_crc32c.value(data):08x}") for rel, data in FILES.items()
    }
    assert m.total_bytes == 4000
    v = ck.verify(STORE, d, checksums=True)
    assert v.ok and v.checked_checksums and v.files_checked == 2


def test_a_truncated_file_fails_on_its_size(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, "checkpoint_1", FILES)
    Path(d, "model.pt").write_bytes(FILES["model.pt"][:10])
    v = ck.verify(STORE, d, checksums=False)
    assert v.problem == "size"
    assert v.reason() == "file model.pt is 10 bytes, the manifest says 3000"


def test_a_deleted_file_is_named_missing(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, "checkpoint_1", FILES)
    Path(d, "extra/optim.pt").unlink()
    v = ck.verify(STORE, d, checksums=False)
    assert (v.problem, v.reason()) == ("missing", "file extra/optim.pt is missing")


def test_a_same_size_corruption_shows_only_in_the_checksums(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, "checkpoint_1", FILES)
    data = bytearray(FILES["model.pt"])
    data[1500] ^= 0x01
    Path(d, "model.pt").write_bytes(bytes(data))
    assert ck.verify(STORE, d, checksums=False).ok
    v = ck.verify(STORE, d, checksums=True)
    assert v.problem == "checksum"
    assert v.reason().startswith("file model.pt has CRC32C ")
    assert f"the manifest says {google_crc32c.value(FILES['model.pt']):08x}" in v.reason()


def test_no_manifest_and_an_unreadable_one_are_not_checkpoints(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, "checkpoint_1", FILES, manifest=False)
    v = ck.verify(STORE, d, checksums=True)
    assert v.problem == "no-manifest" and "did not finish" in v.reason()
    STORE.write(ck.meta_path(d, ck.MANIFEST_NAME), b'{"run": "r"}')
    v = ck.verify(STORE, d, checksums=True)
    assert v.problem == "bad-manifest" and "checkpoint" in v.reason()


def test_a_rejected_checkpoint_stays_rejected_unless_looked_at_again(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, "checkpoint_1", FILES)
    Path(d, "model.pt").write_bytes(b"x")
    bad = ck.verify(STORE, d, checksums=False)
    ck.mark_rejected(STORE, bad, attempt=3, by="driver")
    mark = json.loads(Path(d, ".raytrain", "rejected.json").read_text())
    assert (mark["problem"], mark["attempt"], mark["by"]) == ("size", 3, "driver")
    Path(d, "model.pt").write_bytes(FILES["model.pt"])  # repaired by hand
    again = ck.verify(STORE, d, checksums=True)
    assert again.problem == "rejected" and "file model.pt is 1 bytes" in again.reason()
    assert ck.verify(STORE, d, checksums=True, honour_rejection=False).ok
    assert Path(d, "model.pt").exists()


def test_the_ranks_parts_merge_into_one_list(tmp_path: Path) -> None:
    d = str(tmp_path / "checkpoint_1")
    ck.write_part(STORE, d, 1, [ck.FileEntry(path="shard-1.pt", size=5, crc32c="00000001")])
    ck.write_part(STORE, d, 0, [ck.FileEntry(path="shard-0.pt", size=4, crc32c="00000002")])
    merged = ck.read_parts(STORE, d)
    assert merged is not None
    assert [(e.path, e.size) for e in merged] == [("shard-0.pt", 4), ("shard-1.pt", 5)]
    assert ck.read_parts(STORE, str(tmp_path / "checkpoint_2")) is None


def test_the_newest_good_checkpoint_is_found_and_those_before_it_named(tmp_path: Path) -> None:
    old = make_checkpoint(tmp_path, "checkpoint_2026-12-01_00-00-00.000001", FILES)
    mid = make_checkpoint(tmp_path, "checkpoint_2026-12-02_00-00-00.000001", FILES)
    new = make_checkpoint(tmp_path, "checkpoint_2026-12-03_00-00-00.000001", FILES, manifest=False)
    Path(mid, "model.pt").unlink()
    (tmp_path / "checkpoint_manager_snapshot.json").write_text("{}")  # Ray Train's, not one
    assert ck.checkpoint_dirs(STORE, str(tmp_path)) == [new, mid, old]
    seen: list[str] = []
    good, rejected = ck.newest_good(
        STORE, ck.checkpoint_dirs(STORE, str(tmp_path)), checksums=True,
        on_reject=lambda v: seen.append(v.name),
    )  # fmt: skip
    assert good is not None and good.checkpoint == old
    assert [v.problem for v in rejected] == ["no-manifest", "missing"]
    assert seen == [Path(new).name, Path(mid).name]
    message = ck.none_usable_message(rejected, lambda p: f"s3://b/{Path(p).name}")
    assert f"s3://b/{Path(new).name}: no manifest" in message
    assert f"s3://b/{Path(mid).name}: file model.pt is missing" in message
    assert "Nothing was deleted" in message and "spec.resumeFrom" in message
    assert message.startswith(ck.NO_CHECKPOINT)


def reporter(status: dict[str, Any] | None = None) -> tuple[Reporter, RecordingTransport]:
    sink = RecordingTransport({"status": status} if status else None)
    r = Reporter(sink, attempt=2, min_interval=0, score_attribute="loss", score_order="min")
    r.start()
    return r, sink


def test_a_rejected_latest_and_best_are_replaced_and_the_check_is_sent_once() -> None:
    earlier = {"uri": "s3://b/r/checkpoint_0", "problem": "size", "reason": "x", "attempt": 1}
    r, sink = reporter(
        {
            "attempt": 2,
            "checkpoint": {
                "count": 3,
                "latestURI": "s3://b/r/checkpoint_2",
                "bestURI": "s3://b/r/checkpoint_2",
                "bestMetric": "0.1",
                "rejected": [earlier],
            },
        }
    )
    bad = {"uri": "s3://b/r/checkpoint_2", "problem": "checksum", "reason": "y", "attempt": 2}
    r.on_resume("s3://b/r/checkpoint_1", [bad])
    sent = sink.patches[-1]["status"]["checkpoint"]
    assert sent["latestURI"] == "s3://b/r/checkpoint_1"
    assert sent["bestURI"] is None and sent["bestMetric"] is None
    assert sent["resumedFrom"] == "s3://b/r/checkpoint_1" and sent["resumedAttempt"] == 2
    assert sent["rejected"] == [earlier, bad]
    # Later reports leave both fields to whoever writes them next: they are not sent again.
    r.on_report({"loss": 0.3, "epoch": 2}, "s3://b/r/checkpoint_3")
    later = sink.patches[-1]["status"]["checkpoint"]
    assert "rejected" not in later and "resumedFrom" not in later
    assert later["bestURI"] == "s3://b/r/checkpoint_3" and later["bestMetric"] == "0.3"


@pytest.mark.parametrize("count", [25])
def test_the_status_keeps_the_newest_rejections(count: int) -> None:
    r, sink = reporter({"attempt": 2})
    entries = [{"uri": f"s3://b/r/c{i}", "attempt": 2} for i in range(count)]
    r.on_resume("s3://b/r/ok", entries)
    sent = sink.patches[-1]["status"]["checkpoint"]["rejected"]
    assert len(sent) == 20 and sent[-1]["uri"] == f"s3://b/r/c{count - 1}"
