#!/usr/bin/env bash
# Build the local control plane from Go modules, cached by version outside the clone.
#
#   build.sh [--check] [COMPONENT...]     COMPONENT: k8s etcd kwok kuberay (default: all)
#
# Binaries land in ${RAYTRAIN_CACHE:-~/.cache/raytrain}/controlplane/<component>-<version>/.
# A component is reused when its directory holds a stamp written by a successful build of the
# same wrapper go.mod; otherwise it is rebuilt. --check only reports (exit 1 if any
# component would be built). GOMODCACHE and GOCACHE are left at their defaults so that a
# rebuild after a version bump is incremental.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

ALL=(k8s etcd kwok kuberay)
CHECK_ONLY=0
COMPONENTS=()
for arg in "$@"; do
  case "$arg" in
    --check) CHECK_ONLY=1 ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    k8s | etcd | kwok | kuberay) COMPONENTS+=("$arg") ;;
    *) echo "build.sh: unknown argument '$arg' (components: ${ALL[*]})" >&2; exit 2 ;;
  esac
done
[ ${#COMPONENTS[@]} -gt 0 ] || COMPONENTS=("${ALL[@]}")

log() { printf '[build %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# Per component: wrapper dir, pinned module and version, packages, expected binaries.
version_of() { case "$1" in k8s) echo "$K8S_VERSION" ;; etcd) echo "$ETCD_VERSION" ;;
  kwok) echo "$KWOK_VERSION" ;; kuberay) echo "$KUBERAY_VERSION" ;; esac; }
module_of() { case "$1" in k8s) echo "$K8S_MODULE" ;; etcd) echo "$ETCD_MODULE" ;;
  kwok) echo "$KWOK_MODULE" ;; kuberay) echo "$KUBERAY_MODULE" ;; esac; }
binaries_of() {
  case "$1" in
    k8s) echo kube-apiserver kube-controller-manager kube-scheduler kubectl ;;
    etcd) echo etcd ;;
    kwok) echo kwok kwokctl ;;
    kuberay) echo ray-operator ;;
  esac
}

# Fingerprint of what a build depends on: the wrapper's go.mod (it fixes every module
# version; go.sum only holds their checksums) and the Go release.
fingerprint() {
  { cat "$HERE/$1/go.mod"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16
}

is_cached() {
  local comp="$1" out stamp b
  out="$(bindir "$comp")"
  stamp="$out/.stamp"
  [ -f "$stamp" ] || return 1
  grep -qx "fingerprint=$(fingerprint "$comp")" "$stamp" || return 1
  for b in $(binaries_of "$comp"); do [ -x "$out/$b" ] || return 1; done
}

go_build() {
  local comp="$1" out="$2" ver ldflags
  ver="$(version_of "$comp")"
  cd "$HERE/$comp"
  case "$comp" in
    k8s)
      # Without these, /version reports v0.0.0-master and version-checking clients misbehave.
      local minor="${ver#v1.}"; minor="${minor%%.*}"
      ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$ver"
      ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
      ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
      ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
      ldflags+=" -X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      go build -trimpath -ldflags "$ldflags" -o "$out/" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
      ;;
    etcd)
      # The main package is the module root, whose default binary name would be "v3".
      go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
      ;;
    kwok)
      go build -trimpath -ldflags "-s -w" -o "$out/" \
        sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
      ;;
    kuberay)
      go build -trimpath -ldflags "-s -w" -o "$out/ray-operator" \
        github.com/ray-project/kuberay/ray-operator
      ;;
  esac
}

build_one() {
  local comp="$1" ver mod got out tmp start pid hb rc secs
  ver="$(version_of "$comp")"
  mod="$(module_of "$comp")"
  out="$(bindir "$comp")"
  got="$(cd "$HERE/$comp" && go list -m -f '{{.Version}}' "$mod")"
  if [ "$got" != "$ver" ]; then
    echo "build.sh: $comp/go.mod requires $mod $got but versions.sh pins $ver" >&2
    return 1
  fi
  tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  start=$SECONDS
  local note=""
  [ "$comp" != k8s ] || note=" (a cold build takes 7-16 min on 2 cores)"
  log "$comp $ver: building $(binaries_of "$comp")$note"
  # Heartbeat so that a long, silent compile is visibly alive in CI logs.
  # The trap also ends the pending sleep, which would otherwise hold our stdout open.
  (
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 60 &
      s=$!
      wait "$s"
      log "$comp $ver: still compiling ($((SECONDS - start))s)"
    done
  ) &
  hb=$!
  set +e
  (go_build "$comp" "$tmp")
  rc=$?
  set -e
  kill "$hb" 2>/dev/null || true
  wait "$hb" 2>/dev/null || true
  secs=$((SECONDS - start))
  if [ $rc -ne 0 ]; then
    rm -rf "$tmp"
    log "$comp $ver: FAILED after ${secs}s (exit $rc)"
    return $rc
  fi
  {
    echo "component=$comp"
    echo "version=$ver"
    echo "fingerprint=$(fingerprint "$comp")"
    echo "go=$(go env GOVERSION)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$secs"
  } >"$tmp/.stamp"
  rm -rf "$out"
  mv "$tmp" "$out"
  log "$comp $ver: built in ${secs}s -> $out"
}

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: 'go' not found on PATH; install Go 1.26 (https://go.dev/doc/install)" >&2
  exit 127
fi
case "$(go env GOVERSION)" in
  go1.2[6-9]* | go1.[3-9]* | go[2-9]*) ;;
  *) echo "build.sh: need Go >= 1.26, found $(go env GOVERSION)" >&2; exit 1 ;;
esac

mkdir -p "$CONTROLPLANE_CACHE"
if [ $CHECK_ONLY -eq 1 ]; then
  missing=0
  for c in "${COMPONENTS[@]}"; do
    if is_cached "$c"; then log "$c $(version_of "$c"): cached"; else log "$c $(version_of "$c"): needs a build"; missing=1; fi
  done
  exit $missing
fi

# One builder at a time per cache (two test sessions starting together share the result).
exec 9>"$CONTROLPLANE_CACHE/.build.lock"
flock 9

total=$SECONDS
for c in "${COMPONENTS[@]}"; do
  if is_cached "$c"; then
    log "$c $(version_of "$c"): cached in $(bindir "$c")"
  else
    build_one "$c"
  fi
done
log "done in $((SECONDS - total))s"
