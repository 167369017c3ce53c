#!/usr/bin/env bash
# Import image archives (docker-archive or OCI tarballs, e.g. from e2e/images/build.sh) into a
# running containerd's k8s.io namespace, where the kubelet finds them without a registry.
#
#   e2e/images/import.sh [-a SOCKET] ARCHIVE...
#
# SOCKET: containerd's gRPC socket; default $CONTAINERD_ADDRESS (ctr's own variable).
# ctr: $CTR if set, else `ctr` on PATH, else the one e2e/realnode/build.sh caches under
# ${RAYTRAIN_CACHE:-~/.cache/raytrain}/realnode/. Every image an archive names must be listed
# by containerd afterwards, or the script fails.
set -euo pipefail

usage() { echo "usage: $0 [-a SOCKET] ARCHIVE..." >&2; exit 2; }

address="${CONTAINERD_ADDRESS:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    -a | --address) [ $# -ge 2 ] || usage; address="$2"; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) echo "import.sh: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || usage
if [ -z "$address" ]; then
  echo "import.sh: no containerd socket: pass -a SOCKET or set CONTAINERD_ADDRESS" \
    "(the real node's is printed by 'e2e/realnode/node.sh socket')" >&2
  exit 2
fi
if [ ! -S "$address" ]; then
  echo "import.sh: -a $address is not a socket; is containerd running?" >&2
  exit 1
fi

ctr="${CTR:-}"
if [ -z "$ctr" ]; then
  ctr="$(command -v ctr || true)"
fi
if [ -z "$ctr" ]; then
  ctr="$(ls -d "${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}"/realnode/containerd-*/ctr 2>/dev/null |
    sort -V | tail -n 1 || true)"
fi
if [ -z "$ctr" ] || [ ! -x "$ctr" ]; then
  echo "import.sh: no ctr binary: set CTR=/path/to/ctr, put ctr on PATH, or build it with" \
    "e2e/realnode/build.sh" >&2
  exit 1
fi

# The image names an archive carries: RepoTags of a docker-archive, the ref-name annotation of
# an OCI archive. containerd stores short names under docker.io (raytrain/operator:0.1.0 ->
# docker.io/raytrain/operator:0.1.0).
names_in() {
  python3 - "$1" <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    members = set(tar.getnames())
    if "manifest.json" in members:
        tags = [t for m in json.load(tar.extractfile("manifest.json")) for t in m.get("RepoTags") or []]
    elif "index.json" in members:
        index = json.load(tar.extractfile("index.json"))
        tags = [m.get("annotations", {}).get("io.containerd.image.name")
                or m.get("annotations", {}).get("org.opencontainers.image.ref.name") or ""
                for m in index.get("manifests", [])]
    else:
        sys.exit(f"import.sh: {sys.argv[1]} is neither a docker-archive nor an OCI archive")
for tag in filter(None, tags):
    first = tag.split("/")[0]
    if "/" not in tag or not ("." in first or ":" in first or first == "localhost"):
        tag = "docker.io/" + (tag if "/" in tag else "library/" + tag)
    print(tag)
PY
}

for archive in "$@"; do
  [ -f "$archive" ] || { echo "import.sh: archive '$archive' does not exist" >&2; exit 1; }
  names="$(names_in "$archive")"
  start=$SECONDS
  "$ctr" --address "$address" --namespace k8s.io images import "$archive" >&2
  listed="$("$ctr" --address "$address" --namespace k8s.io images ls -q)"
  for name in $names; do
    if ! grep -qxF "$name" <<<"$listed"; then
      echo "import.sh: imported $archive but containerd does not list $name" >&2
      exit 1
    fi
    echo "imported $name from $archive in $((SECONDS - start)) s" >&2
  done
done
