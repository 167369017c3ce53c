#!/usr/bin/env bash
# `make demo`: the whole flow on one machine.
#
# On real pods (the default where it can run: root, iproute2, Go; `make demo` builds what it
# needs first: the control plane, the real node, MinIO and the operator and trainer-runtime
# images): scripts/demo_realnode.py, inside a network namespace of its own, starts the local
# control plane with one real node, imports our two images, installs the chart (the operator runs
# as a pod), applies examples/digits.yaml and follows it to Succeeded on a real Ray head and two
# real workers, then stops everything again, also when a step fails or it is interrupted. `make
# up` starts the same world and leaves it running (`make shell` opens a shell in it, `make down`
# stops it).
#
# DEMO_MODE=harness (or where a real node cannot run: not root, no `ip`) runs the older flow,
# where the pods are KWOK's and never execute:
#
#   1. the local control plane (Kubernetes 1.36 + KWOK fake GPU nodes + the KubeRay operator),
#      built from Go modules the first time and cached under ~/.cache/raytrain;
#   2. MinIO on 127.0.0.1 as the S3 checkpoint store;
#   3. the raytrain operator, running against that cluster;
#   4. examples/digits.yaml applied with kubectl: the operator makes the RayJob, KubeRay the
#      Ray cluster, KWOK marks its pods Running on fake GPU nodes;
#   5. the trainer runtime run the way the head pod would run it (e2e/harness/run_head.py: the
#      pod's own environment, contract and service account, with a local Ray, because KWOK
#      pods never execute), reporting progress to the TrainJob;
#   6. `kubectl get rtj -w` shows it go through Running with progress to Succeeded, and the
#      checkpoints are listed from the bucket.
#
# Environment: DEMO_MODE (realnode or harness; default realnode where it can run),
# DEMO_NAMESPACE (default raytrain-demo), DEMO_EPOCHS (default: the example's). Harness mode
# only: DEMO_KEEP=1 keeps MinIO and the operator running at the end, DEMO_KUBECONFIG uses a
# running cluster of this kind instead of starting one (and picks harness mode when
# DEMO_MODE is unset); the cluster stays up either way
# (`make cluster-down` stops it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=../e2e/controlplane/versions.sh
source e2e/controlplane/versions.sh

NS="${DEMO_NAMESPACE:-raytrain-demo}"
PYTHON="${PYTHON:-python}"
mode="${DEMO_MODE:-}"
if [[ -z "$mode" ]]; then
  # A given cluster (DEMO_KUBECONFIG) is used as it is: the harness flow.
  if [[ -z "${DEMO_KUBECONFIG:-}" && "$(id -u)" == 0 ]] && command -v ip >/dev/null; then
    mode=realnode
  else
    mode=harness
  fi
fi
if [[ "$mode" == realnode ]]; then
  "$PYTHON" -c 'import raytrain_operator, yaml, boto3' 2>/dev/null ||
    { echo "demo: the project is not installed; run the demo with: make demo" >&2; exit 1; }
  exec bash e2e/netns/run.sh "$PYTHON" scripts/demo_realnode.py
fi
[[ "$mode" == harness ]] || { echo "demo: DEMO_MODE=$mode: expected realnode or harness" >&2; exit 2; }

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\ndemo: %s\n' "$*" >&2; exit 1; }

"$PYTHON" -c 'import ray, torch, sklearn, raytrain_operator, trainer_runtime' 2>/dev/null ||
  die "the runtime's dependencies are not installed; run the demo with: make demo (it installs them first)"
command -v go >/dev/null ||
  die "the local control plane is built with Go (1.26); install Go, or try the runtime alone: raytrain run examples/digits.yaml --local"

if ! bash e2e/controlplane/build.sh --check >/dev/null 2>&1; then
  say "First run: building Kubernetes 1.36, etcd, KWOK and KubeRay from Go modules"
  echo "This takes 10 minutes on 2 idle cores (up to 25 on a busy machine), module downloads"
  echo "included; it is cached under $CONTROLPLANE_CACHE and later runs start the cluster in"
  echo "about 15 seconds."
fi
if ! compgen -G "$RAYTRAIN_CACHE/minio-*/minio" >/dev/null; then
  echo "MinIO (the S3 endpoint) is built from Go modules too: 2 to 5 more minutes the first time."
fi

if [[ -n "${DEMO_KUBECONFIG:-}" ]]; then
  kubeconfig="$DEMO_KUBECONFIG"
else
  say "Starting the local control plane"
  kubeconfig="$(bash e2e/controlplane/cluster.sh up | sed -n 's/^KUBECONFIG=//p' | tail -n 1)"
  [[ -n "$kubeconfig" ]] || die "cluster.sh up did not print a kubeconfig"
fi
export KUBECONFIG="$kubeconfig"
KUBECTL="$(bindir k8s)/kubectl"
kc() { "$KUBECTL" "$@"; }
kc get nodes -L nvidia.com/gpu.product

work="$(mktemp -d "${TMPDIR:-/tmp}/raytrain-demo.XXXXXX")"
minio_state=""
operator_pid=""
watch_pid=""
cleanup() {
  local rc=$?
  [[ -n "$watch_pid" ]] && kill "$watch_pid" 2>/dev/null || true
  if [[ "${DEMO_KEEP:-}" != 1 ]]; then
    [[ -n "$operator_pid" ]] && kill "$operator_pid" 2>/dev/null && wait "$operator_pid" 2>/dev/null || true
    [[ -n "$minio_state" ]] && bash e2e/minio/stop.sh "$minio_state" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 ]]; then
    echo "demo failed; logs are in $work (operator.log, harness.log)" >&2
  fi
  exit $rc
}
trap cleanup EXIT INT TERM

say "Starting MinIO on 127.0.0.1 (bucket: raytrain)"
minio_out="$(bash e2e/minio/start.sh raytrain | tail -n 1)"
for kv in $minio_out; do
  case "$kv" in
    endpoint=*) s3_endpoint="${kv#endpoint=}" ;;
    access_key=*) s3_key="${kv#access_key=}" ;;
    secret_key=*) s3_secret="${kv#secret_key=}" ;;
    state=*) minio_state="${kv#state=}" ;;
  esac
done
[[ -n "${s3_endpoint:-}" && -n "${minio_state:-}" ]] || die "MinIO did not start: $minio_out"
echo "S3 endpoint: $s3_endpoint"

say "Starting the raytrain operator (namespace $NS; log: $work/operator.log)"
kc create namespace "$NS" --dry-run=client -o yaml | kc apply -f - >/dev/null
read -r metrics_port health_port < <("$PYTHON" - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)
"$PYTHON" -m raytrain_operator --namespace "$NS" --bind-address 127.0.0.1 \
  --metrics-port "$metrics_port" --health-port "$health_port" >"$work/operator.log" 2>&1 &
operator_pid=$!
if kc get rtj digits -n "$NS" >/dev/null 2>&1; then
  echo "removing the TrainJob left by an earlier demo"
  kc delete rtj digits -n "$NS" --wait=true --timeout=120s >/dev/null
fi

say "kubectl apply -f examples/digits.yaml (S3 endpoint pointed at the local MinIO)"
sed -e "s#http://minio.raytrain-system:9000#$s3_endpoint#" \
  -e "s#AWS_ACCESS_KEY_ID: .*#AWS_ACCESS_KEY_ID: $s3_key#" \
  -e "s#AWS_SECRET_ACCESS_KEY: .*#AWS_SECRET_ACCESS_KEY: $s3_secret#" \
  examples/digits.yaml >"$work/digits.yaml"
if [[ -n "${DEMO_EPOCHS:-}" ]]; then
  sed -i "s/^    epochs: .*/    epochs: $DEMO_EPOCHS/" "$work/digits.yaml"
fi
kc apply -n "$NS" -f "$work/digits.yaml"
kc wait -n "$NS" rtj/digits --for=condition=Created --timeout=120s >/dev/null ||
  { tail -n 30 "$work/operator.log" >&2; die "the operator did not create the RayJob"; }
rayjob="$(kc get -n "$NS" rtj digits -o jsonpath='{.status.rayJobName}')"
echo
echo "The operator made RayJob $rayjob; KubeRay made its Ray cluster, KWOK runs the pods:"
sleep 3
kc get -n "$NS" rayjobs,rayclusters
kc get -n "$NS" pods -o wide

say "kubectl get rtj digits -w   (training runs below; its log: $work/harness.log)"
# Started directly (not through kc) so that $! is kubectl itself and the kill below reaches it.
"$KUBECTL" get -n "$NS" rtj digits -w &
watch_pid=$!

# The head pod's entrypoint, run here with the pod's environment and service account.
"$PYTHON" e2e/harness/run_head.py --kubeconfig "$KUBECONFIG" --namespace "$NS" \
  --trainjob digits --workdir "$work/head" >"$work/harness.log" 2>&1 ||
  { tail -n 40 "$work/harness.log" >&2; die "the trainer runtime failed (the TrainJob says why: kubectl describe rtj digits -n $NS)"; }

kc wait -n "$NS" rtj/digits --for=condition=Succeeded --timeout=120s >/dev/null ||
  die "the TrainJob did not reach Succeeded: $(kc get -n "$NS" rtj digits -o jsonpath='{.status.conditions}')"
sleep 1
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
watch_pid=""

say "raytrain get digits"
raytrain get digits -n "$NS"

say "Checkpoints in s3://raytrain (MinIO at $s3_endpoint)"
"$PYTHON" - "$s3_endpoint" "$s3_key" "$s3_secret" <<'PY'
import sys
import boto3
from botocore.config import Config

endpoint, key, secret = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
checkpoints: dict[str, int] = {}
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="raytrain", Prefix="checkpoints/"):
    for obj in page.get("Contents", []):
        parts = obj["Key"].split("/")
        # A checkpoint is a directory checkpoint_<time>/ (files beside them are Ray's index).
        dirs = [i for i, p in enumerate(parts[:-1]) if p.startswith("checkpoint_")]
        if dirs:
            prefix = "/".join(parts[: dirs[0] + 1])
            checkpoints[prefix] = checkpoints.get(prefix, 0) + obj["Size"]
if not checkpoints:
    sys.exit("no checkpoint in the bucket")
for prefix, size in sorted(checkpoints.items()):
    print(f"s3://raytrain/{prefix}  ({size / 1024:.0f} KiB)")
PY

say "Done"
echo "The cluster is still up: KUBECONFIG=$KUBECONFIG  (make cluster-down stops it)"
if [[ "${DEMO_KEEP:-}" == 1 ]]; then
  echo "MinIO ($s3_endpoint, state $minio_state) and the operator (pid $operator_pid) keep running."
fi
