#!/usr/bin/env bash
# One real Kubernetes node, `realnode`, joined to a running local control plane: containerd,
# the kubelet, kube-proxy, kube-router's NetworkPolicy firewall and CoreDNS as local processes,
# pods on a CNI bridge. cluster.sh
# calls this; it is not meant to be run by hand.
#
#   node.sh up              start the node (idempotent); needs the variables below
#   node.sh down            drain, stop, and leave the host as it was before `up`
#   node.sh import-image F  import a docker-archive or OCI archive into the node's containerd
#   node.sh status          say what runs; exit 0 only if every process is alive
#   node.sh socket          print containerd's socket path
#   node.sh check-sockets   print the node's Unix socket paths; exit 1, saying why, when one is
#                           too long to bind (up checks this before it starts anything)
#
# Environment (set by cluster.sh): REALNODE_STATE (the node's state dir), REALNODE_KUBECONFIG
# (admin kubeconfig of the cluster), REALNODE_CA (the cluster CA certificate), REALNODE_KUBECTL;
# RAYTRAIN_RUN_DIR (default /run/raytrain): where the node's sockets live (see RUN below).
#
# Everything runs inside a network namespace (RAYTRAIN_NETNS, set by e2e/netns/run.sh): the
# node IP, pod and Service ranges must never exist in the host's own namespace.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

NODE_NAME=realnode
NODE_IP=10.245.0.1
NODE_BRIDGE=rnnode0      # holds the node IP: the kubelet needs a non-loopback address
POD_BRIDGE=rn0
POD_SUBNET=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.97.0.0/24 # also the API server's --service-cluster-ip-range (cluster.sh)
NODE_LABEL=raytrain.dev/real-node
CNI_BIN_DIR=/usr/lib/cni
RUNC=/usr/sbin/runc

# Host-wide settings the kubelet and kube-proxy change; restored by `down`. vm.* and kernel.*
# are global even inside a network namespace.
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)
# Paths the kubelet, containerd and the CNI plugins use whatever their configuration says.
FIXED_PATHS=(/var/lib/kubelet /var/lib/kubelet/device-plugins /var/lib/kubelet/pod-resources
  /var/log/pods /var/log/containers /run/containerd /run/containerd/s /run/containerd/fifo
  /run/containerd/runc /run/runc /run/nri /var/lib/cni /etc/cni /opt/cni /run/netns)

RN="${REALNODE_STATE:?REALNODE_STATE is not set (node.sh is run by cluster.sh)}"
# This node's key: a short hash of its state dir (one node per state dir).
RN_KEY="$(echo "$RN" | sha256sum | cut -c1-12)"
# A Unix socket's path holds at most 107 bytes (sun_path is 108, with the final NUL); a longer
# one fails to bind with "invalid argument". The state dir is under $HOME and carries the
# cluster's name (~/.cache/raytrain/state/<cluster>/realnode), so the sockets live apart, in a
# short directory of this node's own: containerd's socket there, and the kubelet's root dir,
# whose plugins_registry (the DRA driver's registration socket), plugins (the driver's socket)
# and pod-resources (the kubelet's socket) are fixed names under it, is a bind mount of
# $RN/kubelet at RUN/kubelet (its data stays on the state dir's disk). `down` unmounts and
# removes RUN.
RUN_ROOT="${RAYTRAIN_RUN_DIR:-/run/raytrain}"
RUN_ROOT="${RUN_ROOT%/}" # the kubelet refuses a root dir not in canonical form
RUN="$RUN_ROOT/$RN_KEY"
KUBELET_ROOT="$RUN/kubelet"
SOCK="$RUN/containerd.sock"
MAX_SOCKET_PATH=107
BIN_CONTAINERD="$(node_bindir containerd)"
BIN_KUBELET="$(node_bindir kubelet)"
BIN_DRA="$(node_bindir dra-driver)"
BIN_COREDNS="$(node_bindir coredns)"
BIN_KUBE_ROUTER="$(node_bindir kube-router)"
IMAGES="$(node_bindir images)"
export PATH="$BIN_CONTAINERD:$PATH" # containerd finds its shim on PATH
TIMEOUT="${RAYTRAIN_UP_TIMEOUT:-180}"
PROCS=(containerd kubelet dra-test-driver kube-proxy kube-router coredns) # start order; stopped in reverse
KUBE_ROUTER_HEALTH_PORT=20244
DRA_DRIVER=dra.realnode.raytrain.dev # the driver name DeviceClasses select on
DRA_DEVICES=8

START=$SECONDS
log() { printf '[realnode +%ss] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

kc() { "${REALNODE_KUBECTL:?}" --kubeconfig="${REALNODE_KUBECONFIG:?}" "$@"; }
ctr_() { "$BIN_CONTAINERD/ctr" --address "$SOCK" --namespace k8s.io "$@"; }

wait_until() {
  local limit="$1" what="$2" deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "timed out after ${limit}s waiting for $what"
      return 1
    fi
    sleep 0.25
  done
}

binary_of() {
  case "$1" in
    containerd) echo "$BIN_CONTAINERD/containerd" ;;
    kubelet | kube-proxy) echo "$BIN_KUBELET/$1" ;;
    dra-test-driver) echo "$BIN_DRA/dra-test-driver" ;;
    coredns) echo "$BIN_COREDNS/coredns" ;;
    kube-router) echo "$BIN_KUBE_ROUTER/kube-router" ;;
  esac
}

# proc_pid NAME: the recorded pid, if that process still runs our binary (not a recycled pid).
proc_pid() {
  local pid exe=""
  [ -f "$RN/$1.pid" ] || return 1
  pid="$(cat "$RN/$1.pid")"
  [ -n "$pid" ] || return 1
  IFS= read -r -d '' exe <"/proc/$pid/cmdline" 2>/dev/null || true
  [ "$exe" = "$(binary_of "$1")" ] || return 1
  echo "$pid"
}
proc_gone() { ! proc_pid "$1" >/dev/null; }

# Every Unix socket the node's processes create in a directory of its own configuration (the
# device plugins' /var/lib/kubelet/device-plugins/kubelet.sock and the shims' sockets under
# /run/containerd/s are fixed, short paths).
socket_paths() {
  printf '%s\n' "$SOCK" "$SOCK.ttrpc" \
    "$KUBELET_ROOT/plugins_registry/$DRA_DRIVER-reg.sock" \
    "$KUBELET_ROOT/plugins/$DRA_DRIVER/dra.sock" \
    "$KUBELET_ROOT/pod-resources/kubelet.sock"
}

# Fail before anything starts when a socket path would be too long to bind.
check_socket_paths() {
  local LC_ALL=C p # ${#p} in bytes
  while IFS= read -r p; do
    if [ "${#p}" -gt "$MAX_SOCKET_PATH" ]; then
      die "the real node's socket $p would be ${#p} bytes long, over the $MAX_SOCKET_PATH a" \
        "Unix socket path may have (bind fails with 'invalid argument'). The node's sockets" \
        "live under RAYTRAIN_RUN_DIR ($RUN_ROOT, one short directory per node): set" \
        "RAYTRAIN_RUN_DIR to a directory with a shorter path (the default is /run/raytrain)"
    fi
  done < <(socket_paths)
}

in_own_netns() {
  [ -n "${RAYTRAIN_NETNS:-}" ] && [ "$(readlink /proc/self/ns/net)" != "$(readlink /proc/1/ns/net)" ]
}

require_netns() {
  in_own_netns || die "the real node runs only inside a network namespace of its own, so that" \
    "its node IP ($NODE_IP), pods ($POD_SUBNET) and Services ($SERVICE_CIDR) never exist in the" \
    "host's namespace; run: bash e2e/netns/run.sh bash e2e/controlplane/cluster.sh up --real-node"
}

# `ip netns exec` remounts /sys for the namespace, which leaves /sys/fs/cgroup empty in its
# private mount namespace. Mount the host's cgroup hierarchies again there (same options =
# the same hierarchies), so the kubelet and runc see the real ones.
ensure_cgroups() {
  local mp opts fstype
  if grep -q ' /sys/fs/cgroup/[^ ]* [^-]* - cgroup2\? ' /proc/self/mountinfo ||
    grep -q ' /sys/fs/cgroup [^-]* - cgroup2 ' /proc/self/mountinfo; then
    return 0
  fi
  [ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] ||
    die "/sys/fs/cgroup has no cgroup mounts in the host's own mount namespace; cannot run a kubelet here"
  log "remounting the host's cgroup hierarchies in this namespace's /sys/fs/cgroup"
  if grep -q ' /sys/fs/cgroup [^-]* - tmpfs ' /proc/1/mountinfo; then
    mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup
  fi
  # mountinfo: id parent dev root MOUNTPOINT opts [tags] - FSTYPE source SUPEROPTS
  while read -r mp fstype opts; do
    mkdir -p "$mp"
    case "$fstype" in
      cgroup2) mount -t cgroup2 cgroup2 "$mp" ;;
      cgroup) mount -t cgroup -o "$opts" cgroup "$mp" ;;
    esac
  done < <(awk '{ for (i = 7; $i != "-"; i++); if ($5 ~ "^/sys/fs/cgroup" && ($(i+1) == "cgroup" || $(i+1) == "cgroup2")) print $5, $(i+1), $(i+3) }' /proc/1/mountinfo)
  # Symlinks such as cpu -> cpu,cpuacct on hosts that have them.
  local l
  for l in /proc/1/root/sys/fs/cgroup/*; do
    [ -L "$l" ] && ln -sfn "$(readlink "$l")" "/sys/fs/cgroup/${l##*/}"
  done
  return 0
}

write_configs() {
  mkdir -p "$RN/containerd" "$RN/cni/net.d" "$RN/cni/ipam" "$RN/kubelet/pki" "$RN/logs" "$RN/cdi"
  cat >"$RN/containerd/config.toml" <<EOF
version = 3
root = "$RN/containerd/root"
state = "$RN/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  # Pinned: never garbage-collected, and never pulled (there is no registry to pull from).
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below containerd's own, and every
  # sandbox fails ("can't get final child's PID from pipe: EOF"); this clamps it instead.
  restrict_oom_score_adj = true
  # Pod network namespaces under our state dir, not in the shared /run/netns.
  netns_mounts_under_state_dir = true
  # CDI specs from the DRA driver (a claim's devices and environment), under our state dir
  # rather than the host's /etc/cdi and /var/run/cdi (CDI is always on since containerd 2.4).
  cdi_spec_dirs = ["$RN/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$CNI_BIN_DIR"]
    conf_dir = "$RN/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        SystemdCgroup = false
# NRI would open a socket in /run/nri; nothing here uses it.
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
  # No masquerade and no default route: pods reach each other, Services and the node, nothing else.
  cat >"$RN/cni/net.d/10-realnode.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "realnode", "plugins": [
  {"type": "bridge", "bridge": "$POD_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "dataDir": "$RN/cni/ipam",
            "routes": [{"dst": "$CLUSTER_CIDR"}, {"dst": "$SERVICE_CIDR"}, {"dst": "${NODE_IP%.*}.0/24"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  echo "nameserver 127.0.0.1" >"$RN/resolv.conf"
  cat >"$RN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 hosts: the kubelet refuses them unless told otherwise (a warning remains).
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
address: $NODE_IP
port: 10350
healthzBindAddress: 127.0.0.1
healthzPort: 10348
readOnlyPort: 0
staticPodPath: ""
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: ${REALNODE_CA:?}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
memorySwap: {swapBehavior: NoSwap}
resolvConf: $RN/resolv.conf
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
# Imported images cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
# The disk is shared with image builds that briefly fill it (a 7 GB archive written beside the
# old one): once it has room again, lift the disk-pressure taint after 30 s, not 5 min.
evictionPressureTransitionPeriod: 30s
podLogsDir: $RN/logs/pods
registerWithTaints:
- {key: $NODE_LABEL, value: "true", effect: NoSchedule}
EOF
  cat >"$RN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE_NAME
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10356
metricsBindAddress: 127.0.0.1:10349
conntrack: {maxPerCore: 0}
clientConnection: {kubeconfig: $REALNODE_KUBECONFIG}
EOF
  # No forward plugin: names outside the cluster fail, as nothing outside is reachable.
  cat >"$RN/Corefile" <<EOF
.:53 {
  bind $NODE_IP
  errors
  ready 127.0.0.1:8181
  cache 5
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $REALNODE_KUBECONFIG
    pods insecure
  }
}
EOF
}

start_proc() {
  local name="$1" pid
  shift
  if pid="$(proc_pid "$name")"; then
    log "$name already running (pid $pid)"
    return 0
  fi
  # Own session and no inherited stdio or lock fds: a caller capturing our output must not
  # wait on it, and cluster.sh's lock (fd 8) must not outlive the call.
  setsid "$(binary_of "$name")" "$@" </dev/null >>"$RN/logs/$name.log" 2>&1 8>&- 9>&- &
  echo $! >"$RN/$name.pid"
  log "$name started (pid $!, log $RN/logs/$name.log)"
}

stop_proc() {
  local name="$1" pid
  if pid="$(proc_pid "$name")"; then
    kill -TERM "$pid" 2>/dev/null || true
    wait_until 30 "$name to exit" proc_gone "$name" || kill -KILL "$pid" 2>/dev/null || true
    wait_until 10 "$name to exit after SIGKILL" proc_gone "$name" || true
    log "$name stopped"
  fi
  rm -f "$RN/$name.pid"
}

record_host_state() {
  local s p
  [ -f "$RN/host-before" ] && return 0
  {
    for s in "${SYSCTLS[@]}"; do echo "sysctl $s $(sysctl -n "$s")"; done
    for p in "${FIXED_PATHS[@]}"; do [ -e "$p" ] && echo "path $p"; done
    # The cgroup controllers that already had a kubepods group (another kubelet's).
    for p in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do [ -d "$p" ] && echo "path $p"; done
    echo "netns $(readlink /proc/self/ns/net)"
  } >"$RN/host-before.tmp"
  mv "$RN/host-before.tmp" "$RN/host-before"
}

# One real node per machine: the fixed paths and the kubepods cgroups above are shared.
check_single_node() {
  local other f
  for f in "$REALNODE_CACHE"/active-*; do
    [ -f "$f" ] || continue
    other="$(cat "$f")"
    [ "$other" = "$RN" ] && continue
    if [ -f "$other/kubelet.pid" ] && [ -d "/proc/$(cat "$other/kubelet.pid")" ]; then
      die "another real node runs on this machine (state $other); stop its cluster first" \
        "(cluster.sh down with its RAYTRAIN_CLUSTER)"
    fi
    rm -f "$f"
  done
}

active_file() { echo "$REALNODE_CACHE/active-$RN_KEY"; }

import_archive() {
  local archive="$1"
  [ -f "$archive" ] || die "image archive '$archive' not found (a docker-archive or OCI archive .tar)"
  proc_pid containerd >/dev/null || die "the real node's containerd is not running (cluster.sh up --real-node)"
  local t0=$SECONDS
  if ! ctr_ images import "$archive" >>"$RN/logs/import.log" 2>&1; then
    tail -n 5 "$RN/logs/import.log" >&2
    die "ctr could not import '$archive'; is it a docker-archive or OCI archive?"
  fi
  log "imported $archive in $((SECONDS - t0))s"
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

coredns_ready() { curl -fsS -m 2 http://127.0.0.1:8181/ready; }
# The wait ends early when the driver has exited (its log says why). Its pid, not proc_pid:
# right after the start the pid may still be setsid's, before the exec.
dra_ready_or_gone() { [ ! -e "/proc/$(cat "$RN/dra-test-driver.pid")" ] || dra_ready; }
# The names of this node's ResourceSlices of the driver (kubectl takes no field selector for
# them); fails when the API server cannot list them.
dra_slices() {
  kc get resourceslices -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.spec.driver}{"\n"}{end}' |
    awk -v node="$NODE_NAME" -v driver="$DRA_DRIVER" '$2 == node && $3 == driver {print $1}'
}
# The driver has published this node's devices.
dra_ready() { [ -n "$(dra_slices)" ]; }
# This node's ResourceSlices of the driver, deleted.
delete_dra_slices() {
  local names
  names="$(dra_slices)" || die "could not list the ResourceSlices of $NODE_NAME"
  [ -z "$names" ] && return 0
  # shellcheck disable=SC2086 # one name per word
  kc delete resourceslices $names --ignore-not-found >/dev/null ||
    die "could not delete the earlier ResourceSlices of $NODE_NAME: $names"
  log "removed the earlier ResourceSlice(s) of $NODE_NAME: $names"
}
kube_router_ready() { curl -fsS -m 2 "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz"; }

# The kubelet's root dir at RUN/kubelet: a bind mount of $RN/kubelet, made in the node's own
# mount namespace (e2e/netns/run.sh's `ip netns exec` gives it one), like the kubelet's mounts.
mount_kubelet_root() {
  mkdir -p "$RN/kubelet" "$KUBELET_ROOT"
  mountpoint -q "$KUBELET_ROOT" && return 0
  [ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] ||
    die "not binding $KUBELET_ROOT in the host's own mount namespace; run the node inside" \
      "e2e/netns/run.sh (its own network and mount namespaces)"
  mount --bind "$RN/kubelet" "$KUBELET_ROOT"
}

# Mounts under the state dir and the run dir, deepest first.
unmount_under() {
  local m
  for m in $(findmnt -rn -o TARGET | grep -F -e "$RN/" -e "$RUN/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}

# RUN goes once nothing is mounted under it (rm would reach through a bind mount of $RN/kubelet).
remove_run_dir() {
  [ -d "$RUN" ] || return 0
  unmount_under
  if findmnt -rn -o TARGET | grep -F "$RUN/" >/dev/null; then
    log "WARNING: $RUN still holds a mount; left in place: $(findmnt -rn -o TARGET | grep -F "$RUN/" | tr '\n' ' ')"
    return 0
  fi
  rm -rf "$RUN"
  rmdir "$RUN_ROOT" 2>/dev/null || true # only when no other node's directory is in it
}

cmd_up() {
  local missing
  check_socket_paths
  require_netns
  if ! missing="$(bash "$HERE/build.sh" --check containerd kubelet dra-driver coredns kube-router images 2>&1)"; then
    die "the real node's binaries are not built (and this namespace cannot download):" \
      "run 'bash e2e/realnode/build.sh' outside the namespace first. $(echo "$missing" | grep needs | tr '\n' ' ')"
  fi
  [ -x "$RUNC" ] && [ -x "$CNI_BIN_DIR/bridge" ] && command -v iptables >/dev/null &&
    command -v ipset >/dev/null ||
    die "runc, the CNI plugins, iptables or ipset are missing: run 'bash e2e/realnode/build.sh debs'"
  [ "$(id -u)" = 0 ] || die "the real node needs root (mounts, cgroups, iptables)"
  mkdir -p "$RN" "$REALNODE_CACHE"
  check_single_node
  ensure_cgroups # first: record_host_state looks for kubepods cgroups there
  record_host_state
  echo "$RN" >"$(active_file)"
  write_configs
  mkdir -p "$RUN"
  mount_kubelet_root

  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    # An empty bridge: this kernel has no dummy netdev, and the kubelet refuses loopback.
    ip link add "$NODE_BRIDGE" type bridge
    ip addr add "$NODE_IP/32" dev "$NODE_BRIDGE"
    ip link set "$NODE_BRIDGE" up
  fi
  # Host-network pods and the node's own processes reach Services the way a node with a
  # default route does: the route lets the connection start, and kube-proxy's OUTPUT rules
  # rewrite the Service address to an endpoint. Without it a host-network Ray worker could not
  # reach MinIO's Service (connect failed before any rule saw the packet).
  ip route replace "$SERVICE_CIDR" dev "$NODE_BRIDGE" src "$NODE_IP"

  start_proc containerd --config "$RN/containerd/config.toml"
  wait_until "$TIMEOUT" "containerd's socket" "$BIN_CONTAINERD/ctr" --address "$SOCK" version ||
    die "containerd did not answer on $SOCK (log: $RN/logs/containerd.log)"
  if ! ctr_ images ls -q | grep -Fx "$PAUSE_IMAGE" >/dev/null; then
    import_archive "$IMAGES/pause.tar"
  fi

  start_proc kubelet --config="$RN/kubelet.yaml" --kubeconfig="$REALNODE_KUBECONFIG" \
    --root-dir="$KUBELET_ROOT" --cert-dir="$RN/kubelet/pki" --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" --node-labels="$NODE_LABEL=true" --v=2
  wait_until "$TIMEOUT" "node $NODE_NAME Ready" node_ready || {
    tail -n 30 "$RN/logs/kubelet.log" >&2
    die "node $NODE_NAME not Ready within ${TIMEOUT}s (log: $RN/logs/kubelet.log)"
  }
  log "node $NODE_NAME Ready (label $NODE_LABEL=true, taint $NODE_LABEL=true:NoSchedule)"
  # An earlier `down` cordoned it; a Node object can survive that when the API was unreachable.
  kc uncordon "$NODE_NAME" >/dev/null

  # DRA: Kubernetes' example driver as the node's kubelet plugin. It registers with the
  # kubelet through the kubelet's plugins_registry and publishes DRA_DEVICES simulated devices
  # as a ResourceSlice of this node (a DeviceClass selects them by device.driver). When the
  # kubelet prepares a claim, it writes a CDI spec that containerd applies to the containers
  # given the claim: the claim's opaque configuration as environment variables
  # (user_<key>=<value>, admin_<key>=<value> from the DeviceClass's).
  # The driver creates the plugins directory but not its own socket directory in it.
  mkdir -p "$KUBELET_ROOT/plugins/$DRA_DRIVER" "$KUBELET_ROOT/plugins_registry"
  # A ResourceSlice of the driver's previous run (before a `node-down`) is still there: it is
  # removed, so that the wait below sees only what this run publishes. Counting the old one
  # let `up` go on, and the check after the wait failed when the old slice was replaced a
  # moment later, leaving the node without kube-proxy, kube-router and CoreDNS.
  if ! proc_pid dra-test-driver >/dev/null; then
    delete_dra_slices
  fi
  start_proc dra-test-driver --kubeconfig="$REALNODE_KUBECONFIG" --drivername="$DRA_DRIVER" \
    kubelet-plugin --node-name="$NODE_NAME" --num-devices="$DRA_DEVICES" \
    --plugin-registration-path="$KUBELET_ROOT/plugins_registry" --datadir="$KUBELET_ROOT/plugins" \
    --cdi-dir="$RN/cdi"
  if ! wait_until "$TIMEOUT" "the DRA driver's ResourceSlice" dra_ready_or_gone || ! dra_ready; then
    tail -n 20 "$RN/logs/dra-test-driver.log" >&2
    if [ ! -e "/proc/$(cat "$RN/dra-test-driver.pid")" ]; then
      die "the DRA driver exited before it published a ResourceSlice for $NODE_NAME (log: $RN/logs/dra-test-driver.log)"
    fi
    die "the DRA driver published no ResourceSlice for $NODE_NAME within ${TIMEOUT}s (log: $RN/logs/dra-test-driver.log)"
  fi

  start_proc kube-proxy --config="$RN/kube-proxy.yaml" --v=1
  # NetworkPolicy: kube-router's firewall alone (iptables and ipsets); the bridge plugin still
  # does the pod network and kube-proxy the Services.
  start_proc kube-router --kubeconfig="$REALNODE_KUBECONFIG" --hostname-override="$NODE_NAME" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --enable-ipv6=false --service-cluster-ip-range="$SERVICE_CIDR" \
    --health-port="$KUBE_ROUTER_HEALTH_PORT" --metrics-port=0 --v=1
  start_proc coredns -conf "$RN/Corefile"
  wait_until "$TIMEOUT" "CoreDNS ready" coredns_ready ||
    die "CoreDNS not ready within ${TIMEOUT}s (log: $RN/logs/coredns.log)"
  wait_until "$TIMEOUT" "kube-proxy healthz" curl -fsS -m 2 http://127.0.0.1:10356/healthz ||
    die "kube-proxy not healthy within ${TIMEOUT}s (log: $RN/logs/kube-proxy.log)"
  wait_until "$TIMEOUT" "kube-router healthz" kube_router_ready || {
    tail -n 20 "$RN/logs/kube-router.log" >&2
    die "kube-router not healthy within ${TIMEOUT}s (log: $RN/logs/kube-router.log)"
  }
  log "real node up: containerd $CONTAINERD_VERSION ($SOCK), kubelet/kube-proxy $NODE_K8S_VERSION, kube-router $KUBE_ROUTER_VERSION, CoreDNS $COREDNS_VERSION at $NODE_IP"
}

# Delete the node's pods and wait until containerd runs no task; kill what is left.
drain() {
  local deadline
  if proc_pid kubelet >/dev/null && kc get node "$NODE_NAME" >/dev/null 2>&1; then
    # Cordon first, or controllers would put replacement pods back on the node.
    kc cordon "$NODE_NAME" >/dev/null 2>&1 || true
    kc delete pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" \
      --grace-period=5 --wait=false >/dev/null 2>&1 || true
    deadline=$((SECONDS + 60))
    while [ -n "$(ctr_ tasks ls -q 2>/dev/null)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  fi
  if proc_pid containerd >/dev/null; then
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -a -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
    deadline=$((SECONDS + 20))
    while ctr_ tasks ls 2>/dev/null | grep RUNNING >/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$t" >/dev/null 2>&1 || true; done
  fi
}

# Shims outlive containerd by design; ours are the ones serving our socket.
stop_shims() {
  local p
  for p in /proc/[0-9]*; do
    [ -r "$p/cmdline" ] || continue
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep "^$BIN_CONTAINERD/containerd-shim-runc-v2 .*-address $SOCK " >/dev/null; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
}

remove_chains() {
  local ipt t chain rule rules chains
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in filter nat mangle; do
      rules="$("$ipt" -t "$t" -S 2>/dev/null || true)"
      # Jumps from the built-in chains first (-A INPUT ... -j KUBE-...), then the chains.
      while read -r rule; do
        case "$rule" in
          "-A KUBE-"* | "-A CNI-"*) ;;
          "-A "*" -j KUBE-"* | "-A "*" -j CNI-"*)
            # eval: -S quotes comments that hold spaces.
            eval "\"\$ipt\" -t \"\$t\" ${rule/#-A/-D}" 2>/dev/null || true
            ;;
        esac
      done <<<"$rules"
      chains="$(awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ { print $2 }' <<<"$rules")"
      for chain in $chains; do "$ipt" -t "$t" -F "$chain" 2>/dev/null || true; done
      for chain in $chains; do "$ipt" -t "$t" -X "$chain" 2>/dev/null || true; done
    done
  done
}

cleanup_host() {
  local line what key value m p netns_here=0
  [ -f "$RN/host-before" ] || return 0
  ensure_cgroups
  if grep -Fqx "netns $(readlink /proc/self/ns/net)" "$RN/host-before"; then netns_here=1; fi
  if [ $netns_here = 1 ]; then
    if [ -f "$RN/kube-proxy.yaml" ]; then
      "$(binary_of kube-proxy)" --config="$RN/kube-proxy.yaml" --cleanup >>"$RN/logs/kube-proxy.log" 2>&1 || true
    fi
    remove_chains
    # kube-router's ipsets, once no rule refers to them.
    if command -v ipset >/dev/null; then
      for m in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do
        ipset destroy "$m" 2>/dev/null || log "WARNING: could not destroy the ipset $m"
      done
    fi
    ip link delete "$POD_BRIDGE" 2>/dev/null || true
    ip link delete "$NODE_BRIDGE" 2>/dev/null || true
  fi
  # Pod volumes, then the kubelet's bind mounts of its own root dir; deepest first.
  unmount_under
  local d
  for d in "$KUBELET_ROOT" "$RN/kubelet"; do
    mountpoint -q "$d" 2>/dev/null && { umount "$d" || umount -l "$d" || true; }
  done
  # kubepods cgroups, deepest first, unless they were there before us.
  for p in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$p" ] || continue
    grep -Fqx "path $p" "$RN/host-before" && continue
    find "$p" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$p" ] && log "WARNING: could not remove the cgroup $p (a process still in it?)"
  done
  # Fixed paths we created, deepest first.
  for p in $(printf '%s\n' "${FIXED_PATHS[@]}" | sort -r); do
    [ -e "$p" ] || continue
    grep -Fqx "path $p" "$RN/host-before" && continue
    if [ "$p" = /run/netns ]; then
      rmdir "$p" 2>/dev/null || true # shared with `ip netns`: only when empty
    else
      rm -rf "$p"
    fi
  done
  while read -r what key value; do
    [ "$what" = sysctl ] || continue
    [ "$(sysctl -n "$key")" = "$value" ] || sysctl -q -w "$key=$value" >/dev/null ||
      log "WARNING: could not restore $key=$value"
  done <"$RN/host-before"
  rm -f "$RN/host-before"
}

cmd_down() {
  local pid name i netns
  # The node's network and mount namespaces are where its iptables rules, links and mounts
  # live: from anywhere else, enter them through a process that still runs there.
  if [ -f "$RN/host-before" ] && [ -z "${REALNODE_ENTERED:-}" ]; then
    netns="$(sed -n 's/^netns //p' "$RN/host-before")"
    if [ "$netns" != "$(readlink /proc/self/ns/net)" ]; then
      for name in "${PROCS[@]}"; do
        if pid="$(proc_pid "$name")" && [ "$(readlink "/proc/$pid/ns/net")" = "$netns" ]; then
          log "entering the node's namespaces through $name (pid $pid)"
          exec nsenter --target "$pid" --net --mount -- env REALNODE_ENTERED=1 \
            RAYTRAIN_NETNS="${RAYTRAIN_NETNS:-entered}" bash "$0" down
        fi
      done
    fi
  fi
  drain
  for ((i = ${#PROCS[@]} - 1; i >= 0; i--)); do stop_proc "${PROCS[$i]}"; done
  stop_shims
  cleanup_host
  remove_run_dir
  rm -f "$(active_file)"
  log "real node stopped; host state restored"
}

cmd_status() {
  local name pid rc=0
  for name in "${PROCS[@]}"; do
    if pid="$(proc_pid "$name")"; then
      echo "$name: running (pid $pid, log $RN/logs/$name.log)"
    else
      echo "$name: not running"
      rc=1
    fi
  done
  echo "containerd socket: $SOCK"
  echo "sockets dir: $RUN (the kubelet's root dir: $KUBELET_ROOT, a bind mount of $RN/kubelet)"
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  import-image)
    [ $# -eq 2 ] || die "usage: node.sh import-image ARCHIVE"
    import_archive "$2"
    ;;
  status) cmd_status ;;
  socket) echo "$SOCK" ;;
  check-sockets)
    socket_paths
    check_socket_paths
    ;;
  *)
    sed -n '2,19p' "$0" >&2
    exit 2
    ;;
esac
