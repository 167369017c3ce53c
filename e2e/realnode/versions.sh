# Pinned versions of the real node's components, sourced by build.sh and node.sh.
# shellcheck shell=bash

CONTAINERD_VERSION=v2.4.2   # containerd, ctr, containerd-shim-runc-v2 (go install; needs Go >= 1.26.6)
NODE_K8S_VERSION=v1.36.3    # k8s/: kubelet, kube-proxy (same Kubernetes as the control plane)
COREDNS_VERSION=v1.15.0     # coredns (go install)
# kube-router: only its NetworkPolicy firewall runs (iptables + ipset), so the real node
# enforces NetworkPolicy. The only version the module proxy serves here, and advisories are
# reported against it: it runs only inside the test run's network namespace, with its router,
# service proxy and CNI off (node.sh).
KUBE_ROUTER_VERSION=v2.1.0
HELM_VERSION=v4.3.1         # helm (go install helm.sh/helm/v4/cmd/helm)
PAUSE_IMAGE=localhost/pause:3.10       # the sandbox image, built from pause/
PROBE_IMAGE=localhost/raytrain-probe:1 # the tests' image, built from probe/

# Debian packages the node needs at run time (and buildah for the images).
NODE_DEBS=(runc containernetworking-plugins iptables ipset conntrack socat ethtool buildah skopeo umoci mmdebstrap)

RAYTRAIN_CACHE="${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}"
REALNODE_CACHE="$RAYTRAIN_CACHE/realnode"

# node_bindir COMPONENT -> directory holding that component's build output
node_bindir() {
  case "$1" in
    containerd) echo "$REALNODE_CACHE/containerd-$CONTAINERD_VERSION" ;;
    kubelet) echo "$REALNODE_CACHE/kubelet-$NODE_K8S_VERSION" ;;
    dra-driver) echo "$REALNODE_CACHE/dra-driver-$NODE_K8S_VERSION" ;;
    coredns) echo "$REALNODE_CACHE/coredns-$COREDNS_VERSION" ;;
    kube-router) echo "$REALNODE_CACHE/kube-router-$KUBE_ROUTER_VERSION" ;;
    helm) echo "$REALNODE_CACHE/helm-$HELM_VERSION" ;;
    images) echo "$REALNODE_CACHE/images" ;;
    *) echo "unknown component: $1" >&2; return 1 ;;
  esac
}
