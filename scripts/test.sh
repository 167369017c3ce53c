#!/usr/bin/env bash
# The tests of `make test`, in two lanes side by side, each pytest run in a network namespace of
# its own (e2e/netns/run.sh):
#
#   cluster  tests/demo, then the real-node tests of tests/integration (marker `realnode`):
#            `make demo` and `make up` as the README runs them (their own cluster and real node,
#            started and stopped), then the local control plane with a real node and what runs
#            on it. One after the other: one real node per machine.
#   local    tests/unit, tests/contract, tests/images and tests/runtime (no cluster; the runtime
#            tests start a local Ray and MinIO of their own, on the loopback of their namespace),
#            then the rest of tests/integration on a control plane of its own with KWOK nodes
#            and no real node (cluster name raytrain-kwok, so its state is apart from the
#            real-node one's).
#
# The cluster lane prints as it goes; the local lane's output is kept in a file and printed after
# the cluster lane ends. The exit status is the cluster lane's if it failed, else the local's.
#
#   scripts/test.sh MARKERS [PYTEST_ARGS...]
#
# With PYTEST_ARGS (make test PYTEST_ARGS=tests/unit) there is one run of what they name.
# RAYTRAIN_TEST_SERIAL=1 runs the two lanes one after the other.
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

# Exit 5 (the markers selected no test of a run) is no failure.
ok5() {
  local rc=$1
  [ "$rc" -eq 5 ] && rc=0
  return "$rc"
}

# The cluster lane: the demo's tests in a pytest run of their own, before the real-node tests of
# tests/integration (whose session starts its own real node). The exit status is the first
# failure's.
cluster_lane() {
  local rc rc2
  # An interrupt ends the lane once the run it reaches has stopped (its teardown done).
  trap 'exit 130' INT
  trap 'exit 143' TERM
  "${netns[@]}" "$py" -m pytest --durations=10 -m "$markers" "${demo_tests[@]}"
  ok5 $?
  rc=$?
  echo "== the demo tests (${demo_tests[*]}) ended after $(($(date +%s) - started)) s, exit $rc; next: the real-node tests of ${cluster[*]}"
  "${netns[@]}" "$py" -m pytest -p no:cacheprovider --durations=40 -m "($markers) and realnode" "${cluster[@]}"
  ok5 $?
  rc2=$?
  [ "$rc" -ne 0 ] && return "$rc"
  return "$rc2"
}

# The local lane: the tests that need no cluster, then those of tests/integration that need no
# real node, on a control plane of their own.
local_lane() {
  local rc rc2
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # tests/unit/test_template_fuzz.py: 10,000 job and template pairs here, 500 in a bare pytest.
  RAYTRAIN_FUZZ_PAIRS="${RAYTRAIN_FUZZ_PAIRS:-10000}" \
    "${netns[@]}" "$py" -m pytest -p no:cacheprovider --durations=20 -m "$markers" "${local_tests[@]}"
  ok5 $?
  rc=$?
  echo "== the local tests (${local_tests[*]}) ended after $(($(date +%s) - started)) s, exit $rc; next: the tests of ${cluster[*]} that need no real node"
  RAYTRAIN_CLUSTER=raytrain-kwok "${netns[@]}" "$py" -m pytest -p no:cacheprovider --durations=20 \
    -m "($markers) and not realnode" "${cluster[@]}"
  ok5 $?
  rc2=$?
  [ "$rc" -ne 0 ] && return "$rc"
  return "$rc2"
}

started=$(date +%s)
if [ "${RAYTRAIN_TEST_SERIAL:-0}" = 1 ]; then
  local_lane
  local_rc=$?
  cluster_lane
  cluster_rc=$?
  [ "$cluster_rc" -ne 0 ] && exit "$cluster_rc"
  exit "$local_rc"
fi

log=$(mktemp "${TMPDIR:-/tmp}/raytrain-local-tests.XXXXXX")
# Each run in a process group of its own, so that an interrupt stops both whole.
set -m
# -p no:cacheprovider: two runs must not write one .pytest_cache at once.
local_lane >"$log" 2>&1 &
local_pid=$!
echo "== the local lane (${local_tests[*]}, then the tests of ${cluster[*]} that need no real node) runs beside the cluster lane; its output: $log"
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
echo "== the cluster lane (${demo_tests[*]}, the real-node tests of ${cluster[*]}) ended after $(($(date +%s) - started)) s, exit $cluster_rc"
wait "$local_pid"
local_rc=$?
echo "== the local lane ended after $(($(date +%s) - started)) s in all, exit $local_rc:"
cat "$log"
rm -f "$log"
if [ "$cluster_rc" -ne 0 ]; then
  echo "== the cluster lane failed (exit $cluster_rc): its output is above the local lane's" >&2
  exit "$cluster_rc"
fi
exit "$local_rc"
