"""The operator and trainer-runtime images, built from our Dockerfile by e2e/images/build.sh.

Each archive is loaded into buildah's store and run without network by e2e/images/check.sh:
the operator as uid 10001 answers `python -m raytrain_operator --help`; the runtime as uid
1000 imports torch, Ray and trainer_runtime and has `ray`, `wget` and `tini`. The operator
archive is then imported into a private containerd with e2e/images/import.sh.

The runtime with the framework packages (target trainer-runtime-frameworks) imports Transformers,
Accelerate, Lightning and both framework examples, and passes `pip check`.

The archives come from `build.sh --check` (current for the tree as it is) or from
RAYTRAIN_OPERATOR_ARCHIVE / RAYTRAIN_RUNTIME_ARCHIVE / RAYTRAIN_FRAMEWORKS_ARCHIVE. Missing
archives are built in a required run (tests/_required.py) or with RAYTRAIN_BUILD_IMAGES=1 (minutes
cold, and it needs PyPI and the Debian mirror: `make prereqs` does it before the tests);
otherwise these tests skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _required import required

# A cold build inside the fixture takes longer than the suite's default 900 s.
pytestmark = [pytest.mark.images, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "e2e" / "images"
CACHE = Path(os.environ.get("RAYTRAIN_CACHE", Path.home() / ".cache" / "raytrain"))


def _parse(output: str) -> dict[str, str]:
    """The KEY=VALUE words of build.sh's last three lines."""
    fields: dict[str, str] = {}
    for line in output.strip().splitlines()[-3:]:
        for word in line.split():
            key, _, value = word.partition("=")
            fields[key] = value
    return fields


@pytest.fixture(scope="module")
def archives() -> dict[str, str]:
    """Paths of the operator, runtime and frameworks archives (and the image names they
    carry)."""
    if not shutil.which("buildah"):
        message = "buildah is not installed (apt-get install --no-install-recommends buildah)"
        if required():
            pytest.fail(message)
        pytest.skip(message)
    given = {
        "OPERATOR_ARCHIVE": os.environ.get("RAYTRAIN_OPERATOR_ARCHIVE", ""),
        "RUNTIME_ARCHIVE": os.environ.get("RAYTRAIN_RUNTIME_ARCHIVE", ""),
        "FRAMEWORKS_ARCHIVE": os.environ.get("RAYTRAIN_FRAMEWORKS_ARCHIVE", ""),
    }
    if all(given.values()):
        return given
    check = subprocess.run(
        ["bash", str(IMAGES / "build.sh"), "--check"], capture_output=True, text=True
    )
    if check.returncode == 0:
        return _parse(check.stdout)
    if not (required() or os.environ.get("RAYTRAIN_BUILD_IMAGES") == "1"):
        pytest.skip(
            "no current image archives: run e2e/images/build.sh (or RAYTRAIN_BUILD_IMAGES=1)"
        )
    build = subprocess.run(
        ["bash", str(IMAGES / "build.sh")], capture_output=True, text=True, timeout=3600
    )
    assert build.returncode == 0, (
        "e2e/images/build.sh failed (it needs PyPI and the Debian mirror: run it, or make prereqs,"
        f" outside the test's network namespace first):\n{build.stderr[-4000:]}"
    )
    return _parse(build.stdout)


def test_constraints_are_pinned_for_pyproject_dependencies() -> None:
    """constraints.txt must be regenerated whenever pyproject.toml's dependency lists change."""
    deps_now = subprocess.run(
        [sys.executable, str(IMAGES / "deps_hash.py"), str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    header = [
        line.removeprefix("# pyproject-deps: ").strip()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.startswith("# pyproject-deps: ")
    ]
    assert header == [deps_now], (
        f"constraints.txt was pinned for pyproject dependencies {header}, pyproject.toml has"
        f" {deps_now} now: run `bash scripts/pin-constraints.sh` and commit constraints.txt"
    )


def _check(target: str, archive: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(IMAGES / "check.sh"), target, f"docker-archive:{archive}"],
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_operator_image_runs_as_10001(archives: dict[str, str]) -> None:
    result = _check("operator", archives["OPERATOR_ARCHIVE"])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "python -m raytrain_operator --help ok" in result.stdout


def test_runtime_image_runs_as_1000_with_torch_ray_wget_tini(archives: dict[str, str]) -> None:
    result = _check("trainer-runtime", archives["RUNTIME_ARCHIVE"])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "trainer-runtime: imports, ray, wget and tini ok" in result.stdout
    assert "tini version" in result.stdout


def test_frameworks_image_adds_transformers_and_lightning_to_the_runtime(
    archives: dict[str, str],
) -> None:
    """The Dockerfile's trainer-runtime-frameworks target: the two framework examples import,
    and pip finds no broken requirement with the runtime's pins."""
    result = _check("trainer-runtime-frameworks", archives["FRAMEWORKS_ARCHIVE"])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "trainer-runtime-frameworks: framework imports and pip check ok" in result.stdout
    assert "torch 2." in result.stdout and "ray 2." in result.stdout, result.stdout


def _containerd_dir() -> Path | None:
    found = sorted((CACHE / "realnode").glob("containerd-*/containerd"))
    return found[-1].parent if found else None


@pytest.fixture
def containerd() -> Iterator[tuple[Path, Path]]:
    """A private containerd (no CRI plugin, own root and socket): (socket, ctr)."""
    bindir = _containerd_dir()
    if bindir is None:
        message = "no containerd under ~/.cache/raytrain/realnode (e2e/realnode/build.sh)"
        if required():
            pytest.fail(message)
        pytest.skip(message)
    state = Path(tempfile.mkdtemp(prefix="raytrain-ctrd-"))
    sock = state / "containerd.sock"
    config = state / "config.toml"
    # Only the image services: the CRI plugin would want CNI and a stream server.
    config.write_text(
        "version = 3\n"
        f'root = "{state}/root"\nstate = "{state}/state"\n'
        f'[grpc]\n  address = "{sock}"\n'
        f'[ttrpc]\n  address = "{sock}.ttrpc"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",'
        ' "io.containerd.cri.v1.images", "io.containerd.nri.v1.nri"]\n'
    )
    log = (state / "containerd.log").open("w")
    # Its own network namespace: containerd opens no port, and this keeps it that way.
    proc = subprocess.Popen(
        [
            "bash",
            str(ROOT / "e2e" / "netns" / "run.sh"),
            str(bindir / "containerd"),
            "--config",
            str(config),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ctr = bindir / "ctr"
    pause = threading.Event()
    deadline = time.monotonic() + 60
    try:
        while subprocess.run(
            [str(ctr), "--address", str(sock), "version"], capture_output=True
        ).returncode:
            assert proc.poll() is None, (state / "containerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not answer within 60 s"
            pause.wait(0.2)
        yield sock, ctr
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()
        subprocess.run(["umount", "-R", str(state / "root")], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


def test_operator_archive_imports_into_containerd(
    archives: dict[str, str], containerd: tuple[Path, Path]
) -> None:
    sock, ctr = containerd
    result = subprocess.run(
        ["bash", str(IMAGES / "import.sh"), "-a", str(sock), archives["OPERATOR_ARCHIVE"]],
        capture_output=True,
        text=True,
        env={**os.environ, "CTR": str(ctr)},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    listed = subprocess.run(
        [str(ctr), "--address", str(sock), "--namespace", "k8s.io", "images", "ls", "-q"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert archives.get("OPERATOR_IMAGE", "docker.io/raytrain/operator:0.1.0") in listed
