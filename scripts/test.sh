#!/usr/bin/env bash
# The tests of `make test`, in two pytest runs side by side, each in a network namespace of its
# own (e2e/netns/run.sh):
#
#   cluster  tests/demo, then tests/integration: `make demo` as the README runs it (its own
#            cluster and real node, started and stopped), then the local control plane, the real
#            node and what runs on it. One after the other: one real node per machine. Most of
#            its time is spent waiting for pods, so the CPU has room for the other run.
#   local    tests/unit, tests/contract, tests/images and tests/runtime: no cluster; the runtime
#            tests start a local Ray and MinIO of their own, on the loopback of their namespace.
#
# The cluster run prints as it goes; the local run's output is kept in a file and printed after
# the cluster run ends. The exit status is the cluster run's if it failed, else the local run's.
#
#   scripts/test.sh MARKERS [PYTEST_ARGS...]
#
# With PYTEST_ARGS (make test PYTEST_ARGS=tests/unit) there is one run of what they name.
# RAYTRAIN_TEST_SERIAL=1 runs the two groups one after the other.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
  echo "usage: $0 MARKERS [PYTEST_ARGS...]" >&2
  exit 2
fi
markers=$1
shift
py=${PYTHON:-python}
netns=(bash e2e/netns/run.sh)

if [ $# -gt 0 ]; then
  exec "${netns[@]}" "$py" -m pytest --durations=40 -m "$markers" "$@"
fi

demo_tests=(tests/demo)
cluster=(tests/integration)
local_tests=(tests/unit tests/contract tests/images tests/runtime)

# A new directory of tests must join one of the runs, or it would not run at all.
for dir in tests/*/; do
  dir=${dir%/}
  case " ${demo_tests[*]} ${cluster[*]} ${local_tests[*]} " in
    *" $dir "*) ;;
    *)
      if compgen -G "$dir/test_*.py" >/dev/null; then
        echo "scripts/test.sh: $dir holds tests but is in neither run: add it to one" >&2
        exit 2
      fi
      ;;
  esac
done

# The cluster lane: the demo's tests in a pytest run of their own, before tests/integration's
# (whose session starts its own real node). Exit 5 (the markers selected none of the demo's
# tests) is no failure. The exit status is the first failure's.
cluster_lane() {
  local rc
  # An interrupt ends the lane once the run it reaches has stopped (its teardown done).
  trap 'exit 130' INT
  trap 'exit 143' TERM
  "${netns[@]}" "$py" -m pytest --durations=10 -m "$markers" "${demo_tests[@]}"
  rc=$?
  [ "$rc" -eq 5 ] && rc=0
  echo "== the demo tests (${demo_tests[*]}) ended, exit $rc; next: ${cluster[*]}"
  "${netns[@]}" "$py" -m pytest --durations=40 -m "$markers" "${cluster[@]}" || return $?
  return "$rc"
}

if [ "${RAYTRAIN_TEST_SERIAL:-0}" = 1 ]; then
  "${netns[@]}" "$py" -m pytest --durations=40 -m "$markers" "${local_tests[@]}"
  local_rc=$?
  cluster_lane
  cluster_rc=$?
  [ "$cluster_rc" -ne 0 ] && exit "$cluster_rc"
  exit "$local_rc"
fi

log=$(mktemp "${TMPDIR:-/tmp}/raytrain-local-tests.XXXXXX")
started=$(date +%s)
# Each run in a process group of its own, so that an interrupt stops both whole.
set -m
# -p no:cacheprovider: two runs must not write one .pytest_cache at once.
"${netns[@]}" "$py" -m pytest -p no:cacheprovider --durations=20 -m "$markers" \
  "${local_tests[@]}" >"$log" 2>&1 &
local_pid=$!
echo "== the local tests (${local_tests[*]}) run beside the cluster tests; their output: $log"
cluster_lane &
cluster_pid=$!
# SIGINT, as a terminal sends it: pytest then runs its fixtures' teardown (the cluster stops).
stop() {
  kill -INT -- "-$local_pid" "-$cluster_pid" 2>/dev/null
  wait
  echo "== interrupted; the local tests' output:"
  cat "$log"
  rm -f "$log"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM

wait "$cluster_pid"
cluster_rc=$?
echo "== the cluster tests (${demo_tests[*]} ${cluster[*]}) ended after $(($(date +%s) - started)) s, exit $cluster_rc"
wait "$local_pid"
local_rc=$?
echo "== the local tests (${local_tests[*]}), exit $local_rc:"
cat "$log"
rm -f "$log"
if [ "$cluster_rc" -ne 0 ]; then
  echo "== the cluster tests failed (exit $cluster_rc): their output is above the local tests'" >&2
  exit "$cluster_rc"
fi
exit "$local_rc"
