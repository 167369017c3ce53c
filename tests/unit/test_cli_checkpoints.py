"""`raytrain checkpoints NAME [--verify]`: a run's checkpoints read from its S3 storage (moto's
S3 server here) and each checked against the manifest the runtime wrote, through
raytrain_contract.checkpoints and the SDK's boto3 store."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _ports import free_port
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from raytrain import TrainJobClient
from raytrain._code import S3Target
from raytrain._s3store import S3Store
from raytrain.checkpoints import EXIT_FAILED, EXIT_NONE_USABLE, EXIT_NOT_READABLE, EXIT_OK
from raytrain.cli import cluster, main
from raytrain.errors import StorageAccessError
from raytrain_contract import checkpoints as manifests

KEY, SECRET = "testing-key", "testing-secret"
RUN = "digits-0123456789ab"
OLD = "checkpoint_2026-11-20_10-00-00.000000"
NEW = "checkpoint_2026-11-20_11-00-00.000000"
FILES = {"model.pt": b"weights" * 300, "optim/state.pt": b"adam" * 100, "meta.json": b"{}"}


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This machine's AWS settings: keys in the environment, nothing else to find."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class Bucket:
    """One bucket of the moto server, and a run's checkpoints written into it."""

    def __init__(self, endpoint: str, name: str, tmp: Path) -> None:
        self.endpoint, self.name, self.tmp = endpoint, name, tmp
        self.store = S3Store(S3Target(endpoint, None, {}), credentials_from="the test's keys")
        self.s3: Any = self.store._client
        self.s3.create_bucket(Bucket=name)
        self.run = f"s3://{name}/ckpt/{RUN}"

    def uri(self, checkpoint: str) -> str:
        return f"{self.run}/{checkpoint}"

    def key(self, checkpoint: str, path: str) -> str:
        return f"ckpt/{RUN}/{checkpoint}/{path}"

    def checkpoint(
        self, name: str, *, epoch: int = 3, manifest: bool = True, attempt: int = 0
    ) -> None:
        """Store FILES as a checkpoint and, as the runtime does last, its manifest."""
        local = self.tmp / name
        for rel, data in FILES.items():
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / rel).write_bytes(data)
            self.s3.put_object(Bucket=self.name, Key=self.key(name, rel), Body=data)
        if manifest:
            entries = manifests.scan_local(str(local))
            manifests.write_manifest(
                self.store,
                self.uri(name),
                manifests.Manifest(
                    run=RUN,
                    checkpoint=name,
                    attempt=attempt,
                    epoch=epoch,
                    metrics={"accuracy": 0.9123456, "loss": 0.25, "note": "x"},
                    files=entries,
                    created="2026-11-20T11:00:05Z" if name == NEW else "2026-11-20T10:00:05Z",
                ),
            )

    def put(self, checkpoint: str, path: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.name, Key=self.key(checkpoint, path), Body=data)

    def delete(self, checkpoint: str, path: str) -> None:
        self.s3.delete_object(Bucket=self.name, Key=self.key(checkpoint, path))


@pytest.fixture
def bucket(
    moto_endpoint: str, aws_env: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Bucket:
    name = "b-" + request.node.name.lower().replace("_", "-")[:50].strip("-")
    return Bucket(moto_endpoint, name, tmp_path)


class _FakeCustom:
    def __init__(self, trainjob: dict[str, Any]) -> None:
        self.trainjob = trainjob

    def get_namespaced_custom_object(self, *args: Any) -> Any:
        return self.trainjob


class _FakeCore:
    """No Secret can be read (the user's account may not)."""

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        raise ApiException(status=403, reason="Forbidden")


def _trainjob(storage: dict[str, Any], checkpoint: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "digits", "namespace": "team-a", "uid": "01234567-89ab-cdef"},
        "spec": {"storage": storage, "checkpoint": {"scoreAttribute": "accuracy"}},
        "status": {"phase": "Running", "runName": RUN, "checkpoint": checkpoint},
    }


def _use(monkeypatch: pytest.MonkeyPatch, trainjob: dict[str, Any]) -> TrainJobClient:
    monkeypatch.setattr(client, "CustomObjectsApi", lambda api_client: _FakeCustom(trainjob))
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: _FakeCore())
    sdk = TrainJobClient("team-a", api_client=client.ApiClient())
    monkeypatch.setattr(cluster, "_client", lambda args: sdk)
    return sdk


def _s3_job(bucket: Bucket, **checkpoint: Any) -> dict[str, Any]:
    storage = {"s3": {"uri": f"s3://{bucket.name}/ckpt", "endpoint": bucket.endpoint}}
    return _trainjob(storage, checkpoint)


def _run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    trainjob: dict[str, Any],
    *args: str,
) -> tuple[int, str, str]:
    _use(monkeypatch, trainjob)
    code = main(["checkpoints", "digits", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name))


def test_a_good_checkpoint_is_ok_by_sizes_and_verified_by_checksums(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(OLD, epoch=2)
    bucket.checkpoint(NEW, epoch=3)
    job = _s3_job(bucket, latestURI=bucket.uri(NEW), bestURI=bucket.uri(OLD))
    code, out, err = _run(monkeypatch, capsys, job)
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0] == f"TrainJob team-a/digits, run {bucket.run}"
    assert lines[1].split()[:3] == ["CHECKPOINT", "TIME", "(UTC)"]
    # newest first, with its time, epoch, the score attribute first, files and bytes
    assert lines[2].startswith(NEW) and lines[3].startswith(OLD)
    size = sum(len(d) for d in FILES.values())
    assert _row(out, NEW).split() == [
        NEW, "2026-11-20", "11:00:05", "3", "accuracy=0.9123", "loss=0.25", "3",
        f"{size / 1024:.1f}", "KiB", "latest", "ok", "(sizes)",
    ]  # fmt: skip
    assert _row(out, OLD).split()[-3:] == ["best", "ok", "(sizes)"]
    assert "Checked by listing" in out

    code, out, err = _run(monkeypatch, capsys, job, "--verify")
    assert code == EXIT_OK, err
    assert _row(out, NEW).split()[-2:] == ["latest", "verified"]
    assert _row(out, OLD).split()[-2:] == ["best", "verified"]
    assert f"Verified: read {2 * size / 1024:.1f} KiB" in out


def test_a_truncated_file_fails_the_listing_check(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(OLD)
    bucket.checkpoint(NEW)
    bucket.put(NEW, "model.pt", FILES["model.pt"][:100])
    code, out, err = _run(monkeypatch, capsys, _s3_job(bucket))
    assert code == EXIT_FAILED
    assert _row(out, NEW).endswith(
        f"wrong size: file model.pt is 100 bytes, the manifest says {len(FILES['model.pt'])}"
    )
    assert _row(out, OLD).endswith("ok (sizes)")
    assert f"1 checkpoint(s) failed the check: {NEW} (size); exit 3" in " ".join(err.split())


def test_a_deleted_file_fails_the_listing_check(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(NEW)
    bucket.delete(NEW, "optim/state.pt")
    code, out, err = _run(monkeypatch, capsys, _s3_job(bucket))
    assert code == EXIT_FAILED
    assert _row(out, NEW).endswith("missing file: file optim/state.pt is missing")
    assert f"{NEW} (missing)" in err


def test_a_checkpoint_without_a_manifest_is_listed_but_not_usable(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(NEW, manifest=False)
    code, out, err = _run(monkeypatch, capsys, _s3_job(bucket))
    # an upload that never finished is not damage, but nothing can be resumed from
    assert code == EXIT_NONE_USABLE
    row = _row(out, NEW)
    assert row.split()[1:4] == ["2026-11-20", "11:00:00", "-"]  # the time of its name, no epoch
    assert row.split()[5] == "3"  # the files storage holds
    assert row.endswith("no manifest (.raytrain/manifest.json): its upload did not finish")
    assert "no checkpoint of run" in err and "exit 4" in err

    bucket.checkpoint(OLD)  # an older complete one: what a resume takes
    code, out, _ = _run(monkeypatch, capsys, _s3_job(bucket))
    assert code == EXIT_OK
    assert _row(out, OLD).endswith("ok (sizes)")


def test_a_changed_byte_of_the_same_size_is_caught_only_by_verify(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(NEW)
    data = bytearray(FILES["model.pt"])
    data[500] ^= 0xFF
    bucket.put(NEW, "model.pt", bytes(data))
    code, out, _ = _run(monkeypatch, capsys, _s3_job(bucket))
    assert code == EXIT_OK
    assert _row(out, NEW).endswith("ok (sizes)")

    code, out, err = _run(monkeypatch, capsys, _s3_job(bucket), "--verify")
    assert code == EXIT_FAILED
    state = _row(out, NEW).split("checksum mismatch: ", 1)[1]
    assert state.startswith("file model.pt has CRC32C ") and "the manifest says" in state
    assert f"{NEW} (checksum)" in err


def test_a_checkpoint_marked_rejected_shows_the_marks_reason(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(OLD)
    bucket.checkpoint(NEW)
    mark = {"reason": "file model.pt is 10 bytes, the manifest says 2100", "problem": "size",
            "attempt": 2, "by": "resume", "time": "2026-11-21T08:00:00Z"}  # fmt: skip
    bucket.store.write(manifests.meta_path(bucket.uri(NEW), manifests.REJECTED_NAME),
                       json.dumps(mark).encode())  # fmt: skip
    job = _s3_job(bucket, resumedFrom=bucket.uri(OLD))
    code, out, _ = _run(monkeypatch, capsys, job)
    # its files are whole again, but the mark stands until someone removes it
    assert _row(out, NEW).endswith(
        "marked rejected (attempt 2, 2026-11-21T08:00:00Z): file model.pt is 10 bytes, the "
        "manifest says 2100"
    )
    assert _row(out, NEW).split()[3] == "3"  # epoch and metrics still read from its manifest
    assert _row(out, OLD).split()[-3:] == ["resumed-from", "ok", "(sizes)"]
    assert code == EXIT_OK  # a known rejection is no new failure; the older one is usable


def test_a_pvc_job_says_this_machine_cannot_read_it_and_what_can(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], aws_env: None
) -> None:
    latest = f"/mnt/ckpt/{RUN}/{NEW}"
    job = _trainjob(
        {"pvc": {"claimName": "digits-ckpt", "mountPath": "/mnt/ckpt"}}, {"latestURI": latest}
    )
    job["status"]["rayClusterName"] = "digits-0-raycluster-x1"
    code, out, err = _run(monkeypatch, capsys, job)
    assert code == EXIT_NOT_READABLE
    assert f"Latest:   {latest}" in out  # what the status says is still shown
    text = " ".join(err.split())
    assert "PVC 'digits-ckpt' (spec.storage.pvc), which only pods mount" in text
    assert "status.checkpoint" in text
    assert "kubectl exec -n team-a -c ray-head" in text
    assert "ray.io/cluster=digits-0-raycluster-x1,ray.io/node-type=head" in text
    assert f'c.checkpoint_dirs(s, "/mnt/ckpt/{RUN}")' in text

    code, out, err = _run(monkeypatch, capsys, job, "-o", "json")
    assert code == EXIT_NOT_READABLE
    body = json.loads(out)
    assert body["latest_uri"] == latest and "only pods mount" in body["error"]


def test_json_lists_every_checkpoint_with_its_state_and_marks(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(OLD, epoch=2)
    bucket.checkpoint(NEW, epoch=3, attempt=1)
    bucket.delete(NEW, "meta.json")
    gone = bucket.uri("checkpoint_2026-11-19_09-00-00.000000")
    job = _s3_job(bucket, latestURI=bucket.uri(NEW), bestURI=gone, count=4, bestMetric="0.95")
    code, out, _ = _run(monkeypatch, capsys, job, "-o", "json", "--verify")
    assert code == EXIT_FAILED
    body = json.loads(out)
    assert body["run"] == bucket.run and body["checksums"] is True
    assert (body["latest_uri"], body["best_metric"], body["count"]) == (bucket.uri(NEW), "0.95", 4)
    new, old = body["checkpoints"]
    assert (new["name"], new["state"], new["usable"], new["latest"]) == (NEW, "missing", False,
                                                                           True)  # fmt: skip
    assert new["detail"] == "file meta.json is missing" and new["attempt"] == 1
    assert (old["name"], old["state"], old["usable"], old["epoch"]) == (OLD, "verified", True, 2)
    assert old["time"] == "2026-11-20T10:00:05+00:00"
    assert old["files"] == 3 and old["bytes"] == sum(len(d) for d in FILES.values())
    assert old["metrics"]["accuracy"] == 0.9123456 and old["uri"] == bucket.uri(OLD)
    assert body["not_in_storage"] == {"bestURI": gone}
    assert body["exit_code"] == EXIT_FAILED


def test_uri_output_reads_only_the_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], aws_env: None
) -> None:
    job = _trainjob(
        {"s3": {"uri": "s3://nowhere/ckpt", "endpoint": f"http://127.0.0.1:{free_port()}"}},
        {"latestURI": "s3://nowhere/ckpt/r/c2", "bestURI": "s3://nowhere/ckpt/r/c1"},
    )
    code, out, _ = _run(monkeypatch, capsys, job, "-o", "uri")
    assert code == 0 and out.splitlines() == ["s3://nowhere/ckpt/r/c2", "s3://nowhere/ckpt/r/c1"]


def test_no_credentials_names_what_to_set(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    job = _s3_job(bucket)
    job["spec"]["storage"]["s3"]["credentialsSecret"] = {"name": "digits-s3"}
    code, _, err = _run(monkeypatch, capsys, job)
    assert code == 1
    text = " ".join(err.split())
    assert f"listing {bucket.run}: Unable to locate credentials" in text
    assert "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)" in text
    assert "spec.storage.s3.credentialsSecret" in text


def test_an_unreachable_endpoint_names_s3_endpoint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], aws_env: None
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    job = _trainjob({"s3": {"uri": "s3://b/ckpt", "endpoint": closed}}, {})
    code, _, err = _run(monkeypatch, capsys, job)
    assert code == 1
    text = " ".join(err.split())
    assert f"cannot reach the S3 endpoint {closed}" in text
    assert "pass --s3-endpoint URL (or set AWS_ENDPOINT_URL)" in text


def test_s3_endpoint_overrides_the_jobs_own(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket.checkpoint(NEW)
    job = _s3_job(bucket)
    job["spec"]["storage"]["s3"]["endpoint"] = "http://minio.raytrain-system.invalid:9000"
    code, out, err = _run(monkeypatch, capsys, job, "--s3-endpoint", bucket.endpoint)
    assert code == EXIT_OK, err
    assert _row(out, NEW).endswith("ok (sizes)")


def test_listing_reads_every_page(bucket: Bucket) -> None:
    bucket.checkpoint(OLD)
    bucket.checkpoint(NEW)
    paged = S3Store(S3Target(bucket.endpoint, None, {}), credentials_from="keys", page_size=2)
    held = paged.sizes(bucket.run)
    assert len(held) == 2 * (len(FILES) + 1)  # 8 keys, 4 pages
    assert held == bucket.store.sizes(bucket.run)
    assert held[f"{NEW}/optim/state.pt"] == len(FILES["optim/state.pt"])
    assert manifests.checkpoint_dirs(paged, bucket.run) == [bucket.uri(NEW), bucket.uri(OLD)]


class _Refusing:
    """A boto3 client whose every call is refused, as S3 refuses a key without the right."""

    def __init__(self, code: str) -> None:
        self.code = code

    def get_paginator(self, name: str) -> Any:
        from botocore.exceptions import ClientError

        error = ClientError({"Error": {"Code": self.code, "Message": "no"}}, "ListObjectsV2")

        class Pages:
            def paginate(self, **kwargs: Any) -> Any:
                raise error

        return Pages()


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("AccessDenied", "They need s3:ListBucket and s3:GetObject on bucket 'b'"),
        ("InvalidAccessKeyId", "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        ("NoSuchBucket", "there is no bucket 'b' at http://s3.example; check the job's "
                         "spec.storage.s3.uri"),
    ],
)  # fmt: skip
def test_a_refusal_names_the_credentials_and_the_fix(code: str, says: str) -> None:
    store = S3Store(S3Target("http://s3.example", None, {}), credentials_from="your keys",
                    client=_Refusing(code))  # fmt: skip
    with pytest.raises(StorageAccessError) as info:
        store.sizes("s3://b/ckpt/run")
    assert says in str(info.value)
    if code != "NoSuchBucket":
        assert f"refused your keys ({code})" in str(info.value)


def test_help_says_verify_reads_every_byte(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["checkpoints", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "read every byte of every checkpoint" in text
    assert "3: a checkpoint failed its check" in text
