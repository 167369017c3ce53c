"""`make up`, your own code with `raytrain submit --code` through `make shell`, then `make down`.

The path the README gives a user who wants to train their own loop on this machine, command by
command as written: `make up` starts the demo's world and leaves it running; in the cluster's
shell (`bash scripts/shell.sh CMD`, the one-command form of `make shell`) the user places the
job on the real node (`python scripts/on_real_node.py`) and submits it with `--code DIR`, a
folder in no image; the job trains to Succeeded with its checkpoints in MinIO; one line edited
and submitted again with `--replace` runs the new line (no image build, no import); the README's
digits command trains too; `make down` leaves nothing running. The TrainJob sets no size: the
head and the workers keep the defaults the docs name, and on_real_node.py scales only CPU (the
node has two).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from _code_project import user_project
from test_make_demo import (
    CLUSTER,
    ROOT,
    STATE,
    demo_env,
    demo_ready,
    leftovers,
    remains,
)

__all__ = ["demo_ready"]

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.timeout(3600)]

#: digits.yaml's Secret (MinIO's key) and storage: what a user copies for a job of their own.
DIGITS = ROOT / "examples" / "digits.yaml"


def manifest(path: Path) -> Path:
    """digits.yaml with the folder's entrypoint and no size of its own: every size a default."""
    docs = [d for d in yaml.safe_load_all(DIGITS.read_text()) if d]
    for doc in docs:
        if doc.get("kind") == "TrainJob":
            doc["metadata"]["name"] = "mine"
            spec = doc["spec"]
            spec["entrypoint"] = "mytrain.loop:train"
            spec["config"] = {"epochs": 2}
            spec["scaling"] = {"numWorkers": 2}
            spec.pop("checkpoint", None)
            assert "head" not in spec and "workerTemplate" not in spec, spec
    path.write_text(yaml.safe_dump_all(docs))
    return path


def run(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    print(f"$ {' '.join(cmd)}  ({time.monotonic() - started:.0f} s, exit {proc.returncode})")
    return proc


def in_shell(script: str, env: dict[str, str], timeout: float = 900) -> str:
    """The commands a user types in `make shell`, run by its one-command form."""
    proc = run(["bash", "scripts/shell.sh", "bash", "-ec", script], env, timeout)
    assert proc.returncode == 0, f"{script}\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def trainjob(env: dict[str, str]) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(in_shell("kubectl get rtj mine -o json", env, timeout=120))
    return got


def answer(tj: dict[str, Any]) -> int:
    for m in tj["status"]["trainerStatus"]["metrics"]:
        if m["name"] == "answer":
            return int(float(m["value"]))
    raise AssertionError(f"no answer metric: {tj['status']['trainerStatus']}")


def test_make_up_trains_a_folder_in_no_image_and_runs_an_edited_line_then_make_down(
    demo_ready: None, tmp_path: Path
) -> None:
    env = demo_env()
    try:
        up = run(["make", "up"], env, timeout=2400)
        assert up.returncode == 0, up.stdout[-6000:] + up.stderr[-6000:]
        # What `make up` tells the user to do next.
        assert re.search(rf"KUBECONFIG=\S*{CLUSTER}\S*kubeconfig", up.stdout), up.stdout[-3000:]
        assert "make shell" in up.stdout and "make down" in up.stdout, up.stdout[-3000:]

        src = user_project(tmp_path / "src", answer=41)
        job = manifest(tmp_path / "mine.yaml")
        placed = tmp_path / "placed.yaml"
        submit = (
            f"python scripts/on_real_node.py {job} > {placed}\n"
            f"raytrain submit {placed} --code {src} -o json"
        )
        first = json.loads(in_shell(submit, env))[0]
        code = first["code"]
        assert re.fullmatch(r"[0-9a-f]{64}", code["sha256"]), first
        assert code["uri"] == f"s3://raytrain/checkpoints/code/{code['sha256']}.zip", code
        in_shell("raytrain wait mine --for Succeeded --timeout 1500", env, timeout=1600)
        done = trainjob(env)
        assert answer(done) == 42, done["status"]
        assert done["spec"]["code"] == code
        # Every size left at its default: the head's memory is the operator's default.
        assert "memory" not in json.dumps(done["spec"].get("scaling", {})), done["spec"]
        latest = done["status"]["checkpoint"]["latestURI"]
        assert latest.startswith("s3://raytrain/checkpoints/mine-"), latest
        # The snapshot and the checkpoints are in MinIO, as the shell's S3 endpoint reaches it.
        listing = in_shell(
            "python - <<'PY'\n"
            "import boto3, os\n"
            "s3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL_S3'],\n"
            "    aws_access_key_id='raytrain', aws_secret_access_key='raytrain-secret',\n"
            "    region_name='us-east-1')\n"
            "for o in s3.list_objects_v2(Bucket='raytrain', Prefix='checkpoints/')['Contents']:\n"
            "    print(o['Key'])\n"
            "PY",
            env,
            timeout=120,
        ).split()
        assert f"checkpoints/code/{code['sha256']}.zip" in listing, listing
        assert any(k.startswith("checkpoints/mine-") and "/checkpoint_" in k for k in listing)

        # One line edited, the same file submitted again: the new line runs.
        (src / "mytrain" / "helper.py").write_text("def answer() -> int:\n    return 99\n")
        again = json.loads(
            in_shell(f"raytrain submit {placed} --code {src} --replace -o json", env)
        )[0]
        assert again["code"]["sha256"] != code["sha256"], again
        in_shell("raytrain wait mine --for Succeeded --timeout 1500", env, timeout=1600)
        done = trainjob(env)
        assert answer(done) == 100, done["status"]
        assert done["spec"]["code"] == again["code"]
        logs = in_shell("raytrain logs mine --attempt 0", env, timeout=300)
        assert f"code: snapshot sha256:{again['code']['sha256']}" in logs, logs[-3000:]

        # The README's first command in the shell: the digits example, placed on the node.
        in_shell(
            "python scripts/on_real_node.py examples/digits.yaml | kubectl apply -f -\n"
            "kubectl wait --for=condition=Succeeded rtj/digits --timeout=900s",
            env,
            timeout=1000,
        )
    finally:
        down = run(["make", "down"], env, timeout=900)
        print(down.stdout[-3000:], down.stderr[-3000:])
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    assert leftovers(None) == []
    assert remains() == [], STATE
