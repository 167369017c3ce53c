#!/usr/bin/env bash
# Build the MinIO server from the Go module proxy, the way MinIO's README installs it from
# source (`go install github.com/minio/minio@<version>`), and cache the binary by version.
# Prints the binary's path as its last line. Rebuilds only when the cached binary is missing.
set -euo pipefail

MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
CACHE_ROOT="${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}"
DEST_DIR="$CACHE_ROOT/minio-$MINIO_VERSION"
BIN="$DEST_DIR/minio"

log() { echo "[minio-build] $*" >&2; }

if [[ -x "$BIN" ]]; then
  log "cached: $BIN"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { log "go toolchain not found on PATH"; exit 1; }
mkdir -p "$DEST_DIR"
work="$(mktemp -d "$DEST_DIR/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "go $(GOTOOLCHAIN=local go env GOVERSION); building github.com/minio/minio@$MINIO_VERSION"
log "downloading modules (progress: one line per 30 s while compiling)"
start=$SECONDS
(
  while sleep 30; do log "still building... $((SECONDS - start)) s"; done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true; rm -rf "$work"' EXIT

GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$work" \
  go install -trimpath -ldflags "-s -w" "github.com/minio/minio@$MINIO_VERSION"

kill "$ticker" 2>/dev/null || true
mv "$work/minio" "$BIN"
log "built in $((SECONDS - start)) s: $BIN"
echo "$BIN"
