"""The operator's memory before it holds any TrainJob: what importing it costs.

Runs each arm in a fresh interpreter, interleaved, and prints the peak RSS (ru_maxrss) after
the entry point's imports and the handlers' registration:

- `shipped`: `python -m raytrain_operator` as it runs (the `kubernetes` package blocked before
  kopf is imported; raytrain_operator.k8s on the standard library's HTTP client);
- `with the kubernetes client`: the same after `import kubernetes.client` (what kopf loads on
  its own when the package is importable, and what k8s.py used before).

    python benchmarks/operator_memory.py [--runs 5]

The figure is the process's own peak, unaffected by the machine's load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = """
import json, resource, runpy, sys
if {client}:
    import kubernetes.client
sys.argv = ["raytrain_operator", "--help"]
try:
    runpy.run_module("raytrain_operator", run_name="__main__")
except SystemExit:
    pass
import raytrain_operator.handlers
loaded = any(m.split(".")[0] == "kubernetes" and mod for m, mod in sys.modules.items())
print(json.dumps({{"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "kubernetes_loaded": loaded}}))
"""


def measure(client: bool) -> dict[str, float]:
    # With the client imported first, the entry point's block (a setdefault) leaves it in
    # place, and kopf finds it as it would with no block at all.
    code = PROBE.format(client=client)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    arms = {"shipped": False, "with the kubernetes client": True}
    samples: dict[str, list[float]] = {name: [] for name in arms}
    loaded: dict[str, bool] = {}
    for _ in range(args.runs):
        for name, client in arms.items():
            result = measure(client)
            samples[name].append(result["rss_mib"])
            loaded[name] = bool(result["kubernetes_loaded"])
    print(f"# operator memory at start, {args.runs} runs per arm (peak RSS, MiB)")
    for name, values in samples.items():
        print(
            f"{name}: median {statistics.median(values):.1f} MiB "
            f"(min {min(values):.1f}, max {max(values):.1f}); kubernetes loaded: {loaded[name]}"
        )
    ratio = statistics.median(samples["shipped"]) / statistics.median(
        samples["with the kubernetes client"]
    )
    print(f"shipped / with the client: {ratio:.2f}")


if __name__ == "__main__":
    main()
