#!/usr/bin/env bash
# `make shell`: a shell inside the local cluster `make up` started, or one command there.
#
#   bash scripts/shell.sh            an interactive shell (exit leaves it; the cluster runs on)
#   bash scripts/shell.sh CMD...     run CMD there, e.g. bash scripts/shell.sh kubectl get rtj -A
#
# The cluster lives in a network namespace of its own (e2e/netns/run.sh): its API server and
# MinIO are reached only from inside it. This enters that namespace (and the mount namespace the
# real node's mounts live in) through a process of the cluster (cluster.sh enter), with
# KUBECONFIG set, and our kubectl, helm and the raytrain command of $PYTHON first on PATH.
# RAYTRAIN_CLUSTER names the cluster (default raytrain-demo, the one make up starts).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export RAYTRAIN_CLUSTER="${RAYTRAIN_CLUSTER:-raytrain-demo}"
PYTHON="${PYTHON:-python}"
# shellcheck source=../e2e/realnode/versions.sh
source e2e/realnode/versions.sh
# shellcheck source=../e2e/controlplane/versions.sh
source e2e/controlplane/versions.sh

if ! kubeconfig="$(bash e2e/controlplane/cluster.sh kubeconfig 2>/dev/null)"; then
  echo "shell: the local cluster $RAYTRAIN_CLUSTER is not running; start it with: make up" >&2
  exit 1
fi
# Where $PYTHON's console scripts are (raytrain, kubectl-raytrain), when it has them.
scripts="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
ours="$(bindir k8s):$(node_bindir helm)${scripts:+:$scripts}"
export PATH="$ours:$PATH"
# MinIO, the checkpoint store make up started, as this shell reaches it: raytrain submit --code
# uploads there (AWS_ENDPOINT_URL_S3 is the CLI's endpoint when --s3-endpoint is not given; pods
# use the job's own spec.storage.s3.endpoint, minio.raytrain-system:9000).
world="$(dirname "$kubeconfig")/world.json"
if [ -f "$world" ]; then
  port="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["minio_port"])' "$world")"
  export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$port"
fi
# No instance metadata service exists in the namespace: the AWS SDK's credential chain skips it
# and the CLI goes on to the job's own credentialsSecret.
export AWS_EC2_METADATA_DISABLED=true

if [ $# -eq 0 ]; then
  rc="$(dirname "$kubeconfig")/shell.rc" # in the cluster's state dir: `make down` removes it
  cat >"$rc" <<EOF
[ -f ~/.bashrc ] && . ~/.bashrc
export PATH="$ours:\$PATH" # first again, whatever ~/.bashrc put before them
PS1="($RAYTRAIN_CLUSTER) \$PS1"
cd "$ROOT"
echo "In the local cluster $RAYTRAIN_CLUSTER (KUBECONFIG=$kubeconfig); exit leaves it running, make down stops it."
echo "Try: python scripts/on_real_node.py examples/digits.yaml | kubectl apply -f -   then: kubectl get rtj digits -w"
echo "Your own code: raytrain submit JOB.yaml --code DIR (uploads to MinIO at \$AWS_ENDPOINT_URL_S3)"
EOF
  set -- bash --rcfile "$rc" -i
fi
exec bash e2e/controlplane/cluster.sh enter "$@"
