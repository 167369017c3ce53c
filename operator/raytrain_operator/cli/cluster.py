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
from raytrain_operator.builders.pods import HEAD_CONTAINER
from raytrain_operator.cli import render

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


@_guard
def logs(args: argparse.Namespace) -> int:
    """Stream the Ray head pod's log of the current attempt."""
    api_client, namespace = _connect(args)
    obj = _get(api_client, namespace, args.name)
    cluster_name = (obj.get("status") or {}).get("rayClusterName")
    if not cluster_name:
        raise CLIError(
            f"TrainJob {args.name} has no Ray cluster yet (status: {render.phase(obj)}); "
            "try again once it is Running"
        )
    core = client.CoreV1Api(api_client)
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"ray.io/cluster={cluster_name},ray.io/node-type=head"
    ).items
    if not pods:
        raise CLIError(f"no head pod for Ray cluster {cluster_name} (it may have been cleaned up)")
    pod = pods[0].metadata.name
    if args.follow:
        stream = watch.Watch().stream(
            core.read_namespaced_pod_log, pod, namespace, container=HEAD_CONTAINER, tail_lines=None
        )
        for line in stream:
            print(line)
        return 0
    kwargs: dict[str, Any] = {"container": HEAD_CONTAINER}
    if args.tail >= 0:
        kwargs["tail_lines"] = args.tail
    print(core.read_namespaced_pod_log(pod, namespace, **kwargs), end="")
    return 0
