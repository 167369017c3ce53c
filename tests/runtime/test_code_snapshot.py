"""The code snapshot (spec.code) from a user's folder to the training workers' import path.

The SDK packs a folder (tests/unit/test_code_pack.py holds the packing rules); here the runtime
fetches what the SDK stored, checks its hash and refuses what it must not run, and a local run
trains from a folder that is in no image: the workers import its modules and read its files,
and an edited line runs on the next submission.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from raytrain import _code
from raytrain_contract import CodeSnapshot, Contract, load_contract
from trainer_runtime import code

pytestmark = pytest.mark.runtime

REPO = Path(__file__).resolve().parents[2]


def _project(root: Path, offset: int = 1) -> Path:
    """A small training project: a package, a helper module, a data file, an ignored file."""
    (root / "mytrain").mkdir(parents=True)
    (root / "mytrain" / "__init__.py").write_text("")
    (root / "mytrain" / "helper.py").write_text("def answer() -> int:\n    return 41\n")
    (root / "mytrain" / "loop.py").write_text(
        textwrap.dedent(
            """
            import pathlib

            import ray.train

            from mytrain.helper import answer


            def train(config):
                # Relative to the working directory: the snapshot's root on every worker.
                offset = int(pathlib.Path("data/offset.txt").read_text())
                rank = ray.train.get_context().get_world_rank()
                ray.train.report({"answer": answer() + offset, "rank": rank, "epoch": 0})
            """
        )
    )
    (root / "data").mkdir()
    (root / "data" / "offset.txt").write_text(str(offset))
    (root / "data" / "huge.bin").write_bytes(b"x" * 1024)
    (root / ".gitignore").write_text("*.bin\n")
    return root


def _contract(make_doc: object, storage: Path, snapshot: CodeSnapshot | None) -> Contract:
    doc = make_doc(storage={"type": "pvc", "path": str(storage)})  # type: ignore[operator]
    if snapshot is not None:
        doc["code"] = snapshot.model_dump(by_alias=True)
    return load_contract(doc)


def _stored(tmp_path: Path, project: Path) -> tuple[Path, CodeSnapshot]:
    storage = tmp_path / "storage"
    snapshot = _code.pack(project)
    uri = _code.attach({}, snapshot, storage={"pvc": {"mountPath": str(storage)}},
                       local_storage=True)  # fmt: skip
    return storage, CodeSnapshot(uri=uri, sha256=snapshot.sha256)


def test_the_runtime_fetches_checks_and_extracts_what_the_sdk_stored(
    tmp_path: Path, make_doc: object
) -> None:
    storage, snapshot = _stored(tmp_path, _project(tmp_path / "proj"))
    assert snapshot.uri == f"{storage}/code/{snapshot.sha256}.zip"
    directory = code.fetch(_contract(make_doc, storage, snapshot), root=tmp_path / "extract")
    assert directory == tmp_path / "extract" / snapshot.sha256
    files = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
    assert files == [
        ".gitignore",
        "data/offset.txt",
        "mytrain/__init__.py",
        "mytrain/helper.py",
        "mytrain/loop.py",
    ]
    # A second fetch of the same hash reuses the extracted tree.
    assert (
        code.fetch(_contract(make_doc, storage, snapshot), root=tmp_path / "extract") == directory
    )


def test_an_archive_replaced_after_submission_is_refused(tmp_path: Path, make_doc: object) -> None:
    storage, snapshot = _stored(tmp_path, _project(tmp_path / "proj"))
    other = _code.pack(_project(tmp_path / "other", offset=7))
    Path(snapshot.uri).write_bytes(other.data)
    with pytest.raises(code.CodeError) as caught:
        code.fetch(_contract(make_doc, storage, snapshot), root=tmp_path / "extract")
    message = str(caught.value)
    assert f"SHA-256 is {other.sha256}" in message
    assert f"records {snapshot.sha256} (spec.code.sha256)" in message
    assert "raytrain submit FILE --code DIR" in message
    assert not (tmp_path / "extract" / snapshot.sha256).exists()


def test_a_missing_archive_says_so_and_how_to_fix_it(tmp_path: Path, make_doc: object) -> None:
    storage, snapshot = _stored(tmp_path, _project(tmp_path / "proj"))
    Path(snapshot.uri).unlink()
    with pytest.raises(code.CodeError, match=r"no such archive in the job's storage .*\(raytrain "
                       r"submit FILE --code DIR\)"):  # fmt: skip
        code.fetch(_contract(make_doc, storage, snapshot), root=tmp_path / "extract")


def test_an_archive_with_a_member_outside_its_root_is_refused(
    tmp_path: Path, make_doc: object
) -> None:
    storage = tmp_path / "storage"
    archive = storage / "code" / "evil.zip"
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../escaped.py", "print('no')\n")
    import hashlib

    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    final = archive.with_name(f"{digest}.zip")
    archive.rename(final)
    snapshot = CodeSnapshot(uri=str(final), sha256=digest)
    with pytest.raises(code.CodeError, match=r"'\.\./escaped\.py', outside its root"):
        code.fetch(_contract(make_doc, storage, snapshot), root=tmp_path / "extract")
    assert not (tmp_path / "escaped.py").exists()


def test_a_contract_without_code_needs_nothing(tmp_path: Path, make_doc: object) -> None:
    assert code.prepare(_contract(make_doc, tmp_path / "storage", None)) is None


def test_the_contract_carries_the_snapshot_only_when_there_is_one(make_doc: object) -> None:
    doc = make_doc(storage={"type": "pvc", "path": "/data"})  # type: ignore[operator]
    assert "code" not in doc  # documents without it still parse in older runtimes
    sha = "a" * 64
    doc["code"] = {"uri": "s3://b/p/code/x.zip", "sha256": sha}
    assert load_contract(doc).code == CodeSnapshot(uri="s3://b/p/code/x.zip", sha256=sha)
    with pytest.raises(ValueError):
        TypeAdapter(CodeSnapshot).validate_python({"uri": "relative.zip", "sha256": sha})


def _manifest(path: Path) -> Path:
    path.write_text(
        textwrap.dedent(
            """
            apiVersion: raytrain.dev/v1alpha1
            kind: TrainJob
            metadata:
              name: mine
            spec:
              image: raytrain/trainer-runtime:0.1.0
              entrypoint: mytrain.loop:train
              scaling:
                numWorkers: 2
                resourcesPerWorker: {cpu: "0.5"}
              storage:
                pvc: {claimName: unused, mountPath: /data}
            """
        )
    )
    return path


def _answers(storage: Path) -> list[list[int]]:
    """The `answer`s each stored attempt reported, attempt by attempt (a worker that could not
    import the snapshot fails the run, so a Succeeded run means every rank imported it)."""
    found = []
    for metrics in sorted(storage.glob("*/attempt-*/metrics.jsonl")):
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        found.append(
            sorted({int(r["metrics"]["answer"]) for r in rows if "answer" in r["metrics"]})
        )
    return found


@pytest.mark.long
def test_a_local_run_trains_from_a_folder_in_no_image_and_runs_an_edited_line(
    tmp_path: Path,
) -> None:
    """`raytrain run FILE --local --code DIR` twice, with one line of DIR edited between."""
    project = _project(tmp_path / "proj")
    manifest = _manifest(tmp_path / "job.yaml")
    storage = tmp_path / "store"
    cwd = tmp_path / "elsewhere"  # not the project: the modules come from the snapshot only
    cwd.mkdir()
    env = {**os.environ, "RAYTRAIN_CODE_DIR": str(tmp_path / "extract")}
    env.pop("PYTHONPATH", None)
    command = [sys.executable, "-m", "raytrain.cli", "run", str(manifest), "--local", "--quiet",
               "--storage-path", str(storage), "--code", str(project)]  # fmt: skip

    first = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=600, check=False)  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    assert _answers(storage) == [[42]], first.stderr[-3000:]
    hashes = [p.name for p in (storage / "code").iterdir()]
    assert len(hashes) == 1

    (project / "mytrain" / "helper.py").write_text("def answer() -> int:\n    return 99\n")
    second = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=600, check=False)  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    assert _answers(storage) == [[42], [100]]
    assert len(list((storage / "code").iterdir())) == 2
