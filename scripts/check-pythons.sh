#!/usr/bin/env bash
# The second half of `make check`: the tests a bare `pytest` runs (pyproject.toml), on each other
# Python this machine has among those named, each in a virtualenv of its own under .make/ with
# the light install of `make check` (the contract, the SDK and CLI, the operator with the dev
# extra: no Ray, no torch). The install is redone only when a pyproject.toml, constraints.txt or
# the interpreter changes, as the Makefile's stamps do.
#
#   PYTHON=python scripts/check-pythons.sh python3.10 python3.12 ...
#
# A name that does not run here (not on PATH, or a pyenv shim of a version pyenv does not
# select: PYENV_VERSION=3.11.7:3.10.13:3.12.1:3.13.0 selects several) is skipped with a line
# that says so, and so is the version $PYTHON itself is (`make check` has just run it).
set -uo pipefail
cd "$(dirname "$0")/.."

py=${PYTHON:-python}
version='import sys; print("%d.%d" % sys.version_info[:2])'
checked=$("$py" -c "$version") || exit 2
failed=()
for candidate in "$@"; do
  if ! minor=$("$candidate" -c "$version" 2>/dev/null); then
    echo "== make check: $candidate does not run here (not on PATH, or a pyenv shim of a version"\
      "pyenv has not selected: PYENV_VERSION=3.11.7:3.10.13:... selects several), skipped (CI runs it)"
    continue
  fi
  if [ "$minor" = "$checked" ]; then
    echo "== make check: Python $minor is $py's, checked above"
    continue
  fi
  env_dir=.make/check-python$minor
  # constraints.txt is resolved for CPython 3.11 (the Makefile uses it there only).
  constraints=()
  if [ "$minor" = 3.11 ] && [ -f constraints.txt ]; then
    constraints=(-c constraints.txt)
  fi
  key=$({ cat contract/pyproject.toml sdk/pyproject.toml pyproject.toml "${constraints[@]:1}"
    "$candidate" -c 'import sys; print(sys.prefix, sys.version)'; } | sha256sum | cut -c1-16)
  if [ ! -e "$env_dir/stamp-$key" ]; then
    echo "== make check: a light install for Python $minor in $env_dir (once)"
    rm -rf "$env_dir"
    "$candidate" -m venv "$env_dir" &&
      "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        -e ./contract -e ./sdk -e '.[dev]' "${constraints[@]}" &&
      touch "$env_dir/stamp-$key" || {
      echo "== make check: the install for Python $minor failed" >&2
      failed+=("$minor (install)")
      continue
    }
  fi
  echo "== make check: the tests on Python $minor ($env_dir)"
  # -p no:cacheprovider: the run of $PYTHON keeps the one .pytest_cache.
  "$env_dir/bin/python" -m pytest -q -p no:cacheprovider || failed+=("$minor")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== make check: failed on Python ${failed[*]}" >&2
  exit 1
fi
