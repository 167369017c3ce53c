"""The CLI's cluster commands, each a thin shell over `raytrain.TrainJobClient`.

What they print goes through `_say`: no rich markup is read from data (a `[...]` in a message
stays as it is) and no line break is inserted, so a long URI stays one piece when copied.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import yaml
from rich.console import Console
from rich.text import Text

from raytrain import RayTrainError, TrainJobClient
from raytrain.checkpoints import (
    EXIT_FAILED,
    EXIT_NONE_USABLE,
    EXIT_NOT_READABLE,
    CheckpointReport,
    StoredCheckpoint,
)
from raytrain.cli import render
from raytrain.errors import JobFailedError, StorageNotReadableError, WaitTimeoutError
from raytrain.models import Checkpoints, Event, TrainJob

console = Console()
errors = Console(stderr=True)


class CLIError(Exception):
    """A failure the user can act on; main prints it without a traceback."""


def _say(text: str, *, err: bool = False) -> None:
    (errors if err else console).print(text, markup=False, highlight=False, soft_wrap=True)


def _fail(message: str) -> None:
    errors.print(Text.assemble(("error: ", "red"), message), highlight=False, soft_wrap=True)


def _client(args: argparse.Namespace) -> TrainJobClient:
    return TrainJobClient(
        getattr(args, "namespace", None),
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
    )


def _json(value: Any) -> str:
    def default(obj: Any) -> Any:
        if isinstance(obj, dt.datetime):
            return obj.isoformat()
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON")

    return json.dumps(value, indent=2, default=default)


Command = Callable[[argparse.Namespace], int]


def _guard(func: Command) -> Command:
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (CLIError, RayTrainError) as exc:
            _fail(str(exc))
            return 1

    run.__doc__ = func.__doc__
    run.__name__ = func.__name__
    return run


@_guard
def submit(args: argparse.Namespace) -> int:
    """Create every object of the file; the API server's refusal is printed as it is."""
    from raytrain._manifest import read_documents

    sdk = _client(args)
    if args.code or args.replace:
        return _submit_job(sdk, args)
    created = [
        sdk.create_object(doc, namespace=args.namespace) for doc in read_documents(args.file)
    ]
    if args.output == "json":
        print(json.dumps(created, indent=2))
    else:
        for item in created:
            _say(f"{item['kind'].lower()}/{item['name']} created")
    return 0


def _submit_job(sdk: TrainJobClient, args: argparse.Namespace) -> int:
    """`submit FILE --code DIR` or `--replace`: the one TrainJob of FILE, through `train()`."""
    from raytrain._manifest import is_trainjob, read_documents

    jobs = [doc for doc in read_documents(args.file) if is_trainjob(doc)]
    if len(jobs) != 1:
        raise CLIError(
            f"{args.file}: --code and --replace apply to one TrainJob, and the file holds "
            f"{len(jobs)}; put each job in a file of its own"
        )
    name = sdk.train(
        args.file,
        namespace=args.namespace,
        code=args.code,
        s3_endpoint=args.s3_endpoint,
        replace=args.replace,
    )
    ns = args.namespace or jobs[0].get("metadata", {}).get("namespace") or sdk.namespace
    job = sdk.get_job(name, namespace=ns)
    code = {"uri": job.code_uri, "sha256": job.code_sha256} if job.code_uri else None
    if args.output == "json":
        print(json.dumps([{"kind": "TrainJob", "name": name, "namespace": ns, "code": code}],
                         indent=2))  # fmt: skip
        return 0
    _say(f"trainjob/{name} created")
    if code:
        _say(f"code: {code['uri']} (sha256 {code['sha256']})")
    return 0


@_guard
def get(args: argparse.Namespace) -> int:
    """One TrainJob in detail."""
    job = _client(args).get_job(args.name)
    if args.output == "json":
        print(json.dumps(job.manifest, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(dict(job.manifest), sort_keys=False))
    else:
        for line in render.detail_lines(job):
            _say(line)
    return 0


@_guard
def list_jobs(args: argparse.Namespace) -> int:
    """Every TrainJob of a namespace (or all), like `kubectl get rtj` with more columns."""
    sdk = _client(args)
    jobs = sdk.list_jobs(all_namespaces=args.all_namespaces)
    if args.output == "json":
        print(json.dumps([j.manifest for j in jobs], indent=2))
        return 0
    if not jobs:
        where = "any namespace" if args.all_namespaces else f"namespace {sdk.namespace!r}"
        _say(f"No TrainJobs in {where}.")
        return 0
    columns = render.LIST_COLUMNS if args.all_namespaces else render.LIST_COLUMNS[1:]
    rows = [render.list_row(job) for job in jobs]
    for line in render.columns([columns, *(r if args.all_namespaces else r[1:] for r in rows)]):
        _say(line)
    return 0


@_guard
def wait(args: argparse.Namespace) -> int:
    """Block until the condition holds; exit 1 when the job failed instead."""
    last_phase = ""

    def progress(job: TrainJob) -> None:
        nonlocal last_phase
        if args.output == "text" and job.phase != last_phase:
            suffix = f" ({job.progress}%)" if job.progress is not None else ""
            _say(f"{args.name}: {job.phase}{suffix}")
            last_phase = job.phase

    sdk = _client(args)
    try:
        job = sdk.wait_for_job_status(
            args.name, args.condition, timeout=args.timeout, callbacks=[progress]
        )
    except JobFailedError as exc:
        failed = exc.job.condition("Failed")
        message = f"{failed.reason}: {failed.message}" if failed else str(exc)
        if args.output == "json":
            print(json.dumps({"name": args.name, "met": False, "message": message}))
        else:
            errors.print(Text.assemble((f"{args.name} failed: ", "red"), message), soft_wrap=True)
        return 1
    except WaitTimeoutError as exc:
        raise CLIError(str(exc)) from exc
    cond = job.condition(args.condition)
    message = cond.message if cond and cond.message else args.condition
    if args.output == "json":
        print(json.dumps({"name": args.name, "met": True, "message": message}))
    else:
        _say(f"{args.name}: condition {args.condition} met")
    return 0


@_guard
def logs(args: argparse.Namespace) -> int:
    """The training driver's output: live from KubeRay's submitter pod of the current attempt,
    or stored (an earlier attempt, a worker's error, the metrics) read through a reader pod."""
    lines = _client(args).get_job_logs(
        args.name,
        follow=args.follow,
        tail_lines=args.tail if args.tail >= 0 else None,
        on_wait=lambda note: _say(note, err=True),
        attempt=getattr(args, "attempt", None),
        worker=getattr(args, "worker", None),
        metrics=bool(getattr(args, "metrics", False)),
        stacks=bool(getattr(args, "stacks", False)),
    )
    try:
        for line in lines:
            print(line)
    except KeyboardInterrupt:
        return 130
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            close()
    return 0


@_guard
def delete(args: argparse.Namespace) -> int:
    """Delete TrainJobs; their RayJobs, Ray clusters and pods go with them."""
    sdk = _client(args)
    for name in args.names:
        sdk.delete_job(name)
        _say(f"trainjob/{name} deleted")
    return 0


def _suspension(args: argparse.Namespace, suspend: bool) -> int:
    sdk = _client(args)
    job = (sdk.suspend_job if suspend else sdk.resume_job)(args.name)
    if args.output == "json":
        print(json.dumps({"name": job.name, "suspended": job.suspended, "phase": job.phase}))
    elif suspend:
        _say(
            f"trainjob/{job.name} suspended: the runtime checkpoints, then the Ray cluster is "
            f"removed (`raytrain wait {job.name} --for Suspended` waits for it)"
        )
    else:
        _say(
            f"trainjob/{job.name} resumed: a new Ray cluster resumes from the latest checkpoint "
            f"(`raytrain wait {job.name} --for Running` waits for it)"
        )
    return 0


@_guard
def suspend(args: argparse.Namespace) -> int:
    """Set spec.suspend: checkpoint, then remove the Ray cluster."""
    return _suspension(args, True)


@_guard
def resume(args: argparse.Namespace) -> int:
    """Clear spec.suspend: start a new Ray cluster from the latest checkpoint."""
    return _suspension(args, False)


def event_lines(events: list[Event], now: dt.datetime | None = None) -> list[str]:
    """`kubectl get events` columns; the message last and whole, never cut or wrapped."""
    now = now or dt.datetime.now(dt.timezone.utc)
    rows = [
        (
            render.human_duration((now - e.event_time).total_seconds()) if e.event_time else "-",
            e.type,
            e.reason,
            f"{e.involved_object_kind.lower()}/{e.involved_object_name}",
            e.message if e.count <= 1 else f"{e.message} (x{e.count})",
        )
        for e in events
    ]
    return render.columns([("LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"), *rows])


@_guard
def events(args: argparse.Namespace) -> int:
    """Events of the TrainJob and of its RayJobs, Ray clusters and pods."""
    found = _client(args).get_job_events(args.name)
    if args.output == "json":
        print(_json(found))
        return 0
    if not found:
        _say(f"No events for TrainJob {args.name} (Kubernetes keeps them for an hour).")
        return 0
    for line in event_lines(found):
        _say(line)
    return 0


def checkpoint_lines(name: str, ckpt: Checkpoints) -> list[str]:
    if not ckpt.latest_uri and not ckpt.best_uri:
        return [f"No checkpoint reported yet for TrainJob {name} (storage: {ckpt.storage or '-'})."]
    lines = [f"Storage:  {ckpt.storage or '-'}", f"Latest:   {ckpt.latest_uri or '-'}"]
    if ckpt.best_uri:
        lines.append(f"Best:     {ckpt.best_uri}")
        if ckpt.best_metric is not None:
            lines.append(f"Score:    {ckpt.best_metric}")
    if ckpt.count is not None:
        lines.append(f"Count:    {ckpt.count} reported in this run")
    if ckpt.resumed_from:
        lines.append(f"Resumed:  {ckpt.resumed_from}")
    for rejected in ckpt.rejected:
        lines.append(f"Rejected: {rejected.get('uri')}: {rejected.get('reason') or '-'}")
    return lines


_FAILED_LABELS = {"missing": "missing file", "size": "wrong size", "checksum": "checksum mismatch"}


def checkpoint_state(one: StoredCheckpoint) -> str:
    """`ok (sizes)`, `verified`, or what is wrong with it."""
    if one.state == "ok":
        return "ok (sizes)"
    if one.state == "verified":
        return "verified"
    label = _FAILED_LABELS.get(one.state)
    return f"{label}: {one.detail}" if label else one.detail


def _metrics_cell(one: StoredCheckpoint, first: str | None) -> str:
    """A metric or two: the job's score attribute first, then the first other number."""
    names = [n for n in (first,) if n and n in one.metrics]
    names += [
        n for n, v in one.metrics.items()
        if n not in names and isinstance(v, int | float) and not isinstance(v, bool)
    ][: 2 - len(names)]  # fmt: skip
    cells = []
    for n in names:
        v = one.metrics[n]
        cells.append(f"{n}={v:.4g}" if isinstance(v, float) else f"{n}={v}")
    return " ".join(cells) or "-"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def stored_checkpoint_lines(report: CheckpointReport) -> list[str]:
    """The run's checkpoints as a table, newest first, and what the check came to."""
    lines = [f"TrainJob {report.namespace}/{report.job}, run {report.run}"]
    if not report.checkpoints:
        lines.append("No checkpoint in storage yet.")
    else:
        rows = [
            (
                c.name,
                c.time.strftime("%Y-%m-%d %H:%M:%S") if c.time else "-",
                str(c.epoch) if c.epoch is not None else "-",
                _metrics_cell(c, report.score_attribute),
                str(c.files),
                _bytes(c.size),
                ",".join(c.marks) or "-",
                checkpoint_state(c),
            )
            for c in report.checkpoints
        ]
        header = ("CHECKPOINT", "TIME (UTC)", "EPOCH", "METRICS", "FILES", "SIZE", "IN STATUS",
                  "STATE")  # fmt: skip
        lines += render.columns([header, *rows])
    for field_name, uri in report.not_in_storage.items():
        lines.append(f"status.checkpoint.{field_name} {uri} is not in storage.")
    if report.checksums:
        lines.append(f"Verified: read {_bytes(report.bytes_read)}, every file's CRC32C compared.")
    elif report.checkpoints:
        lines.append("Checked by listing: files and sizes only (--verify reads every byte).")
    return lines


def _report_json(report: CheckpointReport) -> dict[str, Any]:
    status = report.status
    return {
        "name": report.job,
        "namespace": report.namespace,
        "storage": status.storage,
        "run": report.run,
        "latest_uri": status.latest_uri,
        "best_uri": status.best_uri,
        "best_metric": status.best_metric,
        "count": status.count,
        "resumed_from": status.resumed_from,
        "rejected": list(status.rejected),
        "checksums": report.checksums,
        "bytes_read": report.bytes_read,
        "checkpoints": [
            {
                "name": c.name,
                "uri": c.uri,
                "state": c.state,
                "usable": c.usable,
                "detail": c.detail,
                "time": c.time.isoformat() if c.time else None,
                "epoch": c.epoch,
                "metrics": dict(c.metrics),
                "files": c.files,
                "bytes": c.size,
                "attempt": c.attempt,
                "latest": c.latest,
                "best": c.best,
                "resumed_from": c.resumed_from,
                "rejection": dict(c.rejection) if c.rejection is not None else None,
            }
            for c in report.checkpoints
        ],
        "not_in_storage": dict(report.not_in_storage),
        "exit_code": report.exit_code,
    }


@_guard
def checkpoints(args: argparse.Namespace) -> int:
    """The run's checkpoints in storage, each checked against its manifest (-o uri: only the
    latest and best URIs the runtime reported, storage not read)."""
    sdk = _client(args)
    if args.output == "uri":
        if args.verify:
            raise CLIError("--verify reads storage and -o uri does not: use -o json or text")
        for uri in sdk.get_checkpoints(args.name).uris:
            print(uri)
        return 0
    try:
        report = sdk.list_checkpoints(args.name, verify=args.verify, s3_endpoint=args.s3_endpoint)
    except StorageNotReadableError as exc:
        status = sdk.get_checkpoints(args.name)
        if args.output == "json":
            print(_json({**dataclasses.asdict(status), "error": str(exc)}))
        else:
            for line in checkpoint_lines(args.name, status):
                _say(line)
        _fail(str(exc))
        return EXIT_NOT_READABLE
    if args.output == "json":
        print(json.dumps(_report_json(report), indent=2))
    else:
        for line in stored_checkpoint_lines(report):
            _say(line)
    code = report.exit_code
    if code == EXIT_FAILED:
        names = ", ".join(f"{c.name} ({c.state})" for c in report.failed)
        _fail(f"{len(report.failed)} checkpoint(s) failed the check: {names}; exit {code}")
    elif code == EXIT_NONE_USABLE:
        _fail(
            f"no checkpoint of run {report.run} can be resumed from "
            f"({len(report.checkpoints)} in storage); exit {code}"
        )
    return code


@_guard
def session(args: argparse.Namespace) -> int:
    """Forward the current Ray cluster's dashboard to this machine until interrupted."""
    sdk = _client(args)
    forward = sdk.port_forward_dashboard(
        args.name, local_port=args.port, address=args.address, kubectl=args.kubectl
    )
    with forward:
        target = forward.target
        _say(
            f"Ray dashboard of TrainJob {args.name} (RayCluster {target.ray_cluster}, attempt "
            f"{target.attempt}): {forward.url}"
        )
        _say("Press Ctrl-C to stop forwarding.", err=True)
        try:
            code = forward.wait()
        except KeyboardInterrupt:
            return 0
    raise CLIError(
        f"kubectl port-forward exited {code}: {forward.stderr or 'no output'}; the Ray head may "
        f"have gone (a retry or a suspend replaces the cluster): run `raytrain session "
        f"{args.name}` again"
    )
