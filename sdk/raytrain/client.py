"""`TrainJobClient`: create, watch and control TrainJobs from Python.

The method names are Kubeflow TrainerClient's (`train`, `list_jobs`, `get_job`,
`get_job_logs`, `get_job_events`, `wait_for_job_status`, `delete_job`), plus what a
TrainJob can do that a Kubeflow one cannot: `suspend_job`, `resume_job`, `get_checkpoints`,
`list_checkpoints` and a port-forward to the Ray dashboard. Every call goes to the Kubernetes
API with the `kubernetes` client, and `list_checkpoints` reads the job's S3 storage with boto3;
nothing here imports Ray or torch.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pydantic
import urllib3
from kubernetes import client, utils, watch
from kubernetes.client.exceptions import ApiException

from raytrain import _manifest, driverlog, models, reader
from raytrain._connection import Connection, api_message, connect, not_found_details
from raytrain._dashboard import DashboardSession, DashboardTarget
from raytrain.checkpoints import CheckpointReport
from raytrain.errors import (
    ClusterUnreachableError,
    CRDNotInstalledError,
    DashboardUnavailableError,
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobStateError,
    LogsUnavailableError,
    NamespaceNotFoundError,
    RayTrainError,
    StorageAccessError,
    StorageNotReadableError,
    WaitTimeoutError,
)
from raytrain.models import Checkpoints, Event, TrainJob
from raytrain_contract.api import templates
from raytrain_contract.api import v1alpha1 as api
from raytrain_contract.meta import Meta
from raytrain_contract.pods import SUBMITTER_CONTAINER

Callback = Callable[[TrainJob], None]
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
StatusSet = str | Iterable[str]
#: How long a log reader pod may take to pull its image, start and print a file.
READER_TIMEOUT_S = 300.0


class TrainJobClient:
    """TrainJobs of one cluster, reached through a kubeconfig or the pod's service account.

    `namespace` is the default of every call (each also takes `namespace=`); unset, it is the
    kubeconfig context's namespace (of `context` when given), the pod's own in a cluster, or
    `default`. `api_client` (a `kubernetes.client.ApiClient`) replaces the configuration lookup.
    """

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_client: Any = None,
    ) -> None:
        if api_client is not None:
            self._conn = Connection(api_client, "default", context, kubeconfig)
        else:
            self._conn = connect(kubeconfig, context)
        self.namespace = namespace or self._conn.namespace
        self.context = self._conn.context
        api_client = self._conn.api_client
        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)

    def __repr__(self) -> str:
        return f"TrainJobClient(namespace={self.namespace!r}, context={self.context!r})"

    def close(self) -> None:
        """Release the client's connections (also at the end of a `with` block)."""
        self._api_client.close()

    def __enter__(self) -> TrainJobClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ errors

    def _ns(self, namespace: str | None) -> str:
        return namespace or self.namespace

    def _namespace_missing(self, namespace: str) -> bool:
        """True only when the namespace is known not to exist (reading it may be forbidden)."""
        try:
            self._core.read_namespace(namespace)
        except ApiException as exc:
            return bool(exc.status == 404)
        except urllib3.exceptions.HTTPError:
            return False
        return False

    def _no_namespace(self, namespace: str) -> NamespaceNotFoundError:
        return NamespaceNotFoundError(
            f"namespace {namespace!r} does not exist ({self._conn.where}); pass namespace=... "
            f"(-n) with an existing one, or create it: kubectl create namespace {namespace}"
        )

    def _error(
        self, exc: ApiException, what: str, namespace: str, name: str | None
    ) -> RayTrainError:
        message = api_message(exc)
        if exc.status == 404:
            details = not_found_details(exc)
            if details.get("kind") == "namespaces":
                return self._no_namespace(namespace)
            if not details:
                return CRDNotInstalledError(
                    f"{what}: the cluster ({self._conn.where}) does not serve "
                    f"{api.PLURAL}.{api.GROUP}/{api.VERSION}; install the CRD "
                    f"(kubectl apply --server-side -f crds/, or the helm chart)"
                )
            if name is not None and details.get("kind") == api.PLURAL:
                if self._namespace_missing(namespace):
                    return self._no_namespace(namespace)
                return JobNotFoundError(
                    f"no TrainJob {name!r} in namespace {namespace!r} ({self._conn.where}); "
                    f"list_jobs(all_namespaces=True) (`raytrain list -A`) shows every TrainJob"
                )
        if exc.status == 403:
            return RayTrainError(
                f"{what}: forbidden in namespace {namespace!r} ({self._conn.where}): {message}; "
                f"your account needs RBAC on {api.PLURAL}.{api.GROUP} there"
            )
        return RayTrainError(f"{what}: {message}")

    @contextlib.contextmanager
    def _api(self, what: str, namespace: str, name: str | None = None) -> Iterator[None]:
        try:
            yield
        except ApiException as exc:
            raise self._error(exc, what, namespace, name) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnreachableError(
                f"{what}: the Kubernetes API server did not answer ({self._conn.where}): {exc}"
            ) from exc

    def _get(self, name: str, namespace: str) -> dict[str, Any]:
        with self._api(f"reading TrainJob {namespace}/{name}", namespace, name):
            obj: dict[str, Any] = self._custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, name
            )
        return obj

    # ------------------------------------------------------------------ create, read

    def train(
        self,
        job: _manifest.JobSource,
        *,
        name: str | None = None,
        namespace: str | None = None,
        code: str | os.PathLike[str] | Callable[..., Any] | None = None,
        s3_endpoint: str | None = None,
        replace: bool = False,
    ) -> str:
        """Create a TrainJob; returns its name (the server's, when the manifest has generateName).

        `job` is a manifest dict, the path of a YAML file, or a typed `TrainJob` /
        `TrainJobSpec` (`raytrain_contract.api.v1alpha1`; a spec needs `name=`). A file's other
        objects (a credentials Secret, a PVC) are created first; one that already exists is
        left as it is. The API server validates the TrainJob: its refusal names the field.

        `code`: the training code, as a folder or as a function. A folder is packed (its
        .gitignore files apply), stored in the job's S3 storage under ``code/<sha256>.zip`` and
        recorded in spec.code; spec.entrypoint names a module or script in it. A function (its
        imports inside its body) is stored the same way as a module of its own and becomes the
        entrypoint. `s3_endpoint` is the endpoint this machine uploads through, when the job's
        own is reachable only from pods (default: $AWS_ENDPOINT_URL, else the job's). With
        `replace`, a TrainJob of the same name is deleted first (its checkpoints stay).
        """
        others: list[dict[str, Any]] = []
        if isinstance(job, str | os.PathLike):
            job, others = _manifest.split_file(job)
        manifest = _manifest.to_manifest(job, name)
        ns = self._target_namespace(manifest, namespace)
        for other in others:
            self.create_object(other, namespace=ns, exist_ok=True)
        if code is not None:
            self._attach_code(manifest, ns, code, others, s3_endpoint)
        if replace and manifest["metadata"].get("name"):
            self._delete_and_wait(manifest["metadata"]["name"], ns)
        return self._create(manifest, ns)

    def _attach_code(
        self,
        manifest: dict[str, Any],
        namespace: str,
        code: str | os.PathLike[str] | Callable[..., Any],
        others: list[dict[str, Any]],
        s3_endpoint: str | None,
    ) -> None:
        """Store the code snapshot in the job's storage and record it in spec.code."""
        import tempfile
        from pathlib import Path

        from raytrain import _code

        spec = manifest.setdefault("spec", {})
        with tempfile.TemporaryDirectory(prefix="raytrain-code-") as tmp:
            if callable(code) and not isinstance(code, str | os.PathLike):
                spec["entrypoint"] = _code.function_source(code, Path(tmp))
                snapshot = _code.pack(tmp)
            else:
                snapshot = _code.pack(code)
        storage = self._effective_spec(spec, namespace).get("storage") or {}
        _code.attach(manifest, snapshot, storage=storage, endpoint=s3_endpoint,
                     secret_lookup=self._secret_lookup(namespace, others))  # fmt: skip

    def _effective_spec(self, spec: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        """``spec`` merged over the template it names, read from the cluster."""
        ref = templates.reference(spec)
        if ref is None:
            return dict(spec)
        kind, template_name = ref
        cluster = kind == api.CLUSTER_TEMPLATE_KIND
        plural = api.CLUSTER_TEMPLATE_PLURAL if cluster else api.TEMPLATE_PLURAL
        with self._api(f"reading {kind} {template_name}", namespace):
            if cluster:
                found = self._custom.get_cluster_custom_object(
                    api.GROUP, api.VERSION, plural, template_name
                )
            else:
                found = self._custom.get_namespaced_custom_object(
                    api.GROUP, api.VERSION, namespace, plural, template_name
                )
        return templates.merge(found.get("spec") or {}, spec)

    def _delete_and_wait(self, name: str, namespace: str, timeout: float = 300.0) -> None:
        """Delete the TrainJob ``name`` if there is one, and wait until it is gone."""
        try:
            self._get(name, namespace)
        except JobNotFoundError:
            return
        self.delete_job(name, namespace=namespace)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._get(name, namespace)
            except JobNotFoundError:
                return
            if time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"TrainJob {namespace}/{name} was deleted but is still there after "
                    f"{timeout:.0f} s (a finalizer waits: is the operator running?)",
                    None,
                )
            time.sleep(0.5)

    def _target_namespace(self, manifest: dict[str, Any], namespace: str | None) -> str:
        declared = manifest["metadata"].get("namespace")
        if namespace and declared and namespace != declared:
            raise InvalidJobError(
                f"metadata.namespace is {declared!r} but namespace={namespace!r} was asked for; "
                f"remove one of them"
            )
        ns: str = namespace or declared or self.namespace
        manifest["metadata"]["namespace"] = ns
        return ns

    def _create(self, manifest: dict[str, Any], namespace: str) -> str:
        label = manifest["metadata"].get("name") or manifest["metadata"].get("generateName")
        try:
            with self._api(f"creating TrainJob {namespace}/{label}", namespace):
                created: dict[str, Any] = self._custom.create_namespaced_custom_object(
                    api.GROUP, api.VERSION, namespace, api.PLURAL, manifest
                )
        except RayTrainError as exc:
            cause = exc.__cause__
            if isinstance(cause, ApiException) and cause.status == 409:
                raise JobExistsError(
                    f"TrainJob {label!r} already exists in namespace {namespace!r}; delete it "
                    f"first (delete_job / `raytrain delete {label}`) or choose another name"
                ) from cause
            if isinstance(cause, ApiException) and cause.status in (400, 422):
                raise InvalidJobError(
                    f"TrainJob {label!r} was refused: {api_message(cause)}"
                ) from cause
            raise
        return str(created["metadata"]["name"])

    def create_object(
        self, obj: Mapping[str, Any], *, namespace: str | None = None, exist_ok: bool = False
    ) -> dict[str, str]:
        """Create one object of a manifest (a TrainJob, or a Secret/PVC it needs).

        Returns its kind, name and namespace. With `exist_ok`, an object that exists already
        (HTTP 409) is left unchanged instead of raising JobExistsError.
        """
        doc = dict(obj)
        doc["metadata"] = dict(doc.get("metadata") or {})
        kind, label = doc.get("kind", "?"), doc["metadata"].get("name", "?")
        if _manifest.is_trainjob(doc):
            ns = self._target_namespace(doc, namespace)
            try:
                label = self._create(doc, ns)
            except JobExistsError:
                if not exist_ok:
                    raise
            return {"kind": str(kind), "name": str(label), "namespace": ns}
        if _manifest.is_template(doc):
            return self._create_template(doc, namespace, exist_ok)
        ns = self._target_namespace(doc, namespace)
        try:
            with self._api(f"creating {kind} {ns}/{label}", ns):
                utils.create_from_dict(self._api_client, doc, namespace=ns)
        except utils.FailToCreateError as exc:
            failures = [e for e in exc.api_exceptions if not (exist_ok and e.status == 409)]
            if failures:
                first = failures[0]
                if first.status == 409:
                    raise JobExistsError(
                        f"{kind} {label!r} already exists in namespace {ns!r}; delete it first "
                        f"or give the new one another name"
                    ) from exc
                if first.status == 404 and self._namespace_missing(ns):
                    raise self._no_namespace(ns) from exc
                messages = "; ".join(api_message(e) for e in failures)
                raise InvalidJobError(f"{kind} {label!r} was refused: {messages}") from exc
        return {"kind": str(kind), "name": str(label), "namespace": ns}

    def _create_template(
        self, doc: dict[str, Any], namespace: str | None, exist_ok: bool
    ) -> dict[str, str]:
        """A ClusterTrainJobTemplate (cluster-scoped) or a TrainJobTemplate: the kubernetes
        client's create_from_dict knows only built-in kinds."""
        kind, label = str(doc["kind"]), str(doc["metadata"].get("name", "?"))
        cluster = kind == api.CLUSTER_TEMPLATE_KIND
        ns = "" if cluster else self._target_namespace(doc, namespace)
        plural = api.CLUSTER_TEMPLATE_PLURAL if cluster else api.TEMPLATE_PLURAL
        where = f"{kind} {label}" if cluster else f"{kind} {ns}/{label}"
        try:
            if cluster:
                self._custom.create_cluster_custom_object(api.GROUP, api.VERSION, plural, doc)
            else:
                self._custom.create_namespaced_custom_object(
                    api.GROUP, api.VERSION, ns, plural, doc
                )
        except ApiException as exc:
            if exc.status == 409 and exist_ok:
                return {"kind": kind, "name": label, "namespace": ns}
            if exc.status == 409:
                raise JobExistsError(
                    f"{where} already exists; delete it first or give the new one another name"
                ) from exc
            if exc.status == 404 and not not_found_details(exc):
                raise CRDNotInstalledError(
                    f"creating {where}: the cluster ({self._conn.where}) does not serve "
                    f"{plural}.{api.GROUP}/{api.VERSION}; install the CRDs (kubectl apply "
                    "--server-side -f crds/, or the helm chart)"
                ) from exc
            if exc.status == 403:
                who = "a cluster administrator's right" if cluster else f"namespace {ns!r}"
                raise RayTrainError(
                    f"creating {where}: forbidden ({self._conn.where}): {api_message(exc)}; "
                    f"it needs create on {plural}.{api.GROUP} ({who})"
                ) from exc
            if exc.status in (400, 422):
                raise InvalidJobError(f"{where} was refused: {api_message(exc)}") from exc
            raise RayTrainError(f"creating {where}: {api_message(exc)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnreachableError(
                f"creating {where}: the Kubernetes API server did not answer "
                f"({self._conn.where}): {exc}"
            ) from exc
        return {"kind": kind, "name": label, "namespace": ns}

    def get_job(self, name: str, *, namespace: str | None = None) -> TrainJob:
        """One TrainJob; JobNotFoundError (a LookupError) when there is none of that name."""
        return TrainJob.from_object(self._get(name, self._ns(namespace)))

    def list_jobs(
        self,
        *,
        namespace: str | None = None,
        all_namespaces: bool = False,
        label_selector: str | None = None,
    ) -> list[TrainJob]:
        """TrainJobs of the namespace (or of every namespace), oldest first."""
        ns = self._ns(namespace)
        kwargs: dict[str, Any] = {}
        if label_selector:
            kwargs["label_selector"] = label_selector
        with self._api(
            "listing TrainJobs" + ("" if all_namespaces else f" in namespace {ns!r}"), ns
        ):
            if all_namespaces:
                result = self._custom.list_cluster_custom_object(
                    api.GROUP, api.VERSION, api.PLURAL, **kwargs
                )
            else:
                result = self._custom.list_namespaced_custom_object(
                    api.GROUP, api.VERSION, ns, api.PLURAL, **kwargs
                )
        items = result.get("items") or []
        if not items and not all_namespaces and self._namespace_missing(ns):
            raise self._no_namespace(ns)
        jobs = [TrainJob.from_object(obj) for obj in items]
        return sorted(jobs, key=lambda j: (j.namespace, j.creation_timestamp or _EPOCH, j.name))

    def get_checkpoints(self, name: str, *, namespace: str | None = None) -> Checkpoints:
        """The latest and best checkpoint URIs the runtime reported (status.checkpoint)."""
        return self.get_job(name, namespace=namespace).checkpoints

    def list_checkpoints(
        self,
        name: str,
        *,
        namespace: str | None = None,
        verify: bool = False,
        s3_endpoint: str | None = None,
    ) -> CheckpointReport:
        """Every checkpoint of the job's run in its storage, newest first, each checked against
        its manifest: its files there with their sizes (a listing, nothing read), or with
        `verify` every file read whole and its CRC32C compared.

        Read from this machine with boto3: its AWS credentials (environment, profile), else the
        job's credentials Secret; `s3_endpoint` when the job's endpoint is reachable only from
        pods (default: $AWS_ENDPOINT_URL, else spec.storage.s3.endpoint). `StorageAccessError`
        says what to set when the bucket cannot be read; `StorageNotReadableError` when the
        storage is a PVC, which only pods mount.
        """
        from raytrain import _code
        from raytrain._s3store import S3Store
        from raytrain.checkpoints import check_run
        from raytrain_contract.pods import run_name

        ns = self._ns(namespace)
        obj = self._get(name, ns)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        storage = templates.effective_value(spec, status, "storage") or {}
        meta = obj.get("metadata") or {}
        run = status.get("runName") or run_name(name, str(meta.get("uid") or ""))
        if storage.get("pvc"):
            raise StorageNotReadableError(self._pvc_message(name, ns, storage["pvc"], run, status))
        s3 = storage.get("s3")
        if not s3 or not s3.get("uri"):
            raise InvalidJobError(
                f"TrainJob {ns}/{name} has no spec.storage (nor a template's): it keeps no "
                "checkpoints"
            )
        try:
            target = _code.s3_target(
                s3, endpoint=s3_endpoint, secret_lookup=self._secret_lookup(ns)
            )
        except Exception as exc:  # botocore's ProfileNotFound, a bad ~/.aws/config
            from botocore.exceptions import BotoCoreError

            if not isinstance(exc, BotoCoreError):
                raise
            raise StorageAccessError(
                f"reading this machine's AWS configuration failed: {exc}; fix AWS_PROFILE or "
                "~/.aws/config, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            ) from None
        secret = (s3.get("credentialsSecret") or {}).get("name")
        where = (
            f"the job's Secret {ns}/{secret} (spec.storage.s3.credentialsSecret), used because "
            "this machine has no AWS credentials"
            if target.credentials
            else "this machine's AWS credentials (AWS_* variables, AWS_PROFILE or ~/.aws)"
        )
        store = S3Store(target, credentials_from=where)
        checkpoint = templates.effective_value(spec, status, "checkpoint") or {}
        return check_run(
            store,
            f"{str(s3['uri']).rstrip('/')}/{run}",
            job=name,
            namespace=ns,
            checksums=verify,
            status=status.get("checkpoint") or {},
            reported=Checkpoints.from_object(obj),
            score_attribute=checkpoint.get("scoreAttribute"),
        )

    def _secret_lookup(
        self, namespace: str, others: Iterable[Mapping[str, Any]] = ()
    ) -> Callable[[str], Mapping[str, Any] | None]:
        """A Secret of ``others`` (the objects of the user's file), else read from the
        cluster; None when neither has it (or the account may not read it)."""

        docs = list(others)

        def secret(secret_name: str) -> Mapping[str, Any] | None:
            for doc in docs:
                meta = doc.get("metadata") or {}
                if doc.get("kind") == "Secret" and meta.get("name") == secret_name:
                    return doc
            try:
                found = self._core.read_namespaced_secret(secret_name, namespace)
            except ApiException:
                return None
            data: Mapping[str, Any] = self._api_client.sanitize_for_serialization(found)
            return data

        return secret

    @staticmethod
    def _pvc_message(
        name: str, ns: str, pvc: Mapping[str, Any], run: str, status: Mapping[str, Any]
    ) -> str:
        mount = str(pvc.get("mountPath") or "/").rstrip("/") or ""
        if pvc.get("subPath"):
            mount = f"{mount}/{str(pvc['subPath']).strip('/')}"
        run_dir = f"{mount}/{run}"
        cluster = status.get("rayClusterName")
        head = (
            f"$(kubectl get pod -n {ns} -l ray.io/cluster={cluster},ray.io/node-type=head -o name)"
            if cluster
            else "<the job's head pod>"
        )
        check = (
            "from raytrain_contract import checkpoints as c; s = c.local_store(); "
            "[print(v.name, v.reason()) for v in (c.verify(s, d, checksums=True) "
            f'for d in c.checkpoint_dirs(s, "{run_dir}"))]'
        )
        return (
            f"TrainJob {ns}/{name} keeps its checkpoints on PVC {pvc.get('claimName')!r} "
            "(spec.storage.pvc), which only pods mount: this machine cannot list or check them. "
            "What the runtime reported is in the job's status (status.checkpoint: latestURI, "
            f"bestURI, and after a resume resumedFrom and rejected; `raytrain get {name} -o "
            "yaml`). To check the files, run the check where the claim is mounted, e.g. in the "
            f"head pod while the job runs: kubectl exec -n {ns} -c ray-head {head} -- python -c "
            f"'{check}'"
        )

    # ------------------------------------------------------------------ change

    def delete_job(self, name: str, *, namespace: str | None = None) -> None:
        """Delete the TrainJob; Kubernetes garbage-collects its RayJob, Ray cluster and pods."""
        ns = self._ns(namespace)
        with self._api(f"deleting TrainJob {ns}/{name}", ns, name):
            self._custom.delete_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PLURAL, name
            )

    def _set_suspend(self, name: str, namespace: str | None, suspend: bool) -> TrainJob:
        ns = self._ns(namespace)
        job = TrainJob.from_object(self._get(name, ns))
        if job.finished:
            verb = "suspended" if suspend else "resumed"
            raise JobStateError(
                f"TrainJob {ns}/{name} has {job.phase}; a finished job cannot be {verb}. "
                f"Create a new TrainJob to train again (it resumes from storage only if it "
                f"points at the same checkpoints)"
            )
        if job.suspended == suspend:
            return job
        with self._api(f"{'suspending' if suspend else 'resuming'} TrainJob {ns}/{name}", ns, name):
            obj = self._custom.patch_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PLURAL, name, {"spec": {"suspend": suspend}}
            )
        return TrainJob.from_object(obj)

    def suspend_job(self, name: str, *, namespace: str | None = None) -> TrainJob:
        """Set spec.suspend: the runtime checkpoints, then the Ray cluster is removed.

        Returns at once; `wait_for_job_status(name, "Suspended")` waits for it to happen.
        """
        return self._set_suspend(name, namespace, True)

    def resume_job(self, name: str, *, namespace: str | None = None) -> TrainJob:
        """Clear spec.suspend: a new Ray cluster starts and training resumes from the latest
        checkpoint. Returns at once; wait for `Running` to see it start."""
        return self._set_suspend(name, namespace, False)

    # ------------------------------------------------------------------ wait

    def wait_for_job_status(
        self,
        name: str,
        status: StatusSet = "Succeeded",
        *,
        timeout: float = 600.0,
        namespace: str | None = None,
        callbacks: Iterable[Callback] = (),
        polling_interval: float | None = None,
    ) -> TrainJob:
        """Block until one of `status` (Created, Running, Suspended, Succeeded or its alias
        Complete, Failed) is a True condition of the current generation; returns the job.

        Raises JobFailedError (a RuntimeError) when the job fails while waiting for anything
        else, WaitTimeoutError (a TimeoutError) after `timeout` seconds, naming the last
        conditions seen. Each callback is called with every new state of the job. The job is
        watched, not polled: `polling_interval` is accepted for code written for Kubeflow's
        TrainerClient and has no effect.
        """
        del polling_interval
        wanted = models.wanted_statuses(status)
        ns = self._ns(namespace)
        callbacks = list(callbacks)
        deadline = time.monotonic() + timeout
        last: TrainJob | None = None
        seen_version = ""
        obj = self._get(name, ns)
        while True:
            version = str(obj.get("metadata", {}).get("resourceVersion", ""))
            if version != seen_version or last is None:
                seen_version = version
                last = TrainJob.from_object(obj)
                for callback in callbacks:
                    callback(last)
                outcome = models.wait_outcome(last, wanted)
                if outcome is not None:
                    met, message = outcome
                    if met:
                        return last
                    raise JobFailedError(
                        f"TrainJob {ns}/{name} failed ({message}) while waiting for "
                        f"{' or '.join(sorted(wanted))}",
                        last,
                    )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(
                    f"TrainJob {ns}/{name} is not {' or '.join(sorted(wanted))} after "
                    f"{timeout:g}s: phase {last.phase}; conditions: {last.describe_conditions()}",
                    last,
                )
            obj = self._next_change(name, ns, seen_version, remaining)

    def _next_change(
        self, name: str, namespace: str, version: str, remaining: float
    ) -> dict[str, Any]:
        """The object after its next change, or as it is once `remaining` seconds passed."""
        stream = watch.Watch().stream(
            self._custom.list_namespaced_custom_object,
            api.GROUP,
            api.VERSION,
            namespace,
            api.PLURAL,
            field_selector=f"metadata.name={name}",
            resource_version=version,
            timeout_seconds=max(1, int(remaining)),
            _request_timeout=remaining + 10,
        )
        try:
            with self._api(f"watching TrainJob {namespace}/{name}", namespace, name):
                for event in stream:
                    if event["type"] == "DELETED":
                        raise JobNotFoundError(
                            f"TrainJob {namespace}/{name} was deleted while waiting for it"
                        )
                    if event["type"] in ("ADDED", "MODIFIED"):
                        changed: dict[str, Any] = event["object"]
                        return changed
        except RayTrainError as exc:
            cause = exc.__cause__
            expired = isinstance(cause, ApiException) and cause.status == 410
            if not (expired or isinstance(cause, urllib3.exceptions.ReadTimeoutError)):
                raise
        # The watch ended without a change (or its version expired): read it afresh.
        return self._get(name, namespace)

    # ------------------------------------------------------------------ observe

    def get_job_events(self, name: str, *, namespace: str | None = None) -> list[Event]:
        """Events about the TrainJob and its children (RayJobs, Ray clusters, their pods and
        KubeRay's submitter Jobs), oldest first."""
        ns = self._ns(namespace)
        job = TrainJob.from_object(self._get(name, ns))
        with self._api(f"listing Events in namespace {ns!r}", ns):
            listing = self._core.list_namespaced_event(ns)
        items = [self._api_client.sanitize_for_serialization(e) for e in listing.items]
        events = [Event.from_dict(e) for e in items if _about(e, job)]
        return sorted(events, key=lambda e: e.event_time or _EPOCH)

    def get_job_logs(
        self,
        name: str,
        *,
        follow: bool = False,
        tail_lines: int | None = None,
        namespace: str | None = None,
        on_wait: Callable[[str], None] | None = None,
        attempt: int | None = None,
        worker: int | None = None,
        metrics: bool = False,
        stacks: bool = False,
    ) -> Iterator[str]:
        """The training driver's output, line by line.

        The current attempt's driver is read live from the pod KubeRay's submitter Job runs (it
        follows the Ray job's driver). Without `follow`, what is there now; with `follow`, waits
        for the submitter pod to start (`on_wait` hears why it waits), then streams until the
        driver ends.

        An earlier `attempt`, a `worker`'s error (`worker-<rank>.error.txt`), the `metrics`
        history (`metrics.jsonl`), every rank's `stacks` from when the attempt's reports stopped
        for the hang timeout (`stacks.txt`), and the current attempt's driver once its submitter
        pod is gone
        (a failed, finished or suspended job) are read from what the runtime stored beside the
        checkpoints, through a short-lived pod in the job's namespace that runs the job's image
        with its storage settings (raytrain/reader.py) and is deleted once read; that needs RBAC
        to create, get, watch and delete pods and to get pods/log there.
        LogsUnavailableError says why when there is nothing to read.
        """
        ns = self._ns(namespace)
        obj = self._get(name, ns)
        job = TrainJob.from_object(obj)
        say = on_wait or (lambda _: None)
        if attempt is not None and (attempt < 0 or attempt > job.attempt):
            raise LogsUnavailableError(
                driverlog.attempt_not_started(name, attempt, job.attempt, job.phase)
            )
        file_name = reader.stored_file_name(worker=worker, metrics=metrics, stacks=stacks)
        ended = job.phase in driverlog.FINAL_PHASES or job.suspended
        if (
            worker is not None
            or metrics
            or stacks
            or (attempt is not None and (attempt != job.attempt or ended))
        ):
            return self._stored_log(
                obj, ns, job.attempt if attempt is None else attempt, file_name, tail_lines, say
            )
        rayjob = job.ray_job_name
        if not rayjob:
            raise LogsUnavailableError(
                f"TrainJob {name} has no RayJob yet (status: {job.phase}); "
                f"`kubectl describe trainjob.raytrain.dev {name} -n {ns}` says why"
            )
        kwargs: dict[str, Any] = {"container": SUBMITTER_CONTAINER}
        if tail_lines is not None and tail_lines >= 0:
            kwargs["tail_lines"] = tail_lines
        if follow:
            try:
                pod_name = self._wait_for_submitter(ns, name, rayjob, say)
            except LogsUnavailableError as exc:
                return self._stored_instead(obj, ns, job.attempt, tail_lines, say, str(exc))
            return self._stream_log(pod_name, ns, kwargs)
        pod, _ = self._submitter_pod(ns, rayjob)
        if pod is None:
            missing = self._missing(ns, job, rayjob)
            if ended:
                return self._stored_instead(obj, ns, job.attempt, tail_lines, say, missing)
            raise LogsUnavailableError(missing)
        state = driverlog.container_state(pod, SUBMITTER_CONTAINER)
        if not state.started:
            raise LogsUnavailableError(
                driverlog.not_started_message(pod["metadata"]["name"], state, name)
            )
        pod_name = str(pod["metadata"]["name"])
        with self._api(f"reading the log of pod {ns}/{pod_name}", ns):
            text = self._read_pod_log(pod_name, ns, kwargs)
        return iter(text.splitlines())

    # ------------------------------------------------------------------ stored logs

    def _stored_instead(
        self,
        obj: dict[str, Any],
        namespace: str,
        attempt: int,
        tail_lines: int | None,
        on_wait: Callable[[str], None],
        live_message: str,
    ) -> Iterator[str]:
        """The stored driver log when the live one is gone; both reasons when neither is."""
        try:
            on_wait(f"{live_message}; reading the stored driver log of attempt {attempt}")
            return self._stored_log(
                obj, namespace, attempt, reader.DRIVER_LOG, tail_lines, lambda _: None
            )
        except LogsUnavailableError as exc:
            raise LogsUnavailableError(f"{live_message}. Stored logs: {exc}") from exc

    def _stored_log(
        self,
        obj: dict[str, Any],
        namespace: str,
        attempt: int,
        file_name: str,
        tail_lines: int | None,
        on_wait: Callable[[str], None],
    ) -> Iterator[str]:
        """Read one stored file of an attempt through a reader pod, deleted before returning."""
        meta = Meta.from_metadata(obj.get("metadata") or {})
        name = meta.name
        try:
            # The spec the job runs with: its template's copy (status.template) merged in.
            effective = templates.effective_spec(obj.get("spec") or {}, obj.get("status") or {})
            spec = api.TrainJob.model_validate(
                {"metadata": obj.get("metadata") or {}, "spec": effective}
            ).spec
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "spec"
            raise LogsUnavailableError(
                driverlog.no_storage_message(name, attempt, f"{where}: {first['msg']}")
            ) from exc
        path = f"{reader.attempt_dir(spec, meta, attempt)}/{file_name}"
        manifest = reader.build_reader_pod(spec, meta, attempt, path)
        what = f"creating a log reader pod in namespace {namespace!r}"
        try:
            created = self._core.create_namespaced_pod(namespace, manifest)
        except ApiException as exc:
            if exc.status == 403:
                raise LogsUnavailableError(
                    driverlog.reader_forbidden_message(name, namespace, api_message(exc))
                ) from exc
            raise self._error(exc, what, namespace, None) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnreachableError(f"{what}: {exc}") from exc
        pod_name = str(created.metadata.name)
        try:
            on_wait(f"reading {path} with pod {pod_name}")
            pod = self._wait_for_reader(namespace, pod_name, on_wait)
            code, message = driverlog.reader_outcome(pod)
            if code == reader.EXIT_MISSING:
                raise LogsUnavailableError(
                    driverlog.not_stored_message(name, attempt, path, message)
                )
            if code != 0:
                raise LogsUnavailableError(
                    driverlog.reader_failed_message(
                        name, attempt, path, pod_name, 1 if code is None else code, message
                    )
                )
            kwargs: dict[str, Any] = {"container": reader.READER_CONTAINER}
            if tail_lines is not None and tail_lines >= 0:
                kwargs["tail_lines"] = tail_lines
            with self._api(f"reading the log of pod {namespace}/{pod_name}", namespace):
                text = self._read_pod_log(pod_name, namespace, kwargs)
            return iter(text.splitlines())
        finally:
            self._delete_reader(namespace, pod_name)

    def _read_pod_log(self, pod_name: str, namespace: str, kwargs: dict[str, Any]) -> str:
        """A container's log as text. Read raw: the kubernetes client turns a log it preloads
        into the repr of its bytes (``b'...'`` on one line)."""
        response = self._core.read_namespaced_pod_log(
            pod_name, namespace, _preload_content=False, **kwargs
        )
        data = response.data
        return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)

    def _wait_for_reader(
        self,
        namespace: str,
        pod_name: str,
        on_wait: Callable[[str], None],
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """The reader pod once its container has ended."""
        timeout = READER_TIMEOUT_S if timeout is None else timeout
        deadline = time.monotonic() + timeout
        said = ""
        while True:
            with self._api(f"reading pod {namespace}/{pod_name}", namespace):
                found = self._core.read_namespaced_pod(pod_name, namespace)
            pod: dict[str, Any] = self._api_client.sanitize_for_serialization(found)
            if driverlog.reader_outcome(pod)[0] is not None:
                return pod
            state = driverlog.container_state(pod, reader.READER_CONTAINER)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LogsUnavailableError(
                    driverlog.reader_stuck_message(pod_name, state.reason or "Running", timeout)
                )
            note = f"waiting for the log reader pod {pod_name} ({state.reason or 'Running'})"
            if note != said:
                on_wait(note)
                said = note
            version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
            try:
                for _ in watch.Watch().stream(
                    self._core.list_namespaced_pod,
                    namespace,
                    field_selector=f"metadata.name={pod_name}",
                    resource_version=version,
                    timeout_seconds=max(1, min(30, int(remaining))),
                ):
                    break
            except ApiException as exc:
                if exc.status != 410:
                    raise self._error(exc, f"watching pod {pod_name}", namespace, None) from exc

    def _delete_reader(self, namespace: str, pod_name: str) -> None:
        # A pod left behind (no right to delete, API gone) is removed with the TrainJob.
        with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
            self._core.delete_namespaced_pod(pod_name, namespace, grace_period_seconds=0)

    def _stream_log(self, pod_name: str, namespace: str, kwargs: dict[str, Any]) -> Iterator[str]:
        with self._api(f"following the log of pod {namespace}/{pod_name}", namespace):
            yield from watch.Watch().stream(
                self._core.read_namespaced_pod_log, pod_name, namespace, **kwargs
            )

    def _submitter_pod(self, namespace: str, rayjob: str) -> tuple[dict[str, Any] | None, str]:
        """The submitter pod (as a plain object) and the resourceVersion of the listing."""
        with self._api(f"listing the submitter pods of RayJob {namespace}/{rayjob}", namespace):
            listing = self._core.list_namespaced_pod(
                namespace, label_selector=driverlog.submitter_selector(rayjob)
            )
        pods = [self._api_client.sanitize_for_serialization(p) for p in listing.items]
        pod = driverlog.pick_submitter_pod(pods, rayjob)
        return (dict(pod) if pod is not None else None), str(listing.metadata.resource_version)

    def _rayjob_status(self, namespace: str, rayjob: str) -> dict[str, Any]:
        try:
            obj: dict[str, Any] = self._custom.get_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayjobs", rayjob
            )
        except (ApiException, urllib3.exceptions.HTTPError):
            # Only a hint depends on it: a user who may not read RayJobs still gets the message.
            return {}
        return dict(obj.get("status") or {})

    def _job_exists(self, namespace: str, name: str) -> bool:
        try:
            self._batch.read_namespaced_job(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _missing(self, namespace: str, job: TrainJob, rayjob: str) -> str:
        status = self._rayjob_status(namespace, rayjob)
        head_pod = ((status.get("rayClusterStatus") or {}).get("head") or {}).get("podName")
        with self._api(f"reading Job {namespace}/{rayjob}", namespace):
            exists = self._job_exists(namespace, rayjob)
        return driverlog.missing_message(
            job.name,
            job.phase,
            rayjob,
            job_exists=exists,
            head_pod=head_pod,
            job_id=status.get("jobId"),
        )

    def _wait_for_submitter(
        self, namespace: str, name: str, rayjob: str, on_wait: Callable[[str], None]
    ) -> str:
        """Block until the submitter container has started; its pod's name."""
        said = ""
        while True:
            pod, version = self._submitter_pod(namespace, rayjob)
            if pod is not None:
                state = driverlog.container_state(pod, SUBMITTER_CONTAINER)
                if state.started:
                    return str(pod["metadata"]["name"])
                note = f"waiting for the submitter pod {pod['metadata']['name']} ({state.reason})"
            else:
                job = TrainJob.from_object(self._get(name, namespace))
                if job.phase in driverlog.FINAL_PHASES:
                    raise LogsUnavailableError(self._missing(namespace, job, rayjob))
                note = (
                    f"waiting for KubeRay's submitter pod of RayJob {rayjob} "
                    f"(TrainJob phase: {job.phase})"
                )
            if note != said:
                on_wait(note)
                said = note
            # Any change to the Job's pods (or a minute without one) is worth another look.
            try:
                for _ in watch.Watch().stream(
                    self._core.list_namespaced_pod,
                    namespace,
                    label_selector=driverlog.submitter_selector(rayjob),
                    resource_version=version,
                    timeout_seconds=60,
                ):
                    break
            except ApiException as exc:
                if exc.status != 410:  # the listing's version expired: list again
                    raise self._error(
                        exc, f"watching pods of RayJob {rayjob}", namespace, None
                    ) from exc

    # ------------------------------------------------------------------ dashboard

    def dashboard_target(self, name: str, *, namespace: str | None = None) -> DashboardTarget:
        """The head Service of the job's current Ray cluster (KubeRay's `<cluster>-head-svc`)."""
        ns = self._ns(namespace)
        job = self.get_job(name, namespace=ns)
        if not job.ray_cluster_name:
            raise DashboardUnavailableError(
                f"TrainJob {ns}/{name} has no Ray cluster now (phase {job.phase}); a dashboard "
                f"exists only while a cluster runs: wait_for_job_status({name!r}, 'Running') "
                f"(`raytrain wait {name} --for Running`) first"
            )
        service = f"{job.ray_cluster_name}-head-svc"
        try:
            self._core.read_namespaced_service(service, ns)
        except ApiException as exc:
            if exc.status == 404:
                raise DashboardUnavailableError(
                    f"the head Service {ns}/{service} of TrainJob {name} (RayCluster "
                    f"{job.ray_cluster_name}) does not exist: KubeRay has not created it yet, "
                    f"or the cluster was removed (phase {job.phase})"
                ) from exc
            raise self._error(exc, f"reading Service {ns}/{service}", ns, None) from exc
        return DashboardTarget(ns, service, job.ray_cluster_name, job.attempt)

    def port_forward_dashboard(
        self,
        name: str,
        *,
        local_port: int = 8265,
        address: str = "127.0.0.1",
        namespace: str | None = None,
        kubectl: str = "kubectl",
        timeout: float = 30.0,
    ) -> DashboardSession:
        """Forward the current Ray cluster's dashboard to `address:local_port` (0: any free
        port) with `kubectl port-forward`; the session's `url` is where to open it. Close the
        session (or use it in a `with` block) to stop forwarding."""
        target = self.dashboard_target(name, namespace=namespace)
        return DashboardSession(
            target,
            local_port=local_port,
            address=address,
            kubectl=kubectl,
            kubeconfig=self._conn.kubeconfig,
            context=self._conn.context,
            timeout=timeout,
        )


_RAY_SUFFIX = "[a-z0-9]{5}"


def _about(event: Mapping[str, Any], job: TrainJob) -> bool:
    """Whether an Event concerns the TrainJob or an object made for one of its attempts.

    Events carry no owner, so children are recognised by their deterministic names: RayJob and
    submitter Job `<name>-<attempt>`, RayCluster `<rayjob>-<5>` and submitter pods the same
    shape, Ray pods `<raycluster>-...`. The attempt is a number, so TrainJob `a-1`'s children
    (`a-1-0...`) are never taken for attempt 1 of TrainJob `a`.
    """
    involved = event.get("involvedObject") or {}
    kind, obj_name = involved.get("kind"), str(involved.get("name") or "")
    if kind == api.KIND:
        if job.uid and involved.get("uid"):
            return bool(involved.get("uid") == job.uid)
        return obj_name == job.name
    rayjobs = "|".join(str(i) for i in range(job.attempt + 1))
    pattern = rf"{re.escape(job.name)}-(?:{rayjobs})(?:-{_RAY_SUFFIX}(?:-.+)?)?"
    return re.fullmatch(pattern, obj_name) is not None
