#!/usr/bin/env bash
# Run a command inside a network namespace of its own, so that every address the local
# cluster creates (node IP, pod and Service ranges) exists only there and never in the host's
# namespace. Only loopback is up inside: nothing in the namespace reaches the network, so
# downloads and builds must happen before (make prereqs).
#
#   e2e/netns/run.sh CMD [ARG...]
#
# The namespace is named raytrain-<pid>, created here and deleted when CMD ends (with every
# address, bridge and iptables rule in it). Already inside a namespace created by this script
# (RAYTRAIN_NETNS set), CMD runs as it is. Exit status: CMD's.
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 CMD [ARG...]" >&2
  exit 2
fi
if [ -n "${RAYTRAIN_NETNS:-}" ]; then
  exec "$@"
fi
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "e2e/netns/run.sh: creating a network namespace needs root and iproute2 ('ip');" \
    "run as root, or apt-get install iproute2" >&2
  exit 1
fi

ns="raytrain-$$"
ip netns add "$ns"
cleanup() { ip netns delete "$ns" 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ip -n "$ns" link set lo up
# Not exec: the trap must run to delete the namespace when CMD ends.
set +e
RAYTRAIN_NETNS="$ns" ip netns exec "$ns" "$@"
rc=$?
set -e
exit "$rc"
