#!/usr/bin/env bash
# Build what the real node needs, from Go modules and Debian packages, cached by version
# outside the clone. Run it outside any network namespace: it downloads.
#
#   build.sh [--check] [COMPONENT...]
#     COMPONENT: debs containerd kubelet dra-driver coredns kube-router helm images (default: all)
#
#   debs        apt-get install the missing Debian packages (runc, CNI plugins, iptables, buildah...)
#   containerd  containerd, ctr, containerd-shim-runc-v2 (go install)
#   kubelet     kubelet, kube-proxy (the k8s/ wrapper module)
#   dra-driver  dra-test-driver: Kubernetes' own DRA example driver (test/e2e/dra/test-driver,
#               the k8s/ wrapper module), run as the node's kubelet plugin so pods can claim
#               devices through resourceClaims
#   coredns     coredns (go install)
#   kube-router kube-router (go install), run with its NetworkPolicy firewall alone
#   helm        helm (go install helm.sh/helm/v4/cmd/helm)
#   images      pause.tar and probe.tar: docker-archives of two one-file images (buildah, FROM scratch)
#
# Output lands in ${RAYTRAIN_CACHE:-~/.cache/raytrain}/realnode/<component>-<version>/; a
# component is reused while its stamp matches what the build depends on. --check only
# reports (exit 1 if anything would be built or installed).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

ALL=(debs containerd kubelet dra-driver coredns kube-router helm images)
CHECK_ONLY=0
COMPONENTS=()
for arg in "$@"; do
  case "$arg" in
    --check) CHECK_ONLY=1 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    debs | containerd | kubelet | dra-driver | coredns | kube-router | helm | images) COMPONENTS+=("$arg") ;;
    *) echo "realnode/build.sh: unknown argument '$arg' (components: ${ALL[*]})" >&2; exit 2 ;;
  esac
done
[ ${#COMPONENTS[@]} -gt 0 ] || COMPONENTS=("${ALL[@]}")

log() { printf '[realnode-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

CONTAINERD_PKG=github.com/containerd/containerd/v2
# btrfs, devmapper and zfs snapshotters are left out: the node uses overlayfs, and they
# would need cgo. urfave_cli_no_docs drops the man-page generator.
CONTAINERD_TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
CONTAINERD_LDFLAGS="-s -w -X $CONTAINERD_PKG/version.Version=$CONTAINERD_VERSION -X $CONTAINERD_PKG/version.Package=$CONTAINERD_PKG"
# Kubernetes' example DRA driver: a kubelet plugin that publishes a node's simulated devices
# as a ResourceSlice and hands a claim's configuration to the container through CDI.
DRA_DRIVER_PKG=k8s.io/kubernetes/test/e2e/dra/test-driver
HELM_LDFLAGS="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

binaries_of() {
  case "$1" in
    containerd) echo containerd ctr containerd-shim-runc-v2 ;;
    kubelet) echo kubelet kube-proxy ;;
    dra-driver) echo dra-test-driver ;;
    coredns) echo coredns ;;
    kube-router) echo kube-router ;;
    helm) echo helm ;;
    images) echo pause.tar probe.tar ;;
  esac
}

# What a build depends on, hashed: the recipe (versions, tags, ldflags), the wrapper's go.mod
# or the program's sources, and the Go release.
fingerprint() {
  {
    case "$1" in
      containerd) echo "$CONTAINERD_VERSION $CONTAINERD_TAGS $CONTAINERD_LDFLAGS" ;;
      kubelet) cat "$HERE/k8s/go.mod" ;;
      dra-driver) cat "$HERE/k8s/go.mod"; echo "$DRA_DRIVER_PKG" ;;
      coredns) echo "$COREDNS_VERSION" ;;
      kube-router) echo "$KUBE_ROUTER_VERSION" ;;
      helm) echo "$HELM_VERSION $HELM_LDFLAGS" ;;
      images) cat "$HERE"/pause/* "$HERE"/probe/*; echo "$PAUSE_IMAGE $PROBE_IMAGE" ;;
    esac
    go env GOVERSION GOOS GOARCH
  } | sha256sum | cut -c1-16
}

is_cached() {
  local comp="$1" out b
  out="$(node_bindir "$comp")"
  [ -f "$out/.stamp" ] || return 1
  grep -qx "fingerprint=$(fingerprint "$comp")" "$out/.stamp" || return 1
  for b in $(binaries_of "$comp"); do [ -s "$out/$b" ] || return 1; done
}

# The control plane's ldflags: without them /version and the node's kubeletVersion say
# v0.0.0-master.
k8s_ldflags() {
  local ver="$1" minor
  minor="${ver#v1.}"
  minor="${minor%%.*}"
  printf '%s' "-s -w -X k8s.io/component-base/version.gitVersion=$ver" \
    " -X k8s.io/component-base/version.gitMajor=1" \
    " -X k8s.io/component-base/version.gitMinor=$minor" \
    " -X k8s.io/component-base/version.gitTreeState=clean" \
    " -X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

# build_image NAME SRC_DIR OUT.tar ENTRYPOINT_JSON USER: a one-file image FROM scratch.
# buildah's storage is a throwaway directory (vfs driver), so nothing is left in
# /var/lib/containers or /run/containers.
build_image() {
  local name="$1" src="$2" tar="$3" entry="$4" user="$5" work c
  work="$(mktemp -d)"
  local b=(buildah --root "$work/root" --runroot "$work/run" --storage-driver vfs)
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$work/bin" .)
  c="$("${b[@]}" from scratch)"
  "${b[@]}" copy --chmod 0755 "$c" "$work/bin" "$entry" >/dev/null
  "${b[@]}" config --entrypoint "[\"$entry\"]" --user "$user" "$c"
  "${b[@]}" commit -q "$c" "$name" >/dev/null
  "${b[@]}" push -q "$name" "docker-archive:$tar:$name"
  "${b[@]}" rm -a >/dev/null
  "${b[@]}" rmi -a -f >/dev/null 2>&1 || true
  rm -rf "$work"
}

go_build() {
  local comp="$1" out="$2"
  case "$comp" in
    containerd)
      GOBIN="$out" go install -trimpath -tags "$CONTAINERD_TAGS" -ldflags "$CONTAINERD_LDFLAGS" \
        "$CONTAINERD_PKG/cmd/containerd@$CONTAINERD_VERSION" "$CONTAINERD_PKG/cmd/ctr@$CONTAINERD_VERSION"
      # The shim talks ttrpc only; no_grpc keeps grpc out of it (8 MB instead of 20).
      GOBIN="$out" go install -trimpath -tags "$CONTAINERD_TAGS no_grpc" -ldflags "$CONTAINERD_LDFLAGS" \
        "$CONTAINERD_PKG/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
      ;;
    kubelet)
      cd "$HERE/k8s"
      local got
      got="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
      if [ "$got" != "$NODE_K8S_VERSION" ]; then
        echo "realnode/build.sh: k8s/go.mod requires k8s.io/kubernetes $got but versions.sh pins $NODE_K8S_VERSION" >&2
        return 1
      fi
      go build -trimpath -ldflags "$(k8s_ldflags "$NODE_K8S_VERSION")" -o "$out/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
      ;;
    dra-driver)
      cd "$HERE/k8s"
      go build -trimpath -ldflags "-s -w" -o "$out/dra-test-driver" "$DRA_DRIVER_PKG"
      ;;
    coredns)
      GOBIN="$out" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
      ;;
    kube-router)
      GOBIN="$out" go install -trimpath -ldflags "-s -w" \
        "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
      ;;
    helm)
      GOBIN="$out" go install -trimpath -ldflags "$HELM_LDFLAGS" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
      ;;
    images)
      # pause: the sandbox's PID 1 runs as nobody, like the upstream image.
      build_image "$PAUSE_IMAGE" "$HERE/pause" "$out/pause.tar" /pause 65535:65535
      build_image "$PROBE_IMAGE" "$HERE/probe" "$out/probe.tar" /probe 65534:65534
      ;;
  esac
}

build_one() {
  local comp="$1" out tmp start hb rc secs
  out="$(node_bindir "$comp")"
  tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  start=$SECONDS
  log "$comp: building $(binaries_of "$comp")"
  # Heartbeat: a long, silent compile stays visibly alive in CI logs. The trap also ends
  # the pending sleep, which would otherwise hold our stdout open.
  (
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 60 &
      s=$!
      wait "$s"
      log "$comp: still building ($((SECONDS - start))s)"
    done
  ) &
  hb=$!
  set +e
  (set -e; go_build "$comp" "$tmp")
  rc=$?
  set -e
  kill "$hb" 2>/dev/null || true
  wait "$hb" 2>/dev/null || true
  secs=$((SECONDS - start))
  if [ $rc -ne 0 ]; then
    rm -rf "$tmp"
    log "$comp: FAILED after ${secs}s (exit $rc)"
    return $rc
  fi
  {
    echo "component=$comp"
    echo "fingerprint=$(fingerprint "$comp")"
    echo "go=$(go env GOVERSION)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$secs"
  } >"$tmp/.stamp"
  rm -rf "$out"
  mv "$tmp" "$out"
  log "$comp: built in ${secs}s -> $out"
}

# Debian packages: a package counts as present when dpkg says it is installed.
missing_debs() {
  local p
  for p in "${NODE_DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

install_debs() {
  local missing
  mapfile -t missing < <(missing_debs)
  if [ ${#missing[@]} -eq 0 ]; then
    log "debs: all present (${NODE_DEBS[*]})"
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "realnode/build.sh: missing Debian packages ${missing[*]}; run as root or:" \
      "apt-get install --no-install-recommends ${missing[*]}" >&2
    return 1
  fi
  log "debs: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

command -v dpkg-query >/dev/null 2>&1 || { echo "realnode/build.sh: the real node needs a Debian-based host (dpkg, apt-get)" >&2; exit 1; }
if ! command -v go >/dev/null 2>&1; then
  echo "realnode/build.sh: 'go' not found on PATH; install Go 1.26 (https://go.dev/doc/install)" >&2
  exit 127
fi
case "$(go env GOVERSION)" in
  go1.26.[6-9]* | go1.26.[1-9][0-9]* | go1.2[7-9]* | go1.[3-9]* | go[2-9]*) ;;
  *) echo "realnode/build.sh: containerd $CONTAINERD_VERSION needs Go >= 1.26.6, found $(go env GOVERSION)" >&2; exit 1 ;;
esac

mkdir -p "$REALNODE_CACHE"
if [ $CHECK_ONLY -eq 1 ]; then
  need=0
  for c in "${COMPONENTS[@]}"; do
    if [ "$c" = debs ]; then
      m="$(missing_debs | tr '\n' ' ')"
      if [ -n "$m" ]; then log "debs: missing $m"; need=1; else log "debs: all present"; fi
    elif is_cached "$c"; then
      log "$c: cached"
    else
      log "$c: needs a build"
      need=1
    fi
  done
  exit $need
fi

# One builder at a time per cache (two test sessions starting together share the result).
exec 9>"$REALNODE_CACHE/.build.lock"
flock 9

total=$SECONDS
for c in "${COMPONENTS[@]}"; do
  if [ "$c" = debs ]; then
    install_debs
  elif [ "$c" = images ] && ! command -v buildah >/dev/null 2>&1; then
    echo "realnode/build.sh: the images need buildah: build.sh debs installs it" >&2
    exit 1
  elif is_cached "$c"; then
    log "$c: cached in $(node_bindir "$c")"
  else
    build_one "$c"
  fi
done
log "done in $((SECONDS - total))s"
