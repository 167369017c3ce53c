"""Packing a folder of training code into a snapshot (`raytrain submit FILE --code DIR`)."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from raytrain import _code
from raytrain.errors import InvalidJobError


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _names(snapshot: _code.Snapshot) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(snapshot.data)) as zf:
        return zf.namelist()


def test_the_same_files_give_the_same_hash_and_a_changed_line_another(tmp_path: Path) -> None:
    files = {"train.py": "def loop():\n    pass\n", "pkg/util.py": "X = 1\n"}
    one = _code.pack(_tree(tmp_path / "a", files))
    two = _code.pack(_tree(tmp_path / "b", files))
    os.utime(tmp_path / "b" / "train.py", (1, 1))  # times are not part of the snapshot
    assert _code.pack(tmp_path / "b").sha256 == one.sha256 == two.sha256
    (tmp_path / "b" / "pkg" / "util.py").write_text("X = 2\n")
    assert _code.pack(tmp_path / "b").sha256 != one.sha256
    assert one.uri_under("s3://bucket/ckpt/") == f"s3://bucket/ckpt/code/{one.sha256}.zip"


def test_gitignore_files_and_caches_are_left_out(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "train.py": "",
            ".gitignore": "data/\n*.ckpt\n",
            "data/big.csv": "1,2\n",
            "sub/data/also.csv": "ignored at any depth\n",
            "sub/model.ckpt": "",
            "sub/.gitignore": "local.py\n",
            "sub/local.py": "",
            "sub/kept.py": "",
            "local.py": "kept: the nested .gitignore applies below sub/ only\n",
            "__pycache__/train.cpython-311.pyc": "",
            "sub/old.pyc": "",
            ".git/HEAD": "ref\n",
        },
    )
    assert _names(_code.pack(root)) == [
        ".gitignore",
        "local.py",
        "sub/.gitignore",
        "sub/kept.py",
        "train.py",
    ]


def test_a_folder_over_the_limit_names_its_largest_files_and_the_fix(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"train.py": "", "weights.bin": "x" * 3000, "notes.txt": "y" * 10})
    with pytest.raises(InvalidJobError) as caught:
        _code.pack(root, max_bytes=2000)
    message = str(caught.value)
    assert "2.9 KiB of files, over the 2.0 KiB a code snapshot may hold" in message
    assert message.index("weights.bin") < message.index("notes.txt")
    assert ".gitignore" in message


def test_a_folder_without_python_or_a_file_is_refused(tmp_path: Path) -> None:
    _tree(tmp_path / "docs", {"README.md": "hi"})
    with pytest.raises(InvalidJobError, match="no Python file in it"):
        _code.pack(tmp_path / "docs")
    with pytest.raises(InvalidJobError, match="not a directory"):
        _code.pack(tmp_path / "docs" / "README.md")


def test_a_function_becomes_a_module_of_its_own(tmp_path: Path) -> None:
    def my_loop(config: dict[str, int]) -> None:
        import math

        print(math.sqrt(config["n"]))

    entrypoint = _code.function_source(my_loop, tmp_path / "fn")
    assert entrypoint == "raytrain_train_loop:my_loop"
    namespace: dict[str, object] = {}
    exec((tmp_path / "fn" / "raytrain_train_loop.py").read_text(), namespace)
    assert callable(namespace["my_loop"])
    with pytest.raises(InvalidJobError, match="named function"):
        _code.function_source(lambda c: None, tmp_path / "fn2")


def test_a_pvc_job_submitted_from_a_laptop_is_told_what_works(tmp_path: Path) -> None:
    snapshot = _code.pack(_tree(tmp_path, {"train.py": ""}))
    manifest: dict[str, object] = {"spec": {}}
    with pytest.raises(InvalidJobError, match=r"spec\.storage is a PVC, which this machine"):
        _code.attach(manifest, snapshot, storage={"pvc": {"mountPath": "/data"}})
    assert "code" not in manifest["spec"]  # type: ignore[operator]
