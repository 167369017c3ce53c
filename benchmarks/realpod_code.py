"""A code change on real pods: from `raytrain submit --code DIR` to the job's first report.

Runs tests/integration/test_realpods_code.py's first test with ``RAYTRAIN_CODE_RECORD`` set:
it submits a folder that is in no image, waits for the first report, edits one line and submits
again with ``--replace``. Prints the seconds from each submission to its first report and their
ratio (the resubmission against the first submission, in the same run). No image is built or
imported for the change. Needs what ``make test`` needs (``make prereqs``) and runs inside a
network namespace of its own (e2e/netns/run.sh) unless it already runs in one.

    python benchmarks/realpod_code.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST = (
    "tests/integration/test_realpods_code.py::"
    "test_a_folder_in_no_image_trains_on_real_pods_and_an_edited_line_runs_when_resubmitted"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of the test")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "code.jsonl"
        env = {**os.environ, "RAYTRAIN_CODE_RECORD": str(record)}
        pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", TEST]
        if not os.environ.get("RAYTRAIN_NETNS"):
            pytest = ["bash", "e2e/netns/run.sh", *pytest]
        started = time.monotonic()
        failed = sum(
            subprocess.run(pytest, cwd=REPO, env=env, check=False).returncode != 0
            for _ in range(args.repeat)
        )
        rows = (
            [json.loads(line) for line in record.read_text().splitlines()]
            if record.exists()
            else []
        )
    print()
    print(f"# code snapshot on real pods: {len(rows)} run(s), {failed} failed; "
          f"{(time.monotonic() - started) / 60:.1f} min; {os.cpu_count()} CPUs")  # fmt: skip
    if not rows:
        return 1
    first = statistics.median(r["submit_to_first_report_s"] for r in rows)
    again = statistics.median(r["resubmit_to_first_report_s"] for r in rows)
    print("| submission | s to first report (median) |")
    print("|---|---|")
    print(f"| first, `raytrain submit job.yaml --code DIR` | {first:.1f} |")
    print(f"| one line edited, `... --code DIR --replace` | {again:.1f} |")
    print(f"resubmission / first submission: {again / first:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
