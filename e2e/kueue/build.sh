#!/usr/bin/env bash
# Build Kueue's controller manager from the Go module proxy (`go install
# sigs.k8s.io/kueue/cmd/kueue@<version>`) and keep, beside the binary, the CRDs and webhook
# manifests of the same release (from the module's config/), so that starting it needs no
# network. Cached by version; prints the directory as its last line.
#
# The tests start it against the local control plane (tests/integration/kueue.py) to check
# that the RayJobs we build are what Kueue admits, including elastic jobs that grow in
# workload slices.
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.19.2}"
CACHE_ROOT="${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}"
DEST_DIR="$CACHE_ROOT/kueue-$KUEUE_VERSION"

log() { echo "[kueue-build] $*" >&2; }

if [[ -x "$DEST_DIR/kueue" && -f "$DEST_DIR/webhooks.yaml" && -d "$DEST_DIR/crds" ]]; then
  log "cached: $DEST_DIR"
  echo "$DEST_DIR"
  exit 0
fi

command -v go >/dev/null || { log "go toolchain not found on PATH"; exit 1; }
mkdir -p "$DEST_DIR"
work="$(mktemp -d "$DEST_DIR/.build.XXXXXX")"
start=$SECONDS
(
  while sleep 30; do log "still building... $((SECONDS - start)) s"; done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true; rm -rf "$work"' EXIT

log "go $(GOTOOLCHAIN=local go env GOVERSION); building sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$work" \
  go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"

src="$(GOTOOLCHAIN=local GOFLAGS=-mod=mod go env GOMODCACHE)/sigs.k8s.io/kueue@$KUEUE_VERSION"
[ -d "$src/config/components/crd/bases" ] || { log "no CRDs in $src"; exit 1; }
mkdir -p "$work/crds"
cp "$src"/config/components/crd/bases/*.yaml "$work/crds/"
cp "$src/config/components/webhook/manifests.yaml" "$work/webhooks.yaml"

kill "$ticker" 2>/dev/null || true
rm -rf "$DEST_DIR/crds"
mv "$work/crds" "$DEST_DIR/crds"
mv "$work/webhooks.yaml" "$DEST_DIR/webhooks.yaml"
mv "$work/kueue" "$DEST_DIR/kueue"
log "built in $((SECONDS - start)) s: $DEST_DIR"
echo "$DEST_DIR"
