"""Print a fingerprint of what pyproject.toml asks pip to install.

constraints.txt records it when it is generated (scripts/pin-constraints.sh) and
e2e/images/build.sh compares: pins resolved for other dependency lists would leave the
wheelhouse without some package, and the image build would fail deep inside pip.

    python3 e2e/images/deps_hash.py pyproject.toml
"""

from __future__ import annotations

import hashlib
import json
import sys

import tomllib


def deps_hash(pyproject_path: str) -> str:
    with open(pyproject_path, "rb") as f:
        data = tomllib.load(f)
    wanted = {
        "dependencies": data["project"].get("dependencies", []),
        "optional-dependencies": data["project"].get("optional-dependencies", {}),
        "build-system": data.get("build-system", {}).get("requires", []),
    }
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


if __name__ == "__main__":
    print(deps_hash(sys.argv[1]))
