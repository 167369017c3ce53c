#!/usr/bin/env bash
# Print the path of a helm binary, building it first when it is missing.
#
# Helm is built from its Go module (helm.sh/helm/v4, cmd/helm) by e2e/realnode/build.sh and
# cached under ${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}/realnode/helm-<version>/helm, like the
# rest of the local cluster's binaries: only the Go module proxy is needed, on any platform Go
# builds for. The first build takes a few minutes; its log goes to stderr.
#
#   HELM="$(bash scripts/helm.sh)" && "$HELM" version
#
# RAYTRAIN_HELM=/path/to/helm skips all of this and uses that binary.
set -euo pipefail

if [[ -n "${RAYTRAIN_HELM:-}" ]]; then
  if [[ ! -x "$RAYTRAIN_HELM" ]]; then
    echo "RAYTRAIN_HELM=$RAYTRAIN_HELM is not an executable file; unset it to build helm" >&2
    exit 1
  fi
  echo "$RAYTRAIN_HELM"
  exit 0
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../e2e/realnode/versions.sh
source "$repo/e2e/realnode/versions.sh"
bin="$(node_bindir helm)/helm"
if [[ ! -x "$bin" ]] || ! bash "$repo/e2e/realnode/build.sh" --check helm >/dev/null 2>&1; then
  if ! command -v go >/dev/null 2>&1; then
    echo "helm is built from Go modules and 'go' is not on PATH: install Go 1.26, or install" \
      "helm $HELM_VERSION yourself and set RAYTRAIN_HELM=/path/to/helm" >&2
    exit 1
  fi
  bash "$repo/e2e/realnode/build.sh" helm >&2
fi
echo "$bin"
