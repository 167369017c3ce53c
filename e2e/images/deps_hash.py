"""Print a fingerprint of what pyproject.toml and the project's other distributions beside it
(contract/ and sdk/, pinned in the same constraints.txt) ask pip to install.

constraints.txt records it when it is generated (scripts/pin-constraints.sh) and
e2e/images/build.sh compares: pins resolved for other dependency lists would leave the
wheelhouse without some package, and the image build would fail deep inside pip.

    python3 e2e/images/deps_hash.py pyproject.toml
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import tomllib

#: The project's other distributions, each a directory with a pyproject.toml beside the root's.
DISTRIBUTIONS = ("contract", "sdk")


def _wanted(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        data = tomllib.load(f)
    return {
        "dependencies": data["project"].get("dependencies", []),
        "optional-dependencies": data["project"].get("optional-dependencies", {}),
        "build-system": data.get("build-system", {}).get("requires", []),
    }


def deps_hash(pyproject_path: str) -> str:
    root = Path(pyproject_path)
    wanted = _wanted(root)
    for name in DISTRIBUTIONS:
        wanted[name] = _wanted(root.parent / name / "pyproject.toml")
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


if __name__ == "__main__":
    print(deps_hash(sys.argv[1]))
