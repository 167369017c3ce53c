"""`python -m raytrain_operator.uninstall`: the chart's pre-delete hook.

The operator puts no finalizer on a TrainJob; earlier versions had kopf put one on every
TrainJob still running (`kopf.raytrain.dev/finalizer`, before 0.2 `raytrain.dev/finalizer`).
The operator takes it off where it finds it, but once the operator is gone nothing does, and
deleting such a TrainJob (or its namespace) hangs. Before Helm deletes the release, this leaves
no TrainJob holding one of our finalizers, in one of two modes (env `TRAINJOBS`):

- `removeFinalizers`: strip the finalizer; the TrainJobs and their RayJobs keep running.
- `deleteTrainJobs`: delete every watched TrainJob while the operator still runs, wait up to
  `TIMEOUT_SECONDS` for it to let them go, then strip the finalizer from what is left
  (checkpoints stay in storage).

`WATCH_NAMESPACES` (comma-separated) limits it to the operator's namespaces; empty means the
whole cluster. Both the current finalizer and the pre-0.2 one are stripped. Only TrainJobs are
touched, and only our finalizers on them.

Before stripping, the operator's Deployment (`OPERATOR_DEPLOYMENT`, `namespace/name`) is scaled
to zero and its pods waited for, so that no operator of an earlier version, which would put its
finalizer back within moments, runs while it strips. Helm deletes the Deployment right after
this hook anyway.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import kubernetes
from kubernetes.client.exceptions import ApiException

from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_operator.settings import FINALIZER, LEGACY_FINALIZER

MODES = ("removeFinalizers", "deleteTrainJobs")
OURS = (FINALIZER, LEGACY_FINALIZER)
#: Passes over what is left: a 409 (the object changed meanwhile) is retried on the next one.
STRIP_PASSES = 5
POLL_SECONDS = 2.0
#: Longest wait for the operator's pods to go: past kopf's graceful exit and a pod's default
#: 30 s grace period, and inside the 120 s the chart's Job allows beyond uninstall.timeoutSeconds.
STOP_SECONDS = 90.0


class DeploymentApi(Protocol):
    """The calls of kubernetes.client.AppsV1Api this module makes."""

    def read_namespaced_deployment(self, name: str, namespace: str) -> Any: ...

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any: ...


class TrainJobApi(Protocol):
    """The calls of kubernetes.client.CustomObjectsApi this module makes."""

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> Any: ...

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str
    ) -> Any: ...

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any: ...

    def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Any: ...


@dataclass
class Options:
    mode: str
    namespaces: list[str]
    timeout_seconds: float
    #: (namespace, name) of the operator's Deployment, stopped before finalizers are stripped.
    operator: tuple[str, str] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Options:
        mode = env.get("TRAINJOBS", "")
        if mode not in MODES:
            raise ValueError(
                f"TRAINJOBS: {mode!r} is not a mode; set it to one of {', '.join(MODES)} "
                "(the chart's uninstall.trainJobs value)"
            )
        raw_timeout = env.get("TIMEOUT_SECONDS", "300")
        try:
            timeout = float(raw_timeout)
        except ValueError:
            timeout = -1.0
        if timeout < 0:
            raise ValueError(
                f"TIMEOUT_SECONDS: {raw_timeout!r} is not a number of seconds; set it to e.g. "
                "300 (the chart's uninstall.timeoutSeconds value)"
            )
        namespaces = [n.strip() for n in env.get("WATCH_NAMESPACES", "").split(",") if n.strip()]
        deployment = env.get("OPERATOR_DEPLOYMENT", "").strip()
        operator = None
        if deployment:
            ns, _, name = deployment.partition("/")
            if not ns or not name or "/" in name:
                raise ValueError(
                    f"OPERATOR_DEPLOYMENT: {deployment!r} is not namespace/name; set it to the "
                    "operator's Deployment, e.g. raytrain-system/raytrain-operator, or leave "
                    "it empty when no operator runs"
                )
            operator = (ns, name)
        return cls(mode=mode, namespaces=namespaces, timeout_seconds=timeout, operator=operator)


class Uninstaller:
    def __init__(
        self,
        api: TrainJobApi,
        options: Options,
        *,
        apps: DeploymentApi | None = None,
        out: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api, self.apps, self.options = api, apps, options
        self.out, self.clock, self.sleep = out, clock, sleep

    def trainjobs(self) -> list[dict[str, Any]]:
        try:
            if self.options.namespaces:
                return [
                    obj
                    for ns in self.options.namespaces
                    for obj in self.api.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)[
                        "items"
                    ]
                ]
            return list(self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"])
        except ApiException as exc:
            if exc.status == 404:  # the CRD is gone, and every TrainJob with it
                return []
            raise

    def strip(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        current = list(meta.get("finalizers") or [])
        kept = [f for f in current if f not in OURS]
        if kept == current:
            return
        # resourceVersion makes the merge patch conditional: a concurrent change fails with
        # 409 and the next pass reads the object again, so another finalizer is never lost.
        patch = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
        try:
            self.api.patch_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], patch
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            return
        removed = ", ".join(f for f in current if f in OURS)
        self.out(f"removed {removed} from trainjob {meta['namespace']}/{meta['name']}")

    def delete_all(self) -> None:
        for obj in self.trainjobs():
            meta = obj["metadata"]
            try:
                self.api.delete_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], PLURAL, meta["name"]
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            self.out(f"deleting trainjob {meta['namespace']}/{meta['name']}")
        deadline = self.clock() + self.options.timeout_seconds
        while self.trainjobs() and self.clock() < deadline:
            self.sleep(POLL_SECONDS)
        left = self.trainjobs()
        if left:
            self.out(
                f"{len(left)} trainjobs still present after the deadline; removing "
                f"{FINALIZER} so they can go (checkpoints stay in storage)"
            )

    def stop_operator(self) -> None:
        """Scale the operator to zero and wait (up to STOP_SECONDS) until none of its pods run."""
        if self.options.operator is None or self.apps is None:
            return
        ns, name = self.options.operator
        try:
            self.apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": 0}})
        except ApiException as exc:
            if exc.status == 404:  # no operator to stop
                return
            raise
        self.out(f"scaled deployment {ns}/{name} to 0 so the operator stops adding finalizers")
        deadline = self.clock() + STOP_SECONDS
        while True:
            try:
                status = self.apps.read_namespaced_deployment(name, ns).status
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            running = (status.replicas or 0) + (getattr(status, "terminating_replicas", 0) or 0)
            if running == 0:
                return
            if self.clock() >= deadline:
                self.out(f"deployment {ns}/{name} still has {running} pods; going on")
                return
            self.sleep(POLL_SECONDS)

    def run(self) -> int:
        """0 when no watched TrainJob holds our finalizer any more, else 1."""
        if self.options.mode == "deleteTrainJobs":
            self.delete_all()
        self.stop_operator()
        pending: list[dict[str, Any]] = []
        for _ in range(STRIP_PASSES):
            pending = [
                obj
                for obj in self.trainjobs()
                if set(obj["metadata"].get("finalizers") or []) & set(OURS)
            ]
            if not pending:
                return 0
            for obj in pending:
                self.strip(obj)
        names = ", ".join(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in pending)
        self.out(
            f"{len(pending)} trainjobs still carry {FINALIZER} or {LEGACY_FINALIZER} ({names}); "
            "remove it with `kubectl edit trainjobs.raytrain.dev NAME -n NAMESPACE` (delete its "
            "line under metadata.finalizers), see docs/install.md"
        )
        return 1


def kube_client() -> kubernetes.client.ApiClient:
    """The hook's own process may use the kubernetes client (the operator's does not)."""
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.ApiClient()


def main(env: Mapping[str, str] | None = None) -> int:
    try:
        options = Options.from_env(os.environ if env is None else env)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    client = kube_client()
    return Uninstaller(
        kubernetes.client.CustomObjectsApi(client),
        options,
        apps=kubernetes.client.AppsV1Api(client),
    ).run()


if __name__ == "__main__":
    sys.exit(main())
