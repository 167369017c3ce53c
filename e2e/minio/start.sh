#!/usr/bin/env bash
# Start a MinIO server on 127.0.0.1 (free port, temp data dir), create buckets, print the
# endpoint. Builds the binary first if it is not cached (build.sh). MINIO_BIND=0.0.0.0 listens
# on every address: only for a server inside the local cluster's network namespace, where pods
# reach it through the node's IP (tests/integration/realpods.py).
#
#   bash e2e/minio/start.sh [bucket ...]      # default bucket: raytrain
#
# Prints, last: endpoint=..., access_key=..., secret_key=..., state=<dir>. Stop it with
# `bash e2e/minio/stop.sh <state dir>`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "[minio] $*" >&2; }

bin="$(bash "$here/build.sh" | tail -n 1)"
buckets=("$@")
[[ ${#buckets[@]} -gt 0 ]] || buckets=(raytrain)

state="$(mktemp -d "${TMPDIR:-/tmp}/raytrain-minio.XXXXXX")"
mkdir -p "$state/data"
read -r port console_port < <(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
PY
)
user="${MINIO_ROOT_USER:-raytrain}"
password="${MINIO_ROOT_PASSWORD:-raytrain-secret}"
endpoint="http://127.0.0.1:$port"

log "starting $bin on $endpoint (data in $state/data)"
MINIO_ROOT_USER="$user" MINIO_ROOT_PASSWORD="$password" MINIO_BROWSER=off \
  nohup "$bin" server --quiet --address "${MINIO_BIND:-127.0.0.1}:$port" \
  --console-address "127.0.0.1:$console_port" "$state/data" >"$state/minio.log" 2>&1 &
echo $! >"$state/pid"

python3 - "$endpoint" "$user" "$password" "${buckets[@]}" <<'PY'
import sys, time, urllib.request
import boto3
from botocore.config import Config

endpoint, user, password, *buckets = sys.argv[1:]
deadline = time.monotonic() + 60
while True:
    try:
        with urllib.request.urlopen(f"{endpoint}/minio/health/live", timeout=2) as r:
            if r.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"MinIO did not become live at {endpoint} within 60 s")
    time.sleep(0.2)
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=user,
                  aws_secret_access_key=password, region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
for b in buckets:
    s3.create_bucket(Bucket=b)
    print(f"[minio] bucket {b} created", file=sys.stderr)
PY
echo "endpoint=$endpoint access_key=$user secret_key=$password state=$state"
