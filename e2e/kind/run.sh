#!/usr/bin/env bash
# End-to-end run on kind, for CI machines with a Docker engine (GitHub Actions runners, a
# laptop). It builds both images, installs KubeRay and this chart, runs examples/digits.yaml
# against MinIO, and passes when the TrainJob reaches Succeeded and a checkpoint is in the bucket.
#
#   bash e2e/kind/run.sh                # create the cluster, run, delete the cluster
#   KEEP_CLUSTER=1 bash e2e/kind/run.sh # leave the cluster up to look around
#
# Needs: docker, kind, kubectl, helm (v3.8+ or v4; falls back to scripts/helm.sh).
set -euo pipefail

cd "$(dirname "$0")/../.."

CLUSTER="${CLUSTER:-raytrain-e2e}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-}"
KUBERAY_VERSION="${KUBERAY_VERSION:-1.6.2}"
# MinIO's last community images are from 2025; this tag is pinned, override to move it.
MINIO_IMAGE="${MINIO_IMAGE:-quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z}"
OPERATOR_IMAGE="${OPERATOR_IMAGE:-raytrain/operator:e2e}"
RUNTIME_IMAGE="${RUNTIME_IMAGE:-raytrain/trainer-runtime:e2e}"
# CPU wheels keep the runtime image small enough to `kind load` (the PyPI torch is the CUDA build).
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
SYSTEM_NS="raytrain-system"
JOB_NS="${JOB_NS:-e2e}"
TIMEOUT="${TIMEOUT:-30m}"

log() { echo "[e2e-kind] $(date -u +%H:%M:%S) $*" >&2; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { log "$tool is not on PATH"; exit 1; }
done
HELM="${HELM:-$(command -v helm || bash scripts/helm.sh)}"

dump() {
  log "diagnostics"
  set +e
  kubectl get trainjobs.raytrain.dev,rayjobs.ray.io,rayclusters.ray.io,pods -A -o wide
  kubectl -n "$JOB_NS" get trainjobs.raytrain.dev digits -o yaml
  kubectl -n "$JOB_NS" describe rayjobs.ray.io
  kubectl -n "$JOB_NS" get events --sort-by=.lastTimestamp | tail -n 50
  kubectl -n "$SYSTEM_NS" logs deploy/raytrain-operator --tail=200
  kubectl -n kuberay-system logs deploy/kuberay-operator --tail=100
  for pod in $(kubectl -n "$JOB_NS" get pods -o name); do
    echo "--- $pod"
    kubectl -n "$JOB_NS" logs "$pod" --all-containers --tail=100
  done
}

cleanup() {
  local rc=$?
  if ((rc != 0)); then dump; fi
  if [[ "${KEEP_CLUSTER:-0}" != "1" ]]; then
    kind delete cluster --name "$CLUSTER" || true
  fi
  exit "$rc"
}

# A Python snippet run inside the runtime image, against MinIO, with pyarrow's S3 client (the
# one the runtime itself uses; boto3 is not in the image). Prints its logs.
s3_python() {
  local name="$1" script="$2"
  kubectl -n "$SYSTEM_NS" delete pod "$name" --ignore-not-found --wait=true >/dev/null
  kubectl -n "$SYSTEM_NS" run "$name" --restart=Never --image="$RUNTIME_IMAGE" \
    --image-pull-policy=IfNotPresent \
    --env=AWS_ACCESS_KEY_ID=raytrain --env=AWS_SECRET_ACCESS_KEY=raytrain-secret \
    --env=AWS_ENDPOINT_URL=http://minio.raytrain-system:9000 --env=AWS_DEFAULT_REGION=us-east-1 \
    --command -- python -c "$script"
  if ! kubectl -n "$SYSTEM_NS" wait pod "$name" --timeout=5m \
      --for=jsonpath='{.status.phase}'=Succeeded; then
    kubectl -n "$SYSTEM_NS" logs "$name" || true
    return 1
  fi
  kubectl -n "$SYSTEM_NS" logs "$name"
  kubectl -n "$SYSTEM_NS" delete pod "$name" --wait=false >/dev/null
}

log "creating kind cluster $CLUSTER"
kind_args=(--name "$CLUSTER" --config e2e/kind/kind-config.yaml --wait 180s)
[[ -n "$KIND_NODE_IMAGE" ]] && kind_args+=(--image "$KIND_NODE_IMAGE")
kind create cluster "${kind_args[@]}"
trap cleanup EXIT
kubectl cluster-info --context "kind-$CLUSTER"

log "building $OPERATOR_IMAGE and $RUNTIME_IMAGE"
docker build --target operator -t "$OPERATOR_IMAGE" .
docker build --target trainer-runtime --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL" \
  -t "$RUNTIME_IMAGE" .
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$RUNTIME_IMAGE"

log "installing KubeRay $KUBERAY_VERSION"
"$HELM" repo add kuberay https://ray-project.github.io/kuberay-helm/ --force-update
"$HELM" install kuberay-operator kuberay/kuberay-operator --version "$KUBERAY_VERSION" \
  --namespace kuberay-system --create-namespace --wait --timeout 5m

log "installing raytrain-operator from charts/raytrain-operator"
"$HELM" install raytrain-operator charts/raytrain-operator \
  --namespace "$SYSTEM_NS" --create-namespace \
  --set image.repository="${OPERATOR_IMAGE%:*}" --set image.tag="${OPERATOR_IMAGE##*:}" \
  --set networkPolicy.kuberay.namespace=kuberay-system \
  --set verbose=true --wait --timeout 5m
kubectl get crd trainjobs.raytrain.dev

log "starting MinIO ($MINIO_IMAGE)"
sed "s#image: MINIO_IMAGE#image: $MINIO_IMAGE#" e2e/kind/minio.yaml | kubectl apply -f -
kubectl -n "$SYSTEM_NS" rollout status deploy/minio --timeout=5m
s3_python mkbucket "
import os
from urllib.parse import urlparse
import pyarrow.fs as pafs
url = urlparse(os.environ['AWS_ENDPOINT_URL'])
s3 = pafs.S3FileSystem(endpoint_override=url.netloc, scheme=url.scheme,
                       region=os.environ['AWS_DEFAULT_REGION'], allow_bucket_creation=True)
if s3.get_file_info('raytrain').type == pafs.FileType.NotFound:
    s3.create_dir('raytrain')
print('bucket raytrain ready')
"

log "applying examples/digits.yaml in namespace $JOB_NS with image $RUNTIME_IMAGE"
kubectl create namespace "$JOB_NS"
# The chart's operator manages only the namespaces opted in (its default namespaceSelector).
kubectl label namespace "$JOB_NS" raytrain.dev/enabled=true
sed "s#image: raytrain/trainer-runtime:[^[:space:]]*#image: $RUNTIME_IMAGE#" examples/digits.yaml \
  | kubectl -n "$JOB_NS" apply -f -
kubectl -n "$JOB_NS" get trainjobs.raytrain.dev digits -o jsonpath='{.spec.image}{"\n"}' \
  | grep -qx "$RUNTIME_IMAGE" || { log "image substitution failed"; exit 1; }

log "waiting up to $TIMEOUT for condition Succeeded"
kubectl -n "$JOB_NS" wait --for=condition=Succeeded trainjobs.raytrain.dev/digits \
  --timeout="$TIMEOUT"
kubectl -n "$JOB_NS" get trainjobs.raytrain.dev digits -o wide

log "looking for a checkpoint in s3://raytrain/checkpoints/"
s3_python s3check "
import os, sys
from urllib.parse import urlparse
import pyarrow.fs as pafs
url = urlparse(os.environ['AWS_ENDPOINT_URL'])
s3 = pafs.S3FileSystem(endpoint_override=url.netloc, scheme=url.scheme,
                       region=os.environ['AWS_DEFAULT_REGION'])
infos = s3.get_file_info(pafs.FileSelector('raytrain/checkpoints', recursive=True,
                                           allow_not_found=True))
found = sorted({i.path.rsplit('/', 1)[0] for i in infos
                if i.type == pafs.FileType.File and '/checkpoint_' in i.path})
print('\n'.join(found) or 'no checkpoint under s3://raytrain/checkpoints/')
sys.exit(0 if found else 1)
"
log "passed"
