#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler run as local processes (kwokctl's binary
# runtime), KWOK fakes the nodes (GPU capacity, pods go Running), and the KubeRay operator
# runs against it out of cluster.
#
#   cluster.sh up [--real-node]  build (cached) and start; last line printed: KUBECONFIG=<path>
#   cluster.sh down              stop everything (KubeRay operator, real node) and drop the state
#   cluster.sh status            say what runs; exit 0 only if the API server is ready
#   cluster.sh kubeconfig        print the kubeconfig path of a running cluster
#   cluster.sh import-image F    import an image archive (docker-archive or OCI) into the real node
#   cluster.sh socket            print the real node's containerd socket path
#   cluster.sh node-down         stop only the real node (up --real-node starts it again)
#   cluster.sh enter [CMD...]    run CMD (default: an interactive shell) inside the running
#                                cluster's network and mount namespaces, KUBECONFIG set and our
#                                kubectl first on PATH: how a shell of the host reaches a cluster
#                                that lives in a namespace of e2e/netns/run.sh
#   cluster.sh audit-log         print the path of the API server's audit log (RAYTRAIN_AUDIT=1)
#   cluster.sh restart-apiserver [SECONDS]
#                                stop the API server, keep it down SECONDS (default 0), start it
#                                again with the same command line; the rest keeps running
#
# --real-node (or RAYTRAIN_REAL_NODE=1) adds `realnode`, a real kubelet + containerd node
# (e2e/realnode/), tainted raytrain.dev/real-node=true:NoSchedule. It starts only inside a
# network namespace: bash e2e/netns/run.sh bash e2e/controlplane/cluster.sh up --real-node
#
# Environment: RAYTRAIN_CLUSTER (name, default raytrain), RAYTRAIN_NODES (fake GPU nodes,
# default 4), RAYTRAIN_CACHE (binaries, default ~/.cache/raytrain), RAYTRAIN_STATE (cluster
# state, default $RAYTRAIN_CACHE/state), RAYTRAIN_UP_TIMEOUT (seconds per wait, default 180),
# RAYTRAIN_REAL_NODE (1: as --real-node), RAYTRAIN_RUN_DIR (the real node's sockets, default
# /run/raytrain: e2e/realnode/node.sh), RAYTRAIN_AUDIT (1: the API server logs every write, who
# sent it and with which user agent, at the Metadata level: `cluster.sh audit-log`).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

CLUSTER="${RAYTRAIN_CLUSTER:-raytrain}"
NODES="${RAYTRAIN_NODES:-4}"
TIMEOUT="${RAYTRAIN_UP_TIMEOUT:-180}"
STATE_ROOT="${RAYTRAIN_STATE:-$RAYTRAIN_CACHE/state}"
STATE="$STATE_ROOT/$CLUSTER"
KUBECONFIG_PATH="$STATE/kubeconfig"
OPERATOR_PID="$STATE/kuberay-operator.pid"
OPERATOR_LOG="$STATE/kuberay-operator.log"
KWOKCTL_LOG="$STATE/kwokctl.log"
REALNODE_SH="$REPO/e2e/realnode/node.sh"
REALNODE_IP=10.245.0.1             # the real node's IP (e2e/realnode/node.sh)
KUBERNETES_SERVICE_IP=10.97.0.1    # first address of --service-cluster-ip-range below
REAL_NODE="${RAYTRAIN_REAL_NODE:-0}"
AUDIT="${RAYTRAIN_AUDIT:-0}"
AUDIT_POLICY="$STATE/audit-policy.yaml"

K8S_BIN="$(bindir k8s)"
ETCD_BIN="$(bindir etcd)"
KWOK_BIN="$(bindir kwok)"
KUBERAY_BIN="$(bindir kuberay)"
KUBECTL="$K8S_BIN/kubectl"
KWOKCTL="$KWOK_BIN/kwokctl"

# kwokctl: binary runtime, every binary a local path (a URL default would mean a download).
export KWOK_WORKDIR="$STATE_ROOT/kwok"
export KWOK_RUNTIME=binary
export KWOK_KUBE_VERSION="$K8S_VERSION"
export KWOK_KUBE_APISERVER_BINARY="$K8S_BIN/kube-apiserver"
export KWOK_KUBE_CONTROLLER_MANAGER_BINARY="$K8S_BIN/kube-controller-manager"
export KWOK_KUBE_SCHEDULER_BINARY="$K8S_BIN/kube-scheduler"
export KWOK_KUBECTL_BINARY="$KUBECTL"
export KWOK_CONTROLLER_BINARY="$KWOK_BIN/kwok"
export KWOK_ETCD_BINARY="$ETCD_BIN/etcd"
# kwokctl runs `kubectl` from PATH: make it ours, not whatever the machine has.
export PATH="$K8S_BIN:$PATH"

START=$SECONDS
log() { printf '[cluster %s +%ss] %s\n' "$CLUSTER" "$((SECONDS - START))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

kc() { "$KUBECTL" --kubeconfig="$KUBECONFIG_PATH" "$@"; }

# wait_until SECONDS WHAT CMD...: run CMD until it succeeds; fail after SECONDS.
wait_until() {
  local limit="$1" what="$2" deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "timed out after ${limit}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}

cluster_exists() {
  # Not grep -q: exiting at the first match would kill kwokctl with SIGPIPE while it still
  # lists other clusters, and pipefail would turn that into "no such cluster".
  [ -x "$KWOKCTL" ] && "$KWOKCTL" get clusters 2>/dev/null | grep -x "$CLUSTER" >/dev/null
}

api_ready() {
  [ -f "$KUBECONFIG_PATH" ] && [ -x "$KUBECTL" ] &&
    kc --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

operator_pid() {
  local pid
  [ -f "$OPERATOR_PID" ] || return 1
  pid="$(cat "$OPERATOR_PID")"
  # Only our process: the pid must still be a ray-operator, not a recycled number.
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$KUBERAY_BIN/ray-operator" || return 1
  echo "$pid"
}

# A zombie (exited, not yet reaped) has an empty cmdline, so it counts as gone.
operator_gone() { ! operator_pid >/dev/null; }

# stop_pid PID: SIGTERM, up to 5 s to exit, then SIGKILL. Returns once the process is gone
# (or after the SIGKILL was sent to one that would not go).
stop_pid() {
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 10; i++)); do
    [ -e "/proc/$pid" ] || return 0
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.5
}

show_logs() {
  local f
  log "log tails (state: $STATE, kwok: $KWOK_WORKDIR/clusters/$CLUSTER/logs):"
  for f in "$KWOKCTL_LOG" "$OPERATOR_LOG" "$KWOK_WORKDIR/clusters/$CLUSTER"/logs/*.log; do
    [ -f "$f" ] || continue
    printf -- '--- %s\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
}

write_kwokctl_config() {
  # Pods on the real node reach the API server (the operator, the runtime's status reports)
  # through the `kubernetes` Service, whose endpoint is the advertised address: the node's IP,
  # with the API server listening on every address of the cluster's own network namespace
  # (the real node runs only inside one). Without a real node it stays on loopback.
  local advertise=127.0.0.1 bind_args=""
  if [ "$REAL_NODE" = 1 ]; then
    advertise="$REALNODE_IP"
    bind_args="  - key: bind-address
    value: 0.0.0.0"
  fi
  local audit=""
  if [ "$AUDIT" = 1 ]; then
    # Writes only (reads and watches would flood it), without bodies.
    cat >"$AUDIT_POLICY" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
EOF
    audit="  kubeAuditPolicy: $AUDIT_POLICY"
  fi
  cat >"$STATE/kwokctl.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
$audit
  bindAddress: 127.0.0.1
  # The certificate names what pods dial: the node's IP and the \`kubernetes\` Service's IP.
  kubeApiserverCertSANs: ["$REALNODE_IP", "$KUBERNETES_SERVICE_IP"]
  kubeVersion: $K8S_VERSION
  kubeApiserverBinary: $KWOK_KUBE_APISERVER_BINARY
  kubeControllerManagerBinary: $KWOK_KUBE_CONTROLLER_MANAGER_BINARY
  kubeSchedulerBinary: $KWOK_KUBE_SCHEDULER_BINARY
  kubectlBinary: $KWOK_KUBECTL_BINARY
  kwokControllerBinary: $KWOK_CONTROLLER_BINARY
  etcdBinary: $KWOK_ETCD_BINARY
componentsPatches:
- name: etcd
  extraArgs:
  # The KubeRay CRDs are 0.7-1.4 MB each; the default limit is 1.5 MiB.
  - key: max-request-bytes
    value: "4194304"
  # Throwaway test data: skip fsync, it only slows the tests down.
  - key: unsafe-no-fsync
    value: "true"
- name: kube-apiserver
  extraArgs:
  - key: advertise-address
    value: $advertise
$bind_args
  # For the real node (e2e/realnode/): logs and exec reach its kubelet with a client
  # certificate, by its InternalIP; Services get the range its kube-proxy and CNI routes know.
  - key: kubelet-client-certificate
    value: $KWOK_WORKDIR/clusters/$CLUSTER/pki/admin.crt
  - key: kubelet-client-key
    value: $KWOK_WORKDIR/clusters/$CLUSTER/pki/admin.key
  - key: kubelet-preferred-address-types
    value: InternalIP
  - key: service-cluster-ip-range
    value: 10.97.0.0/24
# kwokctl starts kwok with --manage-all-nodes=true, which would take over a real node too;
# the last flag wins, and the fake nodes carry this annotation (gpu_nodes).
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: kwok.x-k8s.io/node=fake
EOF
}

# The real node's script gets the cluster's kubeconfig, CA and kubectl through the environment.
realnode() {
  REALNODE_STATE="$STATE/realnode" REALNODE_KUBECONFIG="$KUBECONFIG_PATH" \
    REALNODE_CA="$KWOK_WORKDIR/clusters/$CLUSTER/pki/ca.crt" REALNODE_KUBECTL="$KUBECTL" \
    RAYTRAIN_UP_TIMEOUT="$TIMEOUT" bash "$REALNODE_SH" "$@"
}

real_node_started() { [ -d "$STATE/realnode" ]; }

# Checked before anything starts: the real node's addresses must never exist in the host's
# namespace, and nothing can be downloaded inside one.
require_netns_for_real_node() {
  # First, before anything starts: the node's Unix sockets must have paths short enough to bind.
  realnode check-sockets >/dev/null || die "the real node cannot start with these paths (above)"
  if [ -z "${RAYTRAIN_NETNS:-}" ] || [ "$(readlink /proc/self/ns/net)" = "$(readlink /proc/1/ns/net)" ]; then
    die "--real-node (RAYTRAIN_REAL_NODE=1) runs only inside a network namespace of its own, so" \
      "that node, pod and Service addresses never exist in the host's namespace; run:" \
      "bash e2e/netns/run.sh bash $0 up --real-node"
  fi
  bash "$REPO/e2e/realnode/build.sh" --check debs containerd kubelet coredns images >/dev/null 2>&1 ||
    die "the real node's binaries are not built or its Debian packages are missing, and a" \
      "network namespace cannot download: run 'bash e2e/realnode/build.sh' outside it first"
}

# KWOK's default stages, except that the KubeRay job submitter's pod is not completed.
#
# kwokctl's defaults complete every Job-owned pod the moment it runs. For KubeRay's submitter
# Job that is wrong: the real submitter runs `ray job submit` and follows the job's log until the
# Ray job ends. A fake one that exits at once makes KubeRay fail the RayJob 30 s later ("the
# submitter finished but the ray job did not reach terminal state"), whatever the training does.
# So the pod-complete stage gets one more selector term, and the submitter stays Running like a
# real one. The stage files come from the kwok module that build.sh built from; any Stage in the
# config replaces all of kwokctl's defaults, so all five go in.
KWOK_STAGE_FILES=(
  node/fast/node-initialize.yaml
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml
  pod/fast/pod-complete.yaml
  pod/fast/pod-delete.yaml
)

kwok_stages() {
  local dir="$(bindir kwok)/stages" src f
  if [ ! -f "$dir/pod/fast/pod-complete.yaml" ]; then
    src="$(cd "$HERE/kwok" && GOTOOLCHAIN=local GOFLAGS=-mod=mod \
      go mod download -json "$KWOK_MODULE@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -n "$src" ] && [ -d "$src/kustomize/stage" ] ||
      die "cannot find the stage files of $KWOK_MODULE@$KWOK_VERSION in the Go module cache"
    for f in "${KWOK_STAGE_FILES[@]}"; do
      mkdir -p "$(dirname "$dir/$f")"
      cp "$src/kustomize/stage/$f" "$dir/$f"
      chmod u+w "$dir/$f"
    done
  fi
  for f in "${KWOK_STAGE_FILES[@]}"; do
    echo "---"
    if [ "$f" = pod/fast/pod-complete.yaml ]; then
      # After the "owned by a Job" term of the selector: "and not KubeRay's submitter".
      awk '{ print }
        /^      - .Job.$/ && !done {
          print "    - key: \x27.spec.containers.[].name\x27"
          print "      operator: \x27NotIn\x27"
          print "      values:"
          print "      - \x27ray-job-submitter\x27"
          done = 1
        }' "$dir/$f"
    else
      cat "$dir/$f"
    fi
  done
}

gpu_nodes() {
  local i name
  for ((i = 0; i < NODES; i++)); do
    name="gpu-node-$i"
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
    type: kwok
status:
  capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
  allocatable: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
EOF
  done
}

kuberay_crd_dir() {
  local modcache
  modcache="$(go env GOMODCACHE 2>/dev/null || true)"
  [ -n "$modcache" ] || modcache="${GOPATH:-$HOME/go}/pkg/mod"
  echo "$modcache/github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION/config/crd/bases"
}

apply_crds() {
  local what="$1"
  shift
  # Server-side apply: the KubeRay CRDs are too big for client-side apply's annotation.
  kc apply --server-side --force-conflicts --field-manager=raytrain-cluster "$@" >/dev/null
  # Retried: right after the apply, kubectl wait can fail at once on a CRD whose
  # status.conditions the API server has not filled in yet ("accessor error: <nil>").
  wait_until "$TIMEOUT" "$what CRDs Established" \
    kc wait --for=condition=Established --timeout=10s "$@" ||
    die "$what CRDs not Established within ${TIMEOUT}s"
}

start_operator() {
  local pid
  if pid="$(operator_pid)"; then
    log "KubeRay operator $KUBERAY_VERSION already running (pid $pid)"
    return 0
  fi
  : >"$OPERATOR_LOG"
  # Own session, no inherited stdio (a caller capturing our output must not wait on it),
  # and not the lock fd 8 (it would hold the lock for as long as it runs).
  KUBECONFIG="$KUBECONFIG_PATH" setsid "$KUBERAY_BIN/ray-operator" \
    --kubeconfig="$KUBECONFIG_PATH" \
    --enable-leader-election=false \
    --metrics-addr=0 \
    --health-probe-bind-address=0 \
    --log-stdout-encoder=console \
    </dev/null >>"$OPERATOR_LOG" 2>&1 8>&- &
  echo $! >"$OPERATOR_PID"
  log "KubeRay operator $KUBERAY_VERSION started (pid $!, log $OPERATOR_LOG)"
  # With probes off, readiness is the RayCluster controller's workers starting.
  wait_until "$TIMEOUT" "the KubeRay operator to start its controllers" \
    grep -q 'RayCluster.*Starting workers' "$OPERATOR_LOG" ||
    { operator_pid >/dev/null || log "the KubeRay operator exited"; return 1; }
}

stop_operator() {
  local pid
  if pid="$(operator_pid)"; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_until 20 "the KubeRay operator to exit" operator_gone; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "KubeRay operator stopped"
  fi
  rm -f "$OPERATOR_PID"
}

cmd_up() {
  local t0 crds f names
  [[ "$NODES" =~ ^[0-9]+$ ]] || die "RAYTRAIN_NODES must be a number, not '$NODES'"
  [ "$REAL_NODE" != 1 ] || require_netns_for_real_node
  command -v go >/dev/null 2>&1 || die "'go' not found: install Go 1.26 to build the control plane"
  bash "$HERE/build.sh" >&2 || die "build failed"
  mkdir -p "$STATE"

  if cluster_exists && api_ready; then
    log "cluster already running"
  else
    if cluster_exists; then
      log "cluster '$CLUSTER' exists but is not ready: recreating it"
      stop_operator
      "$KWOKCTL" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_PATH" \
        </dev/null >>"$KWOKCTL_LOG" 2>&1 || true
    fi
    write_kwokctl_config
    kwok_stages >>"$STATE/kwokctl.yaml"
    grep -q "ray-job-submitter" "$STATE/kwokctl.yaml" ||
      die "could not add the submitter exception to KWOK's pod-complete stage"
    rm -f "$KUBECONFIG_PATH"
    t0=$SECONDS
    log "starting etcd $ETCD_VERSION, Kubernetes $K8S_VERSION, kwok $KWOK_VERSION (binary runtime)"
    # kwokctl's children keep the log file, never our stdout or lock (see start_operator).
    if ! "$KWOKCTL" --config "$STATE/kwokctl.yaml" create cluster --name "$CLUSTER" \
      --kubeconfig "$KUBECONFIG_PATH" --wait "${TIMEOUT}s" \
      </dev/null >>"$KWOKCTL_LOG" 2>&1 8>&-; then
      show_logs
      die "kwokctl create cluster failed"
    fi
    log "control plane up in $((SECONDS - t0))s"
  fi
  wait_until "$TIMEOUT" "the API server /readyz" api_ready || { show_logs; die "API server not ready"; }

  gpu_nodes | kc apply --server-side --field-manager=raytrain-cluster -f - >/dev/null
  kc wait --for=condition=Ready node -l type=kwok --timeout="${TIMEOUT}s" >/dev/null ||
    { show_logs; die "fake nodes not Ready within ${TIMEOUT}s"; }
  log "$NODES fake GPU node(s) Ready (8x nvidia.com/gpu each)"

  crds="$(kuberay_crd_dir)"
  [ -d "$crds" ] || (cd "$HERE/kuberay" && go mod download "$KUBERAY_MODULE")
  [ -d "$crds" ] || die "KubeRay CRDs not found in $crds"
  # Same version, same CRDs: skip the 4 MB apply when all are already served.
  # (ray.io_rayjobs.yaml holds the CRD rayjobs.ray.io, and so on.)
  names=()
  for f in "$crds"/ray.io_*.yaml; do
    f="${f##*/ray.io_}"
    names+=("crd/${f%.yaml}.ray.io")
  done
  if kc get "${names[@]}" -o name >/dev/null 2>&1; then
    kc wait --for=condition=Established --timeout="${TIMEOUT}s" "${names[@]}" >/dev/null ||
      die "KubeRay CRDs not Established within ${TIMEOUT}s"
  else
    apply_crds KubeRay -f "$crds"
  fi
  log "KubeRay $KUBERAY_VERSION CRDs Established"

  if compgen -G "$REPO/crds/*.yaml" >/dev/null; then
    apply_crds raytrain -f "$REPO/crds"
    log "raytrain CRDs from crds/ Established"
  fi

  start_operator || { show_logs; die "KubeRay operator did not start"; }

  if [ "$REAL_NODE" = 1 ]; then
    realnode up || die "the real node did not start (logs: $STATE/realnode/logs/)"
    log "real node containerd socket: $(realnode socket)"
  fi

  log "ready in $((SECONDS - START))s"
  echo "KUBECONFIG=$KUBECONFIG_PATH"
}

cmd_down() {
  local node_rc=0
  # First, while the API server still answers: the node drains its pods through it. A failure
  # there must not leave the control plane running: report it at the end.
  if real_node_started; then
    realnode down || node_rc=$?
  fi
  stop_operator
  if cluster_exists; then
    # kwokctl does not stop a component that restart-apiserver started again: note the pids
    # now, stop whichever of them is left after kwokctl's delete.
    local dir="$KWOK_WORKDIR/clusters/$CLUSTER" f pid
    local -a pids=()
    for f in "$dir"/pids/*.pid; do
      [ -f "$f" ] && pids+=("$(cat "$f")")
    done
    mkdir -p "$STATE" # for the log, after a down that failed half-way
    "$KWOKCTL" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_PATH" \
      </dev/null >>"$KWOKCTL_LOG" 2>&1 || die "kwokctl delete cluster failed (see $KWOKCTL_LOG)"
    for pid in "${pids[@]}"; do
      # Only ours: a binary of this cluster's directory, not a recycled number.
      [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "^$dir/" ||
        continue
      stop_pid "$pid"
      log "stopped pid $pid, left running by kwokctl"
    done
    log "cluster deleted"
  else
    log "no cluster '$CLUSTER' to delete"
  fi
  if [ $node_rc -ne 0 ]; then
    die "the real node did not stop cleanly (exit $node_rc; logs kept: $STATE/realnode/logs/);" \
      "fix what it reports and run '$0 down' again"
  fi
  # --one-file-system: never into a mount a failed clean-up left behind.
  rm -rf --one-file-system "$STATE"
}

cmd_status() {
  local pid rc=0
  echo "cluster:    $CLUSTER"
  echo "state dir:  $STATE"
  if ! cluster_exists; then
    echo "status:     absent"
    return 1
  fi
  if api_ready; then
    echo "status:     running"
    echo "server:     $(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
    echo "version:    $(kc version -o json 2>/dev/null | grep -m1 gitVersion | tr -d ' ",' | cut -d: -f2- || true)"
    echo "nodes:      $(kc get nodes -l type=kwok --no-headers 2>/dev/null | wc -l)"
  else
    echo "status:     not ready"
    rc=1
  fi
  if pid="$(operator_pid)"; then
    echo "kuberay:    running (pid $pid, log $OPERATOR_LOG)"
  else
    echo "kuberay:    not running"
    rc=1
  fi
  if real_node_started; then
    realnode status | sed 's/^/realnode:   /' || rc=1
  fi
  echo "KUBECONFIG=$KUBECONFIG_PATH"
  return $rc
}

cmd_import_image() {
  [ $# -eq 1 ] || die "usage: $0 import-image ARCHIVE (a docker-archive or OCI archive)"
  real_node_started || die "cluster '$CLUSTER' has no real node (run: $0 up --real-node)"
  realnode import-image "$1"
}

cmd_node_down() {
  real_node_started || { log "no real node in cluster '$CLUSTER'"; return 0; }
  realnode down || die "the real node did not stop cleanly (logs: $STATE/realnode/logs/)"
}

cmd_socket() {
  real_node_started || die "cluster '$CLUSTER' has no real node (run: $0 up --real-node)"
  realnode socket
}

# relaunch DIR NAME ARGV...: start a control-plane component again, detached like kwokctl's own
# start (its own session, the log file, none of our descriptors: an inherited pipe would keep
# whoever reads our output waiting for the component's end), and record its pid.
relaunch() {
  local dir="$1" name="$2"
  shift 2
  (
    cd "$dir"
    for fd in /proc/$BASHPID/fd/*; do
      fd="${fd##*/}"
      [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null
    done
    exec setsid "$@" </dev/null >>"$dir/logs/$name.log" 2>&1
  ) &
  echo "$!" >"$dir/pids/$name.pid"
}

# The API server alone, stopped and started again with the command line it had, while etcd,
# the controllers, KubeRay and every client keep running. SIGTERM first, as an upgrade would:
# it stops listening at once, then waits up to a minute for open watches to end; after 5 s of
# that it gets SIGKILL. Clients see refused connections and broken watches until it is back;
# what they do then is what a test of restart-apiserver looks at.
cmd_restart_apiserver() {
  local dir="$KWOK_WORKDIR/clusters/$CLUSTER" pid down_for="${1:-0}" c
  local -a argv cm_argv sched_argv
  local pidfile="$dir/pids/kube-apiserver.pid"
  cluster_exists && [ -f "$pidfile" ] || die "cluster '$CLUSTER' is not running (run: $0 up)"
  pid="$(cat "$pidfile")"
  [ -r "/proc/$pid/cmdline" ] && tr '\0' '\n' <"/proc/$pid/cmdline" | head -1 |
    grep -q '/kube-apiserver$' || die "pid $pid in $pidfile is not a kube-apiserver"
  mapfile -d '' -t argv <"/proc/$pid/cmdline"
  # The controller manager and the scheduler exit when they cannot renew their leader lease
  # while the server is down; as a kubelet would restart their static pods, they are started
  # again below with these command lines.
  mapfile -d '' -t cm_argv <"/proc/$(cat "$dir/pids/kube-controller-manager.pid")/cmdline"
  mapfile -d '' -t sched_argv <"/proc/$(cat "$dir/pids/kube-scheduler.pid")/cmdline"
  stop_pid "$pid"
  log "kube-apiserver stopped (pid $pid)"
  sleep "$down_for"
  relaunch "$dir" kube-apiserver "${argv[@]}"
  wait_until "$TIMEOUT" "the API server to be ready again" api_ready ||
    { show_logs; die "kube-apiserver did not come back (log: $dir/logs/kube-apiserver.log)"; }
  log "kube-apiserver ready again (pid $(cat "$pidfile"))"
  # A lost lease shows within the renew deadline (10 s): wait that long, then restart whichever
  # of the two has exited.
  sleep 12
  for c in kube-controller-manager kube-scheduler; do
    [ -e "/proc/$(cat "$dir/pids/$c.pid")" ] && continue
    log "$c exited while the API server was down (lost its lease); starting it again"
    if [ "$c" = kube-controller-manager ]; then
      relaunch "$dir" "$c" "${cm_argv[@]}"
    else
      relaunch "$dir" "$c" "${sched_argv[@]}"
    fi
  done
  for c in etcd kwok-controller; do
    [ -f "$dir/pids/$c.pid" ] && [ -e "/proc/$(cat "$dir/pids/$c.pid")" ] ||
      die "$c exited while the API server was down (log: $dir/logs/$c.log)"
  done
  operator_pid >/dev/null || die "the KubeRay operator exited while the API server was down"
}

# The pid of a process of this cluster that runs in the cluster's namespaces: the API server,
# etcd, the real node's kubelet or containerd, KubeRay. Only ours: its command line names this
# cluster's kwok directory or state dir (not a recycled number).
cluster_pid() {
  local dir="$KWOK_WORKDIR/clusters/$CLUSTER" f pid
  for f in "$dir/pids/kube-apiserver.pid" "$dir/pids/etcd.pid" "$STATE/realnode/kubelet.pid" \
    "$STATE/realnode/containerd.pid" "$OPERATOR_PID"; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || continue
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F -e "$dir/" -e "$STATE/" >/dev/null || continue
    echo "$pid"
    return 0
  done
  return 1
}

cmd_enter() {
  local pid
  cluster_exists && [ -f "$KUBECONFIG_PATH" ] || die "cluster '$CLUSTER' is not running (run: $0 up)"
  pid="$(cluster_pid)" || die "no process of cluster '$CLUSTER' runs; stop what is left of it: $0 down"
  [ $# -gt 0 ] || set -- "${SHELL:-bash}" -i
  local -a env=(KUBECONFIG="$KUBECONFIG_PATH" RAYTRAIN_CLUSTER="$CLUSTER" PATH="$PATH")
  if [ "$(readlink "/proc/$pid/ns/net")" = "$(readlink /proc/self/ns/net)" ]; then
    exec env "${env[@]}" RAYTRAIN_NETNS="${RAYTRAIN_NETNS:-entered}" "$@"
  fi
  # The mount namespace too: the real node's mounts (its kubelet's root dir) are made there.
  exec nsenter --target "$pid" --net --mount --wd="$PWD" -- \
    env "${env[@]}" RAYTRAIN_NETNS=entered "$@"
}

cmd_kubeconfig() {
  cluster_exists && [ -f "$KUBECONFIG_PATH" ] || die "cluster '$CLUSTER' is not running (run: $0 up)"
  echo "$KUBECONFIG_PATH"
}

# up and down of one cluster never overlap (two test sessions may share it).
with_lock() {
  mkdir -p "$STATE_ROOT"
  exec 8>"$STATE_ROOT/$CLUSTER.lock"
  flock 8
  "$@"
}

case "${1:-}" in
  up)
    for arg in "${@:2}"; do
      case "$arg" in
        --real-node) REAL_NODE=1 ;;
        *) die "up: unknown argument '$arg' (known: --real-node)" ;;
      esac
    done
    with_lock cmd_up
    ;;
  down) with_lock cmd_down ;;
  status) cmd_status ;;
  kubeconfig) cmd_kubeconfig ;;
  import-image) cmd_import_image "${@:2}" ;;
  audit-log) echo "$KWOK_WORKDIR/clusters/$CLUSTER/logs/audit.log" ;;
  socket) cmd_socket ;;
  enter) cmd_enter "${@:2}" ;;
  node-down) with_lock cmd_node_down ;;
  restart-apiserver) with_lock cmd_restart_apiserver "${@:2}" ;;
  *)
    sed -n '2,31p' "$0" >&2
    exit 2
    ;;
esac
