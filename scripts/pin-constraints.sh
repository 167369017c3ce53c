#!/usr/bin/env bash
# Regenerate constraints.txt: the exact version of every package the images and the development
# install use, from one fresh resolution of the project's distributions (pyproject.toml's core
# dependencies, its `runtime` and `dev` extras and the build backend, with contract/ and sdk/,
# which are not on PyPI and come from their directories) against PyPI. The images install the
# core and `runtime` part; `make install` installs everything with the same file, so the tests
# run the versions the images ship. Run it after any change to the dependencies of a
# pyproject.toml:
#
#   bash scripts/pin-constraints.sh            (PYTHON=python3.11 to pick the interpreter)
#   bash scripts/pin-constraints.sh --keep     (the current pins stay where they still resolve:
#                                               only what a new dependency needs is added)
#
# The resolver runs with --dry-run --ignore-installed, so nothing on this machine changes and
# what is installed here does not steer the result. It must run on CPython 3.11 on Linux
# x86_64, the interpreter and platform of both image bases, because the resolution follows
# environment markers (nvidia-* wheels come with torch on Linux only).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
OUT="$ROOT/constraints.txt"

platform="$("$PYTHON" -c 'import platform, sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}-{platform.system()}-{platform.machine()}")')"
if [ "$platform" != "3.11-Linux-x86_64" ]; then
  echo "pin-constraints.sh: PYTHON=$PYTHON is $platform; the images run CPython 3.11 on" \
    "Linux x86_64. Set PYTHON to a python3.11 on such a machine." >&2
  exit 1
fi

report="$(mktemp)"
keep="$(mktemp)"
trap 'rm -f "$report" "$keep"' EXIT
keep_args=()
if [ "${1:-}" = "--keep" ]; then
  # The old pins as constraints: a package they name keeps its version, so adding one
  # dependency does not move the others (and the images rebuild from the same wheels).
  grep -v '^#' "$OUT" >"$keep"
  keep_args=(-c "$keep")
elif [ -n "${1:-}" ]; then
  echo "pin-constraints.sh: unknown argument '$1' (only --keep)" >&2
  exit 2
fi
# Build requirements come from [build-system].requires: pip builds the project inside the
# image from the same pinned set, without reaching the index when a wheelhouse is mounted.
mapfile -t build_reqs < <("$PYTHON" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
PY
)
# PIP_FIND_LINKS and friends from this machine's pip config must not add or hide candidates.
env -u PIP_FIND_LINKS -u PIP_CONSTRAINT -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL \
  "$PYTHON" -m pip install --quiet --dry-run --ignore-installed --report "$report" \
  "${keep_args[@]}" "$ROOT/contract" "$ROOT/sdk" "$ROOT[runtime,dev]" "${build_reqs[@]}"

deps_hash="$("$PYTHON" "$ROOT/e2e/images/deps_hash.py" "$ROOT/pyproject.toml")"
"$PYTHON" - "$report" "$OUT" "$deps_hash" <<'PY'
import json, re, sys
report_path, out_path, deps_hash = sys.argv[1], sys.argv[2], sys.argv[3]
with open(report_path) as f:
    report = json.load(f)
pins = {}
for item in report["install"]:
    url = item["download_info"]["url"]
    if url.startswith("file:"):
        continue  # the project itself, built from the source tree
    meta = item["metadata"]
    pins[re.sub(r"[-_.]+", "-", meta["name"]).lower()] = meta["version"]
header = f"""\
# Exact versions of every package the operator and trainer-runtime images and `make install`
# use: the core dependencies, the `runtime` and `dev` extras and the build backend, resolved
# together for CPython 3.11 on Linux x86_64 (so the tests run what the images ship).
# Generated from pyproject.toml; do not edit by hand. Regenerate with
#   bash scripts/pin-constraints.sh
# after changing pyproject.toml's dependencies (e2e/images/build.sh then rebuilds the images;
# it refuses to build while the fingerprint below differs from pyproject.toml's).
# pyproject-deps: {deps_hash}
"""
with open(out_path, "w") as f:
    f.write(header)
    f.writelines(f"{name}=={pins[name]}\n" for name in sorted(pins))
print(f"{out_path}: {len(pins)} pins", file=sys.stderr)
PY
