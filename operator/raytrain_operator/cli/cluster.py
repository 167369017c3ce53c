"""The CLI's cluster commands: submit, get, list, wait, logs, through the Kubernetes API."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import yaml
from kubernetes import client, config, utils, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from rich.console import Console
from rich.table import Table

from raytrain_operator.api import v1alpha1 as api
from raytrain_operator.builders.pods import SUBMITTER_CONTAINER
from raytrain_operator.cli import driverlog, render

console = Console()
errors = Console(stderr=True)


class CLIError(Exception):
    """A failure the user can act on; main prints it without a traceback."""


def _connect(args: argparse.Namespace) -> tuple[client.ApiClient, str]:
    try:
        config.load_kube_config(config_file=args.kubeconfig, context=args.context)
        _, active = config.list_kube_config_contexts(config_file=args.kubeconfig)
        default_ns = active.get("context", {}).get("namespace", "default")
    except (ConfigException, FileNotFoundError, TypeError):
        try:
            config.load_incluster_config()
        except ConfigException as exc:
            raise CLIError(
                "no Kubernetes configuration: set KUBECONFIG or pass --kubeconfig "
                "(or use `raytrain run FILE --local` to train without a cluster)"
            ) from exc
        default_ns = pathlib.Path(
            "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
        ).read_text()
    return client.ApiClient(), args.namespace or default_ns


def _api_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body)
        return str(body.get("message", exc.reason))
    except (TypeError, ValueError):
        return str(exc.reason)


def _crd(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def _get(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    try:
        obj: dict[str, Any] = _crd(api_client).get_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name
        )
    except ApiException as exc:
        if exc.status == 404:
            raise CLIError(
                f"no TrainJob {name!r} in namespace {namespace!r} "
                f"(`raytrain list -A` shows every TrainJob)"
            ) from exc
        raise CLIError(f"reading TrainJob {namespace}/{name}: {_api_message(exc)}") from exc
    return obj


def _docs(path: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else pathlib.Path(path).read_text()
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise CLIError(f"{path} is not valid YAML: {exc}") from exc


Command = Callable[[argparse.Namespace], int]


def _guard(func: Command) -> Command:
    def run(args: argparse.Namespace) -> int:
        try:
            result = func(args)
        except CLIError as exc:
            errors.print(f"[red]error:[/red] {exc}", highlight=False)
            return 1
        except ApiException as exc:
            errors.print(f"[red]error:[/red] {_api_message(exc)}", highlight=False)
            return 1
        return result

    run.__doc__ = func.__doc__
    return run


@_guard
def submit(args: argparse.Namespace) -> int:
    """Create every object of the file; the API server's refusal is printed as it is."""
    api_client, namespace = _connect(args)
    created: list[dict[str, str]] = []
    for doc in _docs(args.file):
        doc.setdefault("metadata", {}).setdefault("namespace", namespace)
        kind, name = doc.get("kind", "?"), doc["metadata"].get("name", "?")
        try:
            if doc.get("apiVersion") == api.API_VERSION and kind == api.KIND:
                _crd(api_client).create_namespaced_custom_object(
                    api.GROUP, api.VERSION, doc["metadata"]["namespace"], api.PLURAL, doc
                )
            else:
                utils.create_from_dict(api_client, doc, namespace=doc["metadata"]["namespace"])
        except ApiException as exc:
            if exc.status == 409:
                raise CLIError(
                    f"{kind} {name!r} already exists in {doc['metadata']['namespace']!r}; "
                    f"delete it first or give the new one another name"
                ) from exc
            raise CLIError(f"{kind} {name!r} was refused: {_api_message(exc)}") from exc
        except utils.FailToCreateError as exc:
            messages = "; ".join(_api_message(e) for e in exc.api_exceptions)
            raise CLIError(f"{kind} {name!r} was refused: {messages}") from exc
        created.append({"kind": kind, "name": name, "namespace": doc["metadata"]["namespace"]})
    if args.output == "json":
        print(json.dumps(created, indent=2))
    else:
        for item in created:
            console.print(f"{item['kind'].lower()}/{item['name']} created", highlight=False)
    return 0


@_guard
def get(args: argparse.Namespace) -> int:
    """One TrainJob in detail."""
    api_client, namespace = _connect(args)
    obj = _get(api_client, namespace, args.name)
    if args.output == "json":
        print(json.dumps(obj, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(obj, sort_keys=False))
    else:
        for line in render.detail_lines(obj):
            console.print(line, highlight=False)
    return 0


@_guard
def list_jobs(args: argparse.Namespace) -> int:
    """Every TrainJob of a namespace (or all), like `kubectl get rtj` with more columns."""
    api_client, namespace = _connect(args)
    crd = _crd(api_client)
    if args.all_namespaces:
        result = crd.list_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL)
    else:
        result = crd.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)
    items = result.get("items", [])
    if args.output == "json":
        print(json.dumps(items, indent=2))
        return 0
    if not items:
        where = "any namespace" if args.all_namespaces else f"namespace {namespace!r}"
        console.print(f"No TrainJobs in {where}.", highlight=False)
        return 0
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = render.LIST_COLUMNS if args.all_namespaces else render.LIST_COLUMNS[1:]
    for column in columns:
        table.add_column(column)
    for obj in items:
        row = render.list_row(obj)
        table.add_row(*(row if args.all_namespaces else row[1:]))
    console.print(table)
    return 0


def _events(
    api_client: client.ApiClient, namespace: str, name: str, timeout: float
) -> Iterator[dict[str, Any]]:
    yield _get(api_client, namespace, name)
    stream = watch.Watch().stream(
        _crd(api_client).list_namespaced_custom_object,
        api.GROUP,
        api.VERSION,
        namespace,
        api.PLURAL,
        field_selector=f"metadata.name={name}",
        timeout_seconds=max(1, int(timeout)),
    )
    for event in stream:
        if event["type"] == "DELETED":
            raise CLIError(f"TrainJob {namespace}/{name} was deleted while waiting")
        yield event["object"]


@_guard
def wait(args: argparse.Namespace) -> int:
    """Block until the condition holds; exit 1 when the job failed instead."""
    api_client, namespace = _connect(args)
    deadline = time.monotonic() + args.timeout
    last_phase = ""
    while time.monotonic() < deadline:
        for obj in _events(api_client, namespace, args.name, deadline - time.monotonic()):
            phase = render.phase(obj)
            if args.output == "text" and phase != last_phase:
                progress = (obj.get("status", {}).get("trainerStatus") or {}).get(
                    "progressPercentage"
                )
                suffix = f" ({progress}%)" if progress is not None else ""
                console.print(f"{args.name}: {phase}{suffix}", highlight=False)
                last_phase = phase
            outcome = render.wait_outcome(obj, args.condition)
            if outcome is not None:
                met, message = outcome
                if args.output == "json":
                    print(json.dumps({"name": args.name, "met": met, "message": message}))
                elif met:
                    console.print(f"{args.name}: condition {args.condition} met", highlight=False)
                else:
                    errors.print(f"[red]{args.name} failed:[/red] {message}", highlight=False)
                return 0 if met else 1
            if time.monotonic() >= deadline:
                break
    raise CLIError(
        f"timed out after {args.timeout:.0f}s waiting for {args.name} to be {args.condition}"
    )


def _rayjob(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = _crd(api_client).get_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayjobs", name
        )
    except ApiException as exc:
        # Only a hint depends on it: a user who may not read RayJobs still gets the message.
        if exc.status in (403, 404):
            return None
        raise
    return obj


def _job_exists(api_client: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        client.BatchV1Api(api_client).read_namespaced_job(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _submitter_pod(
    api_client: client.ApiClient, namespace: str, rayjob: str
) -> tuple[dict[str, Any] | None, str]:
    """The submitter pod (as a plain object) and the resourceVersion of the listing."""
    core = client.CoreV1Api(api_client)
    listing = core.list_namespaced_pod(
        namespace, label_selector=driverlog.submitter_selector(rayjob)
    )
    pods = [api_client.sanitize_for_serialization(p) for p in listing.items]
    pod = driverlog.pick_submitter_pod(pods, rayjob)
    return (dict(pod) if pod is not None else None), str(listing.metadata.resource_version)


def _missing(api_client: client.ApiClient, namespace: str, obj: dict[str, Any], rayjob: str) -> str:
    status = (_rayjob(api_client, namespace, rayjob) or {}).get("status") or {}
    head_pod = ((status.get("rayClusterStatus") or {}).get("head") or {}).get("podName")
    return driverlog.missing_message(
        obj["metadata"]["name"],
        render.phase(obj),
        rayjob,
        job_exists=_job_exists(api_client, namespace, rayjob),
        head_pod=head_pod,
        job_id=status.get("jobId"),
    )


def _wait_for_submitter(
    api_client: client.ApiClient, namespace: str, name: str, rayjob: str
) -> str:
    """Block until the submitter container has started; its pod's name."""
    core = client.CoreV1Api(api_client)
    said = ""
    while True:
        pod, version = _submitter_pod(api_client, namespace, rayjob)
        if pod is not None:
            state = driverlog.container_state(pod, SUBMITTER_CONTAINER)
            if state.started:
                return str(pod["metadata"]["name"])
            note = f"waiting for the submitter pod {pod['metadata']['name']} ({state.reason})"
        else:
            obj = _get(api_client, namespace, name)
            if render.phase(obj) in driverlog.FINAL_PHASES:
                raise CLIError(_missing(api_client, namespace, obj, rayjob))
            note = (
                f"waiting for KubeRay's submitter pod of RayJob {rayjob} "
                f"(TrainJob phase: {render.phase(obj)})"
            )
        if note != said:
            errors.print(note, highlight=False)
            said = note
        # Any change to the Job's pods (or a minute without one) is worth another look.
        try:
            for _ in watch.Watch().stream(
                core.list_namespaced_pod,
                namespace,
                label_selector=driverlog.submitter_selector(rayjob),
                resource_version=version,
                timeout_seconds=60,
            ):
                break
        except ApiException as exc:
            if exc.status != 410:  # the listing's version expired: list again
                raise


@_guard
def logs(args: argparse.Namespace) -> int:
    """The training driver's output: the log of KubeRay's submitter pod of the current attempt."""
    api_client, namespace = _connect(args)
    obj = _get(api_client, namespace, args.name)
    rayjob = (obj.get("status") or {}).get("rayJobName")
    if not rayjob:
        raise CLIError(
            f"TrainJob {args.name} has no RayJob yet (status: {render.phase(obj)}); "
            f"`kubectl describe trainjob.raytrain.dev {args.name}` says why"
        )
    core = client.CoreV1Api(api_client)
    if args.follow:
        pod_name = _wait_for_submitter(api_client, namespace, args.name, rayjob)
        kwargs: dict[str, Any] = {"container": SUBMITTER_CONTAINER}
        if args.tail >= 0:
            kwargs["tail_lines"] = args.tail
        for line in watch.Watch().stream(
            core.read_namespaced_pod_log, pod_name, namespace, **kwargs
        ):
            print(line)
        return 0
    pod, _ = _submitter_pod(api_client, namespace, rayjob)
    if pod is None:
        raise CLIError(_missing(api_client, namespace, obj, rayjob))
    state = driverlog.container_state(pod, SUBMITTER_CONTAINER)
    if not state.started:
        raise CLIError(driverlog.not_started_message(pod["metadata"]["name"], state, args.name))
    kwargs = {"container": SUBMITTER_CONTAINER}
    if args.tail >= 0:
        kwargs["tail_lines"] = args.tail
    print(core.read_namespaced_pod_log(pod["metadata"]["name"], namespace, **kwargs), end="")
    return 0
