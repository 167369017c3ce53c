"""The operator's process never loads the kubernetes client's generated models.

`python -m raytrain_operator` blocks the `kubernetes` package before kopf is imported
(kopf would import it only to recognise its model objects); raytrain_operator.k8s talks to
the API server over the standard library. This checks the whole import graph of the entry
point and the handlers, in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, runpy, sys
sys.argv = ["raytrain_operator", "--help"]
try:
    runpy.run_module("raytrain_operator", run_name="__main__")
except SystemExit:
    pass
import raytrain_operator.handlers
loaded = sorted(m for m, mod in sys.modules.items() if m.split(".")[0] == "kubernetes" and mod)
print(json.dumps(loaded))
"""


def test_the_operator_process_imports_no_kubernetes_client() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
