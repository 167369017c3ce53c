"""Reading an attempt's stored logs: the reader pod's spec (raytrain/reader.py), and
`raytrain logs --attempt/--worker/--metrics` against a loopback API server that records the
requests the CLI really sends (create the reader pod, wait for it, read its log, delete it)."""

from __future__ import annotations

import copy
import json
import posixpath
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import _factories as f
import pytest
from kubernetes import client

from raytrain import LogsUnavailableError, TrainJobClient, reader
from raytrain import client as sdk_module
from raytrain.cli import build_parser, cluster
from raytrain_contract.pods import run_name
from raytrain_operator.builders.pods import build_pod_template

RUN = run_name("digits", f.UID)
S3_DIR = f"s3://bucket/prefix/{RUN}"

# -- the pod spec ---------------------------------------------------------------------------------


def test_the_names_are_the_runtimes() -> None:
    from trainer_runtime import runlog

    assert reader.ATTEMPT_DIR == runlog.ATTEMPT_DIR
    assert (reader.DRIVER_LOG, reader.METRICS) == (runlog.DRIVER_LOG, runlog.METRICS)
    assert reader.WORKER_ERROR == runlog.WORKER_ERROR
    assert reader.EXIT_MISSING == runlog.EXIT_MISSING
    job = f.trainjob()
    assert reader.attempt_dir(job.spec, f.meta(), 4) == "s3://" + runlog.attempt_path(
        "bucket/prefix", RUN, 4
    )


def test_the_reader_of_an_s3_job_has_the_heads_storage_wiring_and_nothing_else() -> None:
    job = f.trainjob(
        head={
            "env": [{"name": "AWS_CA_BUNDLE", "value": "/etc/ca.pem"}],
            "envFrom": [{"secretRef": {"name": "proxy"}}],
            "serviceAccountName": "s3-reader",
            "nodeSelector": {"pool": "cpu"},
        },
        imagePullPolicy="IfNotPresent",
    )
    path = f"{S3_DIR}/attempt-1/driver.log"
    pod = reader.build_reader_pod(job.spec, f.meta(), 1, path)
    head = build_pod_template(job.spec, f.meta(), 1, "head", job.spec.head)["spec"]
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["image"] == "raytrain/trainer-runtime:0.1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["command"] == [
        "python",
        "-m",
        "trainer_runtime.runlog",
        "cat",
        path,
        "--message-file",
        "/dev/termination-log",
    ]
    head_env = head["containers"][0]["env"]
    assert container["env"] == [e for e in head_env if not e["name"].startswith("RAYTRAIN_")]
    names = [e["name"] for e in container["env"]]
    assert names[:2] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "digits-s3"
    assert {"AWS_ENDPOINT_URL", "AWS_REGION", "AWS_CA_BUNDLE"} <= set(names)
    assert container["envFrom"] == [{"secretRef": {"name": "proxy"}}]
    # No contract ConfigMap (gone with a finished job) and no /dev/shm: only storage.
    assert spec["volumes"] == [] and container["volumeMounts"] == []
    assert spec["serviceAccountName"] == "s3-reader" == head["serviceAccountName"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] > 0
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert spec["nodeSelector"] == {"pool": "cpu"}
    meta = pod["metadata"]
    assert meta["generateName"] == "digits-logs-" and meta["namespace"] == "team-a"
    assert meta["labels"]["raytrain.dev/role"] == "log-reader"
    assert meta["labels"]["raytrain.dev/attempt"] == "1"
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", f.UID)
    assert owner["controller"] is False and owner["blockOwnerDeletion"] is False


def test_the_reader_of_a_pvc_job_mounts_the_claim_where_the_pods_do() -> None:
    job = f.trainjob(
        storage={"pvc": {"claimName": "ckpt", "mountPath": "/mnt/ckpt", "subPath": "team/"}}
    )
    directory = reader.attempt_dir(job.spec, f.meta(), 0)
    assert directory == f"/mnt/ckpt/team/{RUN}/attempt-0"
    pod = reader.build_reader_pod(job.spec, f.meta(), 0, f"{directory}/metrics.jsonl")
    (container,) = pod["spec"]["containers"]
    assert pod["spec"]["volumes"] == [
        {"name": "raytrain-storage", "persistentVolumeClaim": {"claimName": "ckpt"}}
    ]
    assert container["volumeMounts"] == [{"name": "raytrain-storage", "mountPath": "/mnt/ckpt"}]
    assert container["env"] == []
    # The per-job account is for the Kubernetes API only, and goes after the job's TTL.
    assert "serviceAccountName" not in pod["spec"]


@pytest.mark.parametrize(
    "storage",
    [
        {"s3": {"uri": "s3://bucket/prefix/"}},
        {"pvc": {"claimName": "ckpt", "mountPath": "/mnt/ckpt", "subPath": "/team/a/"}},
        {"pvc": {"claimName": "ckpt", "mountPath": "/mnt/ckpt"}},
    ],
)
def test_the_reader_looks_where_the_contract_tells_the_runtime_to_write(
    storage: dict[str, Any],
) -> None:
    """The SDK finds stored files where the runtime wrote them: under the storage path and run
    name the operator renders into the contract (builders/contract.py)."""
    from raytrain_operator.builders.contract import build_contract

    job = f.trainjob(storage=storage)
    contract = build_contract(job, f.meta(), attempt=3)
    expected = posixpath.join(contract.storage.path, contract.run_name, "attempt-3")
    assert reader.attempt_dir(job.spec, f.meta(), 3) == expected


def test_the_file_names() -> None:
    assert reader.stored_file_name() == "driver.log"
    assert reader.stored_file_name(metrics=True) == "metrics.jsonl"
    assert reader.stored_file_name(worker=3) == "worker-3.error.txt"
    assert reader.stored_file_name(stacks=True) == "stacks.txt"
    # The runtime writes the names the reader reads (the SDK keeps a copy of them).
    from trainer_runtime import runlog

    assert (reader.STACKS, reader.METRICS, reader.DRIVER_LOG, reader.WORKER_ERROR) == (
        runlog.STACKS,
        runlog.METRICS,
        runlog.DRIVER_LOG,
        runlog.WORKER_ERROR,
    )


def test_the_parser_takes_attempt_worker_and_metrics() -> None:
    args = build_parser().parse_args(["logs", "digits", "--attempt", "0", "--worker", "1"])
    assert (args.attempt, args.worker, args.metrics) == (0, 1, False)
    args = build_parser().parse_args(["logs", "digits", "--metrics"])
    assert (args.attempt, args.worker, args.metrics) == (None, None, True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["logs", "digits", "--worker", "1", "--metrics"])
    args = build_parser().parse_args(["logs", "digits", "--attempt", "2", "--stacks"])
    assert (args.attempt, args.stacks) == (2, True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["logs", "digits", "--stacks", "--metrics"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["logs", "digits", "--attempt", "-1"])


# -- the CLI against a loopback API server --------------------------------------------------------

READER = "digits-logs-x7k2p"


class _API(BaseHTTPRequestHandler):
    """The TrainJob, no submitter pod and no RayJob, and a reader pod that ends as told."""

    requests: list[dict[str, Any]] = []
    trainjob: dict[str, Any] = {}
    #: The reader's states, one per read; the last repeats.
    reader_states: list[dict[str, Any]] = []
    reader_log = ""
    create_status = 201

    def _send(self, status: int, body: Any, raw: bool = False) -> None:
        out = body.encode() if raw else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if raw else "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def _record(self) -> tuple[str, dict[str, list[str]]]:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        _API.requests.append(
            {"method": self.command, "path": url.path, "query": query, "body": body}
        )
        return url.path, query

    def _reader_pod(self) -> dict[str, Any]:
        state = _API.reader_states.pop(0) if len(_API.reader_states) > 1 else _API.reader_states[0]
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": READER, "namespace": "team-a", "resourceVersion": "5"},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "runlog",
                        "state": state,
                        "ready": False,
                        "restartCount": 0,
                        "image": "i",
                        "imageID": "",
                    }
                ],
            },
        }

    def do_GET(self) -> None:
        path, query = self._record()
        pods = "/api/v1/namespaces/team-a/pods"
        if path == "/apis/raytrain.dev/v1alpha1/namespaces/team-a/trainjobs/digits":
            self._send(200, _API.trainjob)
        elif path == pods and "watch" in query:
            self._send(
                200, json.dumps({"type": "MODIFIED", "object": self._reader_pod()}) + "\n", raw=True
            )
        elif path == pods:
            self._send(200, {"kind": "PodList", "items": [], "metadata": {"resourceVersion": "1"}})
        elif path == f"{pods}/{READER}":
            self._send(200, self._reader_pod())
        elif path == f"{pods}/{READER}/log":
            self._send(200, _API.reader_log, raw=True)
        else:  # the RayJob, KubeRay's submitter Job
            self._send(
                404,
                {
                    "kind": "Status",
                    "code": 404,
                    "reason": "NotFound",
                    "details": {"name": path.rsplit("/", 1)[-1], "kind": "jobs"},
                },
            )

    def do_POST(self) -> None:
        self._record()
        if _API.create_status != 201:
            self._send(
                _API.create_status,
                {
                    "kind": "Status",
                    "code": _API.create_status,
                    "message": 'pods is forbidden: User "ana" cannot create resource "pods"',
                },
            )
            return
        body = copy.deepcopy(_API.requests[-1]["body"])
        body["metadata"]["name"] = READER
        self._send(201, body)

    def do_DELETE(self) -> None:
        self._record()
        self._send(200, {"kind": "Status", "status": "Success"})

    def log_message(self, *args: Any) -> None:
        pass


def _trainjob(attempt: int, phase: str, **spec: Any) -> dict[str, Any]:
    doc = f.manifest(**spec)
    doc["status"] = {"phase": phase, "attempt": attempt, "rayJobName": f"digits-{attempt}"}
    return doc


DONE = {"terminated": {"exitCode": 0}}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_API]]:
    _API.requests = []
    _API.trainjob = _trainjob(1, "Running")
    _API.reader_states = [DONE]
    _API.reader_log = "run digits, attempt 0: 2 workers\ntraining failed: worker 1: ValueError\n"
    _API.create_status = 201
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _API)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{httpd.server_address[1]}"
    sdk = TrainJobClient("team-a", api_client=client.ApiClient(config))
    monkeypatch.setattr(cluster, "_client", lambda args: sdk)
    try:
        yield _API
    finally:
        httpd.shutdown()
        httpd.server_close()


def _logs(*argv: str) -> int:
    return cluster.logs(build_parser().parse_args(["logs", "digits", "-n", "team-a", *argv]))


def _created(api: type[_API]) -> list[dict[str, Any]]:
    return [r["body"] for r in api.requests if r["method"] == "POST"]


def _deleted(api: type[_API]) -> list[str]:
    return [r["path"].rsplit("/", 1)[-1] for r in api.requests if r["method"] == "DELETE"]


def test_an_earlier_attempt_is_read_through_a_reader_pod_that_is_then_deleted(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    api.reader_states = [{"waiting": {"reason": "ContainerCreating"}}, DONE]
    assert _logs("--attempt", "0", "--tail", "5") == 0
    assert capsys.readouterr().out == api.reader_log
    (pod,) = _created(api)
    assert pod["spec"]["containers"][0]["command"][4] == f"{S3_DIR}/attempt-0/driver.log"
    assert pod["metadata"]["labels"]["raytrain.dev/attempt"] == "0"
    log_reads = [r for r in api.requests if r["path"].endswith("/log")]
    assert log_reads[0]["query"] == {"container": ["runlog"], "tailLines": ["5"]}
    # it watched the pod between reads instead of polling, and deleted it last
    assert any("watch" in r["query"] for r in api.requests)
    assert api.requests[-1]["method"] == "DELETE" and _deleted(api) == [READER]
    # the submitter of the current attempt was not looked at
    assert not any("labelSelector" in r["query"] for r in api.requests)


def test_a_workers_error_and_the_metrics_are_stored_files(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _logs("--worker", "1") == 0
    assert _logs("--attempt", "1", "--metrics") == 0
    assert _logs("--attempt", "1", "--stacks") == 0
    paths = [p["spec"]["containers"][0]["command"][4] for p in _created(api)]
    assert paths == [
        f"{S3_DIR}/attempt-1/worker-1.error.txt",
        f"{S3_DIR}/attempt-1/metrics.jsonl",
        f"{S3_DIR}/attempt-1/stacks.txt",
    ]
    assert _deleted(api) == [READER, READER, READER]


def test_a_missing_file_names_the_attempt_the_path_and_why(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    held = f"bucket/prefix/{RUN}/attempt-0 holds: driver.log, metrics.jsonl"
    api.reader_states = [{"terminated": {"exitCode": 3, "message": f"no file X; {held}"}}]
    assert _logs("--attempt", "0", "--worker", "2") == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"attempt 0 of TrainJob digits at {S3_DIR}/attempt-0/worker-2.error.txt" in err
    assert held in err and "only for a worker that failed" in err
    assert _deleted(api) == [READER]


def test_an_attempt_that_never_started_creates_no_pod(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _logs("--attempt", "5") == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "attempt 5 of TrainJob digits: that attempt never started" in err
    assert "between 0 and 1" in err
    assert _created(api) == []


def test_a_failed_job_without_its_cluster_falls_back_to_the_stored_driver_log(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    api.trainjob = _trainjob(1, "Failed")
    assert _logs() == 0
    captured = capsys.readouterr()
    assert captured.out == api.reader_log
    assert "reading the stored driver log of attempt 1" in " ".join(captured.err.split())
    (pod,) = _created(api)
    assert pod["spec"]["containers"][0]["command"][4] == f"{S3_DIR}/attempt-1/driver.log"
    assert _deleted(api) == [READER]


def test_a_running_job_without_a_submitter_yet_creates_no_reader(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _logs() == 1
    assert "does not exist yet" in capsys.readouterr().err
    assert _created(api) == []


def test_no_right_to_create_pods_says_which_rbac_is_needed(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    api.create_status = 403
    assert _logs("--attempt", "0") == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "reader pod in namespace 'team-a'" in err and 'cannot create resource "pods"' in err
    assert "pods: create, get, watch, delete; pods/log: get" in err


def test_a_reader_that_never_starts_is_deleted_after_the_deadline(
    api: type[_API], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sdk_module, "READER_TIMEOUT_S", 0.5)
    api.reader_states = [{"waiting": {"reason": "ImagePullBackOff"}}]
    assert _logs("--attempt", "0") == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"the log reader pod {READER} did not finish in 0.5 s (ImagePullBackOff)" in err
    assert _deleted(api) == [READER]


def test_ctrl_c_while_waiting_still_deletes_the_reader(api: type[_API]) -> None:
    api.reader_states = [{"waiting": {"reason": "ContainerCreating"}}]
    sdk = TrainJobClient("team-a", api_client=cluster._client(None)._api_client)  # type: ignore[arg-type]

    def interrupt(note: str) -> None:
        if "waiting for the log reader pod" in note:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sdk.get_job_logs("digits", attempt=0, on_wait=interrupt)
    assert _deleted(api) == [READER]


def test_a_job_without_usable_storage_says_so(api: type[_API]) -> None:
    api.trainjob = _trainjob(1, "Running")
    del api.trainjob["spec"]["storage"]
    sdk = cluster._client(None)  # type: ignore[arg-type]
    with pytest.raises(LogsUnavailableError, match=r"attempt 0 of TrainJob digits: its storage"):
        sdk.get_job_logs("digits", attempt=0)
    assert _created(api) == []


def test_the_named_attempt_of_a_finished_job_is_read_from_storage(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    api.trainjob = _trainjob(1, "Failed")
    assert _logs("--attempt", "1") == 0
    assert capsys.readouterr().out == api.reader_log
    (pod,) = _created(api)
    assert pod["spec"]["containers"][0]["command"][4] == f"{S3_DIR}/attempt-1/driver.log"
    assert not any("labelSelector" in r["query"] for r in api.requests)


def test_follow_on_a_failed_job_without_its_submitter_reads_the_stored_log(
    api: type[_API], capsys: pytest.CaptureFixture[str]
) -> None:
    api.trainjob = _trainjob(1, "Failed")
    assert _logs("-f") == 0
    assert capsys.readouterr().out == api.reader_log
    assert _deleted(api) == [READER]
