"""`raytrain run FILE --local`: the TrainJob in FILE on this machine's Ray, no Kubernetes.

The contract is rendered by the same builder the operator uses for the ConfigMap it mounts into
the pods, then adjusted for one machine: CPU workers (a GPU request is dropped with a note),
checkpoints in a local directory or on an S3 endpoint, progress on the console instead of the
TrainJob's status. The run name is derived from the manifest's namespace and name, so running
the same manifest again resumes from its latest checkpoint; `--new-run` starts over in a new run
(the old run's checkpoints stay where they are). `--torchrun` runs the loop in one process per
worker under torchrun instead, with no Ray actors (Ray Train's local mode, for debugging).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import yaml
from pydantic import ValidationError

from raytrain.errors import InvalidJobError
from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import API_VERSION, KIND, TrainJob
from raytrain_contract.meta import Meta

#: Namespace of the local run's stand-in UID: uuid5(LOCAL_UID_NAMESPACE, "<namespace>/<name>").
LOCAL_UID_NAMESPACE = uuid.UUID("5b0f6f0e-9d5e-4c1a-9a43-6f1f3c0b7a11")
DEFAULT_STORAGE_DIR = ".raytrain/storage"


class LocalRunError(ValueError):
    """A manifest or option that cannot be run locally; the message names what to fix."""


def runtime_missing(exc: ImportError) -> str:
    """What to install when a local run finds the operator or the runtime missing: the SDK's
    own distribution has neither (it installs without kopf, Ray or torch)."""
    return (
        f"--local trains on this machine with the operator's contract renderer and the trainer "
        f"runtime, and {exc.name or exc} is not installed: install them from a clone of "
        "raytrain-operator with pip install ./contract '.[runtime]' (make install does), "
        "or submit the job to a cluster instead (raytrain submit FILE)"
    )


def load_manifest(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The first TrainJob document in `path`, and every other document (Secrets, PVCs...)."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LocalRunError(f"{path}: cannot read the manifest ({exc.strerror})") from exc
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise LocalRunError(f"{path}: not valid YAML: {exc}") from exc
    trainjob: dict[str, Any] | None = None
    others: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict):
            raise LocalRunError(f"{path}: every document must be a mapping, got {doc!r:.60}")
        if trainjob is None and doc.get("kind") == KIND and doc.get("apiVersion") == API_VERSION:
            trainjob = doc
        else:
            others.append(doc)
    if trainjob is None:
        raise LocalRunError(
            f"{path}: no document with apiVersion: {API_VERSION} and kind: {KIND}; "
            "pass a TrainJob manifest (see examples/digits.yaml)"
        )
    return trainjob, others


def template_spec(doc: Mapping[str, Any], others: list[dict[str, Any]]) -> Mapping[str, Any]:
    """The spec of the template the TrainJob names, from the manifest's other documents (a
    local run reads no cluster); {} without spec.template."""
    found = templates.find_in(doc.get("spec") or {}, others)
    if found is None:
        kind, name = templates.reference(doc.get("spec") or {}) or ("", "")
        raise LocalRunError(
            f"spec.template names {kind} {name!r}, which is not in the manifest: a local run "
            "reads no cluster, so add the template to the file as a document of its own (---), "
            "or remove spec.template"
        )
    return found


def parse_trainjob(
    doc: Mapping[str, Any], others: list[dict[str, Any]] | None = None
) -> tuple[TrainJob, Meta]:
    metadata = dict(doc.get("metadata") or {})
    if not metadata.get("name"):
        raise LocalRunError("metadata.name: the TrainJob has no name; set metadata.name")
    spec = templates.merge(template_spec(doc, others or []), doc.get("spec") or {})
    try:
        trainjob = TrainJob.model_validate({"metadata": metadata, "spec": spec})
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            lines.append(f"  {where}: {err['msg']}")
        message = "the TrainJob is not valid; fix these fields:\n" + "\n".join(lines)
        raise LocalRunError(message) from None
    return trainjob, Meta.from_metadata(metadata)


def local_uid(meta: Meta, *, new_run: bool) -> str:
    """A stable stand-in for the API server's UID, so a second run resumes the first."""
    if new_run:
        return str(uuid.uuid4())
    return str(uuid.uuid5(LOCAL_UID_NAMESPACE, f"{meta.namespace}/{meta.name}"))


def local_storage(
    trainjob: TrainJob, storage_path: str | None, s3_endpoint: str | None, cwd: pathlib.Path
) -> dict[str, Any]:
    """The contract's storage section for a local run."""
    s3 = trainjob.spec.storage.s3
    region = s3.region if s3 is not None else None
    if storage_path is None and s3_endpoint is not None:
        if s3 is None:
            raise LocalRunError(
                "--s3-endpoint: the TrainJob stores checkpoints on a PVC (spec.storage.pvc); "
                "also pass --storage-path s3://bucket/prefix"
            )
        storage_path = s3.uri
    if storage_path is None:
        storage_path = DEFAULT_STORAGE_DIR
    if storage_path.startswith("s3://"):
        if len(storage_path) <= len("s3://"):
            raise LocalRunError("--storage-path: expected s3://bucket[/prefix]")
        endpoint = s3_endpoint or os.environ.get("AWS_ENDPOINT_URL")
        return {"type": "s3", "path": storage_path, "endpoint": endpoint, "region": region}
    if "://" in storage_path:
        raise LocalRunError(
            f"--storage-path: {storage_path!r} is neither a directory nor s3://bucket/prefix"
        )
    directory = (cwd / storage_path).resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalRunError(
            f"--storage-path: cannot create {directory} ({exc.strerror}); choose a writable "
            "directory"
        ) from exc
    return {"type": "pvc", "path": str(directory)}


def local_contract(
    trainjob: TrainJob,
    meta: Meta,
    *,
    storage: dict[str, Any],
    workers: int | None = None,
    epochs: int | None = None,
    new_run: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """The contract document for a local run, and notes on what was changed for this machine."""
    notes: list[str] = []
    uid_meta = dataclasses.replace(meta, uid=local_uid(meta, new_run=new_run))
    resume = trainjob.spec.resume_from
    if resume is not None and resume.train_job:
        raise LocalRunError(
            f"spec.resumeFrom.trainJob: {resume.train_job!r} names a TrainJob in a cluster, "
            "which a local run cannot read; set spec.resumeFrom.checkpoint to the checkpoint "
            "directory instead (a local path, or an s3:// URI with AWS_* in the environment)"
        )
    try:
        from raytrain_operator.builders.contract import render_contract
    except ImportError as exc:
        raise LocalRunError(runtime_missing(exc)) from exc
    document = render_contract(
        trainjob, uid_meta, attempt=0, resume_from=resume.checkpoint if resume else None
    )
    scaling = document["scaling"]
    resources = dict(scaling["resourcesPerWorker"])
    if scaling["useGpu"] or "GPU" in resources:
        notes.append("GPU requested by the manifest; this local run trains on the CPU")
    scaling["useGpu"] = False
    scaling["acceleratorType"] = None
    # Ray on one machine schedules CPUs only; memory and custom resources would never fit.
    scaling["resourcesPerWorker"] = {"CPU": resources.get("CPU", 1.0)}
    if document["torch"]["backend"] == "nccl":
        document["torch"]["backend"] = "gloo"
        notes.append("torch.backend nccl needs GPUs; using gloo")
    if workers is not None:
        if workers < 1:
            raise LocalRunError(f"--workers: must be at least 1, got {workers}")
        scaling.update(numWorkers=workers, minWorkers=None, maxWorkers=None)
    elif scaling["numWorkers"] is None:
        scaling.update(numWorkers=scaling["minWorkers"], minWorkers=None, maxWorkers=None)
        notes.append(f"elastic scaling runs locally with minWorkers={scaling['numWorkers']}")
    if epochs is not None:
        if epochs < 1:
            raise LocalRunError(f"--epochs: must be at least 1, got {epochs}")
        document["config"]["epochs"] = epochs
    document["storage"] = storage
    # Progress goes to the console; there is no TrainJob object to patch.
    document["report"]["enabled"] = False
    return document, notes


def secret_env(trainjob: TrainJob, others: list[dict[str, Any]]) -> dict[str, str]:
    """AWS credentials from the manifest's own Secret named by storage.s3.credentialsSecret.

    Read under the key names credentialsSecret gives (accessKeyIdKey, secretAccessKeyKey,
    sessionTokenKey), as the pods' secretKeyRefs are: a Secret with custom key names works
    locally exactly as in the cluster. A key the Secret lacks is an error, as it is for a pod.
    Empty when the manifest does not carry that Secret (the environment may hold credentials).
    """
    s3 = trainjob.spec.storage.s3
    if s3 is None or s3.credentials_secret is None:
        return {}
    ref = s3.credentials_secret
    wanted = {
        "AWS_ACCESS_KEY_ID": ("accessKeyIdKey", ref.access_key_id_key),
        "AWS_SECRET_ACCESS_KEY": ("secretAccessKeyKey", ref.secret_access_key_key),
    }
    if ref.session_token_key:
        wanted["AWS_SESSION_TOKEN"] = ("sessionTokenKey", ref.session_token_key)
    for doc in others:
        if doc.get("kind") != "Secret" or (doc.get("metadata") or {}).get("name") != ref.name:
            continue
        values: dict[str, str] = {}
        for key, value in (doc.get("data") or {}).items():
            values[key] = base64.b64decode(str(value)).decode()
        values.update({k: str(v) for k, v in (doc.get("stringData") or {}).items()})
        env: dict[str, str] = {}
        for var, (field, key) in wanted.items():
            if key not in values:
                raise LocalRunError(
                    f"spec.storage.s3.credentialsSecret.{field}: the Secret {ref.name!r} in the "
                    f"manifest has no key {key!r} (it has {sorted(values)}); add {key!r} to the "
                    f"Secret, or set {field} to the key that holds it"
                )
            env[var] = values[key]
        return env
    return {}


def local_code(
    directory: str, storage: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, str]:
    """The contract's code section for ``--code DIR``: DIR packed and stored as a cluster job's
    snapshot would be, under the local run's storage (a directory, or S3 with its endpoint)."""
    from raytrain import _code

    snapshot = _code.pack(directory)
    if storage["type"] == "s3":
        credentials = {
            "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID", ""),
            "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY", ""),
            "aws_session_token": env.get("AWS_SESSION_TOKEN", ""),
        }
        target = _code.S3Target(
            storage.get("endpoint"),
            storage.get("region"),
            {k: v for k, v in credentials.items() if v},
        )
        uri = snapshot.uri_under(str(storage["path"]))
        _code.upload_s3(snapshot, uri, target)
    else:
        spec: dict[str, Any] = {}
        uri = _code.attach(spec, snapshot, storage={"pvc": {"mountPath": storage["path"]}},
                           local_storage=True)  # fmt: skip
    return {"uri": uri, "sha256": snapshot.sha256}


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def run_local_command(args: argparse.Namespace) -> int:
    err = sys.stderr
    try:
        doc, others = load_manifest(args.file)
        trainjob, meta = parse_trainjob(doc, others)
        storage = local_storage(trainjob, args.storage_path, args.s3_endpoint, pathlib.Path.cwd())
        document, notes = local_contract(
            trainjob,
            meta,
            storage=storage,
            workers=args.workers,
            epochs=args.epochs,
            new_run=args.new_run,
        )
        # Credentials already in the environment win over the manifest's Secret.
        env = {}
        if storage["type"] == "s3":
            env = {k: v for k, v in secret_env(trainjob, others).items() if k not in os.environ}
        if args.code:
            document["code"] = local_code(args.code, storage, env)
    except (LocalRunError, InvalidJobError) as exc:
        print(f"raytrain run: {exc}", file=err)
        return 2
    try:
        from raytrain_contract import ContractError, load_contract
        from trainer_runtime.local import run_local
    except ImportError as exc:
        print(f"raytrain run: {runtime_missing(exc)}", file=err)
        return 2
    try:
        contract = load_contract(document)
    except ContractError as exc:
        print(f"raytrain run: {exc}", file=err)
        return 2
    if getattr(args, "torchrun", False):
        return run_torchrun(document, contract, meta, notes, env, quiet=args.quiet)
    where = storage["path"] + (f" at {storage['endpoint']}" if storage.get("endpoint") else "")
    if not args.quiet:
        print(f"TrainJob {meta.namespace}/{meta.name}: run {contract.run_name}", file=err)
        print(f"  checkpoints: {where}", file=err)
        if contract.code is not None:
            print(f"  code: {contract.code.uri} (sha256 {contract.code.sha256})", file=err)
        for note in notes:
            print(f"  note: {note}", file=err)
    with _environment(env):
        return run_local(
            contract, display=not args.quiet, ray_logs=args.ray_logs, continue_run=True
        )


def run_torchrun(
    document: dict[str, Any],
    contract: Any,
    meta: Meta,
    notes: list[str],
    env: Mapping[str, str],
    *,
    quiet: bool,
) -> int:
    """The contract's loop in one process per worker under torchrun, no Ray actors (--torchrun)."""
    from trainer_runtime.torchrun import TorchrunError, check, processes, torchrun_argv

    err = sys.stderr
    nproc = processes(contract)
    try:
        check(contract, nproc)
    except TorchrunError as exc:
        print(f"raytrain run --torchrun: {exc}", file=err)
        return 2
    if not quiet:
        print(f"TrainJob {meta.namespace}/{meta.name}: run {contract.run_name}", file=err)
        print(f"  torchrun: {nproc} processes, Ray Train local mode", file=err)
        print(
            "  note: checkpoints stay in the processes; nothing is saved, nothing resumes", file=err
        )
        for note in notes:
            print(f"  note: {note}", file=err)
    with tempfile.TemporaryDirectory(prefix="raytrain-torchrun-") as tmp:
        path = pathlib.Path(tmp) / "contract.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        child_env = {**os.environ, **env, "RAY_TRAIN_V2_ENABLED": "1"}
        try:
            proc = subprocess.run(torchrun_argv(str(path), nproc), env=child_env, check=False)
        except KeyboardInterrupt:
            return 130
    return proc.returncode
