"""`raytrain run --local`: manifest loading, the contract it renders, and its error messages.

The training itself runs in tests/runtime/test_cli_run_local.py; here nothing starts Ray.
"""

from __future__ import annotations

import base64
import pathlib
import sys

import pytest

from raytrain.cli import local, main
from raytrain_contract import load_contract

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits.yaml"
DIGITS_S3 = ROOT / "examples" / "digits-s3.yaml"
DIGITS_PVC = ROOT / "examples" / "digits-pvc.yaml"
TEMPLATE = ROOT / "examples" / "template.yaml"


def _parsed(path: pathlib.Path) -> tuple[local.TrainJob, local.Meta, list[dict[str, object]]]:
    doc, others = local.load_manifest(str(path))
    trainjob, meta = local.parse_trainjob(doc)
    return trainjob, meta, others


def test_load_manifest_finds_the_trainjob_among_other_objects() -> None:
    doc, others = local.load_manifest(str(DIGITS))
    assert doc["kind"] == "TrainJob"
    assert [o["kind"] for o in others] == ["Secret"]


def test_a_local_run_takes_the_template_from_the_same_file(tmp_path: pathlib.Path) -> None:
    doc, others = local.load_manifest(str(TEMPLATE))
    trainjob, meta = local.parse_trainjob(doc, others)
    assert meta.name == "digits-from-template"
    assert trainjob.spec.image == "raytrain/trainer-runtime:0.1.0"
    assert trainjob.spec.scaling.num_workers == 2
    assert trainjob.spec.config == {"batch_size": 64, "hidden": 128, "epochs": 4, "lr": 0.05}
    assert trainjob.spec.backoff_limit == 1

    alone = tmp_path / "job.yaml"
    alone.write_text(TEMPLATE.read_text().split("---\n")[-1])
    doc, others = local.load_manifest(str(alone))
    with pytest.raises(local.LocalRunError, match=r"ClusterTrainJobTemplate 'cpu-digits', which"):
        local.parse_trainjob(doc, others)


def test_a_manifest_without_a_trainjob_says_what_to_pass(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(local.LocalRunError, match=r"no document with apiVersion: raytrain\.dev"):
        local.load_manifest(str(path))


def test_missing_file_and_bad_yaml_are_named(tmp_path: pathlib.Path) -> None:
    with pytest.raises(local.LocalRunError, match="cannot read the manifest"):
        local.load_manifest(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    with pytest.raises(local.LocalRunError, match="not valid YAML"):
        local.load_manifest(str(bad))


def test_an_invalid_spec_names_every_broken_field(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: raytrain.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: x}\n"
        "spec:\n  image: img\n  entrypoint: m:f\n  scaling: {numWorkers: 0}\n"
        "  storage: {pvc: {claimName: c}}\n  bogus: 1\n"
    )
    doc, _ = local.load_manifest(str(path))
    with pytest.raises(local.LocalRunError) as info:
        local.parse_trainjob(doc)
    text = str(info.value)
    assert "spec.scaling.numWorkers" in text
    assert "spec.bogus" in text


def test_the_local_uid_is_stable_unless_a_new_run_is_asked_for() -> None:
    _, meta, _ = _parsed(DIGITS)
    assert local.local_uid(meta, new_run=False) == local.local_uid(meta, new_run=False)
    assert local.local_uid(meta, new_run=True) != local.local_uid(meta, new_run=False)


def test_default_storage_is_a_local_directory(tmp_path: pathlib.Path) -> None:
    trainjob, _, _ = _parsed(DIGITS)
    storage = local.local_storage(trainjob, None, None, tmp_path)
    assert storage == {"type": "pvc", "path": str(tmp_path / ".raytrain" / "storage")}
    assert (tmp_path / ".raytrain" / "storage").is_dir()


def test_an_s3_endpoint_keeps_the_manifests_bucket_and_region(tmp_path: pathlib.Path) -> None:
    trainjob, _, _ = _parsed(DIGITS)
    storage = local.local_storage(trainjob, None, "http://127.0.0.1:9000", tmp_path)
    assert storage == {
        "type": "s3",
        "path": "s3://raytrain/checkpoints",
        "endpoint": "http://127.0.0.1:9000",
        "region": "us-east-1",
    }


def test_an_s3_endpoint_for_a_pvc_job_needs_a_storage_path(tmp_path: pathlib.Path) -> None:
    trainjob, _, _ = _parsed(DIGITS_PVC)
    with pytest.raises(local.LocalRunError, match="--storage-path s3://"):
        local.local_storage(trainjob, None, "http://127.0.0.1:9000", tmp_path)
    storage = local.local_storage(trainjob, "s3://b/p", "http://127.0.0.1:9000", tmp_path)
    assert storage["path"] == "s3://b/p"


def test_a_storage_path_that_is_neither_is_refused(tmp_path: pathlib.Path) -> None:
    trainjob, _, _ = _parsed(DIGITS)
    with pytest.raises(local.LocalRunError, match="neither a directory nor s3://"):
        local.local_storage(trainjob, "gs://bucket/x", None, tmp_path)


def test_the_local_contract_runs_on_cpus_and_parses_in_the_runtime(tmp_path: pathlib.Path) -> None:
    trainjob, meta, _ = _parsed(DIGITS_S3)  # GPUs, an accelerator type, nccl
    storage = local.local_storage(trainjob, None, None, tmp_path)
    document, notes = local.local_contract(trainjob, meta, storage=storage, workers=2, epochs=3)
    contract = load_contract(document)
    assert contract.scaling.use_gpu is False
    assert contract.scaling.accelerator_type is None
    assert set(contract.scaling.resources_per_worker) == {"CPU"}
    assert contract.scaling.num_workers == 2
    assert contract.torch.backend == "gloo"
    assert contract.config["epochs"] == 3
    assert contract.storage.type == "pvc"
    assert contract.report.enabled is False
    assert any("GPU" in note for note in notes)


def test_two_local_runs_of_one_manifest_share_a_run_name(tmp_path: pathlib.Path) -> None:
    trainjob, meta, _ = _parsed(DIGITS)
    storage = local.local_storage(trainjob, None, None, tmp_path)
    first, _ = local.local_contract(trainjob, meta, storage=storage)
    again, _ = local.local_contract(trainjob, meta, storage=storage)
    fresh, _ = local.local_contract(trainjob, meta, storage=storage, new_run=True)
    assert first["runName"] == again["runName"]
    assert fresh["runName"] != first["runName"]


def test_bad_overrides_are_named(tmp_path: pathlib.Path) -> None:
    trainjob, meta, _ = _parsed(DIGITS)
    storage = local.local_storage(trainjob, None, None, tmp_path)
    with pytest.raises(local.LocalRunError, match="--workers: must be at least 1"):
        local.local_contract(trainjob, meta, storage=storage, workers=0)
    with pytest.raises(local.LocalRunError, match="--epochs: must be at least 1"):
        local.local_contract(trainjob, meta, storage=storage, epochs=0)


def test_credentials_come_from_the_manifests_secret() -> None:
    trainjob, _, others = _parsed(DIGITS)
    assert local.secret_env(trainjob, others) == {
        "AWS_ACCESS_KEY_ID": "raytrain",
        "AWS_SECRET_ACCESS_KEY": "raytrain-secret",
    }


def _with_secret_keys(**keys: str) -> local.TrainJob:
    doc, _ = local.load_manifest(str(DIGITS))
    doc["spec"]["storage"]["s3"]["credentialsSecret"].update(keys)
    trainjob, _ = local.parse_trainjob(doc)
    return trainjob


def test_custom_secret_key_names_are_read_as_the_pods_read_them() -> None:
    trainjob = _with_secret_keys(
        accessKeyIdKey="access", secretAccessKeyKey="secret", sessionTokenKey="token"
    )
    secret = {
        "kind": "Secret",
        "metadata": {"name": "digits-s3"},
        "data": {
            "access": base64.b64encode(b"k").decode(),
            "secret": base64.b64encode(b"s").decode(),
        },
        # Keys named like the variables are not what the TrainJob points at: ignored.
        "stringData": {"token": "t", "AWS_ACCESS_KEY_ID": "not-this-one"},
    }
    assert local.secret_env(trainjob, [secret]) == {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_SESSION_TOKEN": "t",
    }


def test_a_key_missing_from_the_secret_names_the_field_and_the_fix() -> None:
    trainjob = _with_secret_keys(secretAccessKeyKey="secret")
    secret = {
        "kind": "Secret",
        "metadata": {"name": "digits-s3"},
        "stringData": {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
    }
    with pytest.raises(local.LocalRunError) as info:
        local.secret_env(trainjob, [secret])
    assert str(info.value) == (
        "spec.storage.s3.credentialsSecret.secretAccessKeyKey: the Secret 'digits-s3' in the "
        "manifest has no key 'secret' (it has ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY']); "
        "add 'secret' to the Secret, or set secretAccessKeyKey to the key that holds it"
    )


def test_the_command_stops_on_a_missing_secret_key_before_training(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = DIGITS.read_text().replace(
        "        name: digits-s3\n", "        name: digits-s3\n        secretAccessKeyKey: secret\n"
    )
    assert "secretAccessKeyKey: secret" in text
    path = tmp_path / "digits.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--local", "--s3-endpoint", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "raytrain run: spec.storage.s3.credentialsSecret.secretAccessKeyKey:" in err


def test_a_manifest_without_the_secret_leaves_credentials_to_the_environment() -> None:
    trainjob, _, _ = _parsed(DIGITS)
    assert local.secret_env(trainjob, []) == {}


def test_the_command_exits_2_with_the_message(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("---\n")
    assert main(["run", str(path), "--local"]) == 2
    assert "raytrain run:" in capsys.readouterr().err


# -- --torchrun ------------------------------------------------------------------------------------


@pytest.mark.runtime
def test_torchrun_starts_one_process_per_worker_on_the_rendered_contract(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import subprocess

    seen: dict[str, object] = {}

    def fake_run(argv: list[str], env: dict[str, str], check: bool) -> object:
        contract = argv[argv.index("--contract") + 1]
        seen.update(argv=argv, env=env, document=json.loads(pathlib.Path(contract).read_text()))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(local.subprocess, "run", fake_run)
    store = tmp_path / "store"
    assert main(["run", str(DIGITS), "--local", "--torchrun", "--storage-path", str(store)]) == 0
    argv = seen["argv"]
    assert isinstance(argv, list)
    assert argv[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert argv[5:7] == ["-m", "trainer_runtime"] and argv[-1] == "--torchrun"
    env = seen["env"]
    assert isinstance(env, dict) and env["RAY_TRAIN_V2_ENABLED"] == "1"
    document = seen["document"]
    assert isinstance(document, dict)
    assert document["entrypoint"] == "examples.digits.train:train_loop_per_worker"
    assert document["torch"]["backend"] == "gloo" and document["report"]["enabled"] is False
    err = capsys.readouterr().err
    assert "torchrun: 2 processes" in err and "nothing resumes" in err


@pytest.mark.runtime
def test_torchrun_refuses_datasets_in_more_than_one_process(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = DIGITS_PVC.read_text() + ("  datasets:\n    train:\n      uri: /data/train.parquet\n")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    monkeypatch.setattr(local.subprocess, "run", lambda *a, **k: pytest.fail("started"))
    args = ["run", str(path), "--local", "--torchrun", "--storage-path", str(tmp_path / "s")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "raytrain run --torchrun: spec.datasets ('train')" in err
    assert "pass --workers 1, or drop --torchrun" in err


@pytest.mark.parametrize(
    "missing", ["raytrain_operator.builders.contract", "trainer_runtime.local"]
)
def test_without_the_operator_or_the_runtime_it_says_what_to_install(
    missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK installs without the operator and the runtime (sdk/pyproject.toml); a local run
    then stops before training and names what to install."""
    monkeypatch.setitem(sys.modules, missing, None)  # `import` of it now fails
    assert main(["run", str(DIGITS), "--local"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("raytrain run: --local trains on this machine")
    assert f"{missing} is not installed" in err
    assert "pip install ./contract '.[runtime]'" in err
