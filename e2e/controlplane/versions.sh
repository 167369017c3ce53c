# Pinned versions of the local control plane, sourced by build.sh and cluster.sh.
# Each one must match the version required in the wrapper module of the same name
# (build.sh checks it): bump both together, then run `go mod tidy` in that directory.
# shellcheck shell=bash

K8S_VERSION=v1.36.3      # k8s/: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
ETCD_VERSION=v3.6.14     # etcd/: go.etcd.io/etcd/server/v3
KWOK_VERSION=v0.8.0      # kwok/: kwok, kwokctl
# KubeRay v1.7.0 is not served by the Go module proxy (its zip answers 403), so the
# operator binary is the newest release that is: v1.6.2 (same ray.io/v1 API).
KUBERAY_VERSION=v1.6.2   # kuberay/: ray-operator

# Module path of each wrapper's pinned dependency, for the version check.
K8S_MODULE=k8s.io/kubernetes
ETCD_MODULE=go.etcd.io/etcd/server/v3
KWOK_MODULE=sigs.k8s.io/kwok
KUBERAY_MODULE=github.com/ray-project/kuberay/ray-operator

RAYTRAIN_CACHE="${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}"
CONTROLPLANE_CACHE="$RAYTRAIN_CACHE/controlplane"

# bindir COMPONENT -> directory holding that component's binaries
bindir() {
  case "$1" in
    k8s) echo "$CONTROLPLANE_CACHE/k8s-$K8S_VERSION" ;;
    etcd) echo "$CONTROLPLANE_CACHE/etcd-$ETCD_VERSION" ;;
    kwok) echo "$CONTROLPLANE_CACHE/kwok-$KWOK_VERSION" ;;
    kuberay) echo "$CONTROLPLANE_CACHE/kuberay-$KUBERAY_VERSION" ;;
    *) echo "unknown component: $1" >&2; return 1 ;;
  esac
}
