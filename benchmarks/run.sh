#!/usr/bin/env bash
# `make bench`: every benchmark, one after another (they share two cores; never run them in
# parallel). Each prints its result lines; benchmarks/RESULTS.md records them with the command.
set -euo pipefail
cd "$(dirname "$0")/.."
for bench in benchmarks/runtime_vs_torchrun.py benchmarks/checkpoint_vs_boto3.py \
             benchmarks/operator_memory.py benchmarks/operator_scale.py benchmarks/recovery.py; do
  if [ -f "$bench" ]; then
    echo "== $bench"
    python "$bench"
  fi
done
# The real node lives only inside a network namespace of its own (e2e/netns/run.sh).
echo "== benchmarks/netpol_admission.py"
bash e2e/netns/run.sh python benchmarks/netpol_admission.py
echo "== benchmarks/realpod_code.py"
python benchmarks/realpod_code.py
# The head's memory is measured on the cluster a user starts (make up), stopped after.
echo "== benchmarks/head_memory.py (on make up's cluster)"
make up >/dev/null
trap 'make down >/dev/null' EXIT
python benchmarks/head_memory.py --runs 2
