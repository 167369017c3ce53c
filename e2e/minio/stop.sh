#!/usr/bin/env bash
# Stop a MinIO started by start.sh and remove its data: bash e2e/minio/stop.sh <state dir>
set -euo pipefail
state="${1:?usage: stop.sh <state dir printed by start.sh>}"
if [[ -f "$state/pid" ]]; then
  pid="$(cat "$state/pid")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
fi
case "$state" in */raytrain-minio.*) rm -rf "$state" ;; esac
echo "[minio] stopped" >&2
