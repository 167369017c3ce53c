"""Test stand-in for pod execution: run the trainer runtime the way the Ray head pod would.

On the local control plane the nodes are KWOK fakes: pods are scheduled and marked Running, but
no container ever executes. This harness takes the head pod template that the operator put into
the TrainJob's RayJob and runs its entrypoint here, with

- the same environment (plain values, Secret and ConfigMap references, field references),
- the same files (the contract ConfigMap, written to a temporary directory that stands in for
  its mount path; a PVC mount path is mapped to a local directory the same way),
- the pod's own ServiceAccount: a token requested for it through the TokenRequest API, so the
  runtime's status reports go through exactly the RBAC the operator granted that pod,
- a local Ray instead of the pod's Ray cluster.

It is part of the test world, not of the product: neither the operator nor the runtime knows it
exists.

    python e2e/harness/run_head.py --kubeconfig KCFG --namespace NS --trainjob NAME
"""

from __future__ import annotations

import argparse
import base64
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

ROOT = pathlib.Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "raytrain.dev", "v1alpha1", "trainjobs"


def _wait_for_rayjob(
    custom: client.CustomObjectsApi, namespace: str, name: str, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        rayjob_name = (job.get("status") or {}).get("rayJobName")
        if rayjob_name:
            try:
                rayjob: dict[str, Any] = custom.get_namespaced_custom_object(
                    "ray.io", "v1", namespace, "rayjobs", rayjob_name
                )
                return rayjob
            except ApiException as exc:
                if exc.status != 404:
                    raise
        if time.monotonic() > deadline:
            raise SystemExit(f"harness: TrainJob {namespace}/{name} has no RayJob after {timeout}s")
        time.sleep(0.5)


def _resolve_env(
    core: client.CoreV1Api, namespace: str, container: dict[str, Any], pod: dict[str, Any]
) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "secretRef" in source:
            secret = core.read_namespaced_secret(source["secretRef"]["name"], namespace)
            for key, value in (secret.data or {}).items():
                env[prefix + key] = base64.b64decode(value).decode()
        if "configMapRef" in source:
            cm = core.read_namespaced_config_map(source["configMapRef"]["name"], namespace)
            for key, value in (cm.data or {}).items():
                env[prefix + key] = value
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        ref = var.get("valueFrom") or {}
        if "secretKeyRef" in ref:
            secret = core.read_namespaced_secret(ref["secretKeyRef"]["name"], namespace)
            env[var["name"]] = base64.b64decode(secret.data[ref["secretKeyRef"]["key"]]).decode()
        elif "configMapKeyRef" in ref:
            cm = core.read_namespaced_config_map(ref["configMapKeyRef"]["name"], namespace)
            env[var["name"]] = cm.data[ref["configMapKeyRef"]["key"]]
        elif "fieldRef" in ref:
            path = ref["fieldRef"]["fieldPath"]
            env[var["name"]] = {
                "metadata.namespace": namespace,
                "metadata.name": pod.get("metadata", {}).get("name", "head"),
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
            }.get(path, "")
    return env


def _materialise_volumes(
    core: client.CoreV1Api,
    namespace: str,
    pod_spec: dict[str, Any],
    container: dict[str, Any],
    workdir: pathlib.Path,
) -> dict[str, str]:
    """Write ConfigMap volumes to disk and map PVC mounts to local directories.

    Returns mount path → local directory, for rewriting paths the runtime reads.
    """
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    mapping: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"], {})
        local = workdir / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            cm = core.read_namespaced_config_map(volume["configMap"]["name"], namespace)
            for key, value in (cm.data or {}).items():
                (local / key).write_text(value)
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            local = workdir / "pvc" / claim
            local.mkdir(parents=True, exist_ok=True)
        else:
            continue
        mapping[mount["mountPath"].rstrip("/")] = str(local)
    return mapping


def _rewrite(value: str, mapping: dict[str, str]) -> str:
    for mount_path, local in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
        if value == mount_path or value.startswith(mount_path + "/"):
            return local + value[len(mount_path) :]
    return value


def _service_account_kubeconfig(
    api_client: client.ApiClient, namespace: str, service_account: str, path: pathlib.Path
) -> None:
    core = client.CoreV1Api(api_client)
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = core.create_namespaced_service_account_token(service_account, namespace, request)
    cfg = api_client.configuration
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": cfg.host,
                    "certificate-authority": cfg.ssl_ca_cert,
                },
            }
        ],
        "users": [{"name": service_account, "user": {"token": token.status.token}}],
        "contexts": [
            {
                "name": "sa",
                "context": {"cluster": "c", "user": service_account, "namespace": namespace},
            }
        ],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(kubeconfig))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--trainjob", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--workdir", help="where mounted files go (default: a temp dir)")
    args = parser.parse_args(argv)

    config.load_kube_config(config_file=args.kubeconfig)
    api_client = client.ApiClient()
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    rayjob = _wait_for_rayjob(custom, args.namespace, args.trainjob, args.timeout)
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    pod_spec = head["spec"]
    container = pod_spec["containers"][0]

    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="raytrain-harness-"))
    mapping = _materialise_volumes(core, args.namespace, pod_spec, container, workdir)
    env = _resolve_env(core, args.namespace, container, head)
    env = {key: _rewrite(value, mapping) for key, value in env.items()}
    service_account = pod_spec.get("serviceAccountName", "default")
    sa_kubeconfig = workdir / "serviceaccount.kubeconfig"
    _service_account_kubeconfig(api_client, args.namespace, service_account, sa_kubeconfig)

    contract_path = pathlib.Path(env.get("RAYTRAIN_CONTRACT", ""))
    if contract_path.is_file():
        # The contract names pod paths (a PVC's mount path); point them at the local stand-ins.
        text = contract_path.read_text()
        for mount_path, local in mapping.items():
            text = text.replace(f'"{mount_path}/', f'"{local}/').replace(
                f'"{mount_path}"', f'"{local}"'
            )
        contract_path.write_text(text)

    run_env = {
        key: value
        for key, value in os.environ.items()
        if key in {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "USER", "TERM"}
    }
    run_env.update(env)
    run_env["KUBECONFIG"] = str(sa_kubeconfig)
    run_env.setdefault("PYTHONPATH", str(ROOT))
    command = shlex.split(rayjob["spec"]["entrypoint"])
    if command and command[0] == "python":
        command[0] = sys.executable
    print(
        f"harness: running the head pod's entrypoint of RayJob {rayjob['metadata']['name']} "
        f"here (KWOK pods do not execute): {' '.join(command)}",
        flush=True,
    )
    return subprocess.call(command, env=run_env, cwd=str(ROOT))


if __name__ == "__main__":
    sys.exit(main())
