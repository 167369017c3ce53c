#!/usr/bin/env bash
# Build the operator, trainer-runtime and trainer-runtime-frameworks images from the Dockerfile
# without a Docker daemon (buildah), check each one by running it, and save them as
# docker-archive tarballs that containerd imports (e2e/images/import.sh).
#
#   e2e/images/build.sh [--check] [--only TARGET[,TARGET...]]
#
# Run it outside any network namespace: it needs the Debian mirror (base image, first run) and
# PyPI (wheelhouse, when constraints.txt changes). Steps, each cached under
# ${RAYTRAIN_CACHE:-~/.cache/raytrain}:
#   1. base image from Debian packages (e2e/images/base.sh), keyed on its package list;
#   2. wheelhouse wheels/: one wheel per pin of constraints.txt, downloaded once (torch's CUDA
#      build is several GB), and the packages examples/requirements-frameworks.txt adds on top
#      of them (resolved against constraints.txt), mounted read-only into the build so pip
#      never reaches the index;
#   3. images/<target>-<key>.tar, where <key> hashes every build input (the files .dockerignore
#      lets in, the Dockerfile, the base image, these scripts). A warm run only hashes.
# --check reports whether the archives are current (exit 1 if a build is due) and builds
# nothing. --only limits the build (or the check) to the given targets of operator,
# trainer-runtime and trainer-runtime-frameworks (default: all three); `make demo` and `make up`
# build only the first two, without the framework packages. The archives' names do not depend
# on it. The last three lines of output are machine-readable (an archive of a target left out
# may be absent):
#   OPERATOR_ARCHIVE=<path> OPERATOR_IMAGE=<ref>
#   RUNTIME_ARCHIVE=<path> RUNTIME_IMAGE=<ref>
#   FRAMEWORKS_ARCHIVE=<path> FRAMEWORKS_IMAGE=<ref>
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}"
IMAGES="$CACHE/images"
WHEELS="$CACHE/wheels"
PYTHON="${PYTHON:-python3}"

CHECK_ONLY=0
ALL_TARGETS=(operator trainer-runtime trainer-runtime-frameworks)
TARGETS=("${ALL_TARGETS[@]}")
while [ $# -gt 0 ]; do
  case "$1" in
    --check) CHECK_ONLY=1 ;;
    --only | --only=*)
      if [ "$1" = --only ]; then
        [ $# -ge 2 ] || { echo "build.sh: --only needs a list of targets" >&2; exit 2; }
        list="$2"
        shift
      else
        list="${1#--only=}"
      fi
      IFS=, read -r -a TARGETS <<<"$list"
      for t in "${TARGETS[@]}"; do
        case " ${ALL_TARGETS[*]} " in
          *" $t "*) ;;
          *) echo "build.sh: --only: unknown target '$t' (known: ${ALL_TARGETS[*]})" >&2; exit 2 ;;
        esac
      done
      ;;
    -h | --help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (accepted: --check, --only TARGETS)" >&2; exit 2 ;;
  esac
  shift
done
wanted() { case " ${TARGETS[*]} " in *" $1 "*) return 0 ;; esac; return 1; }

log() { printf '[images %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# pip wheel and the scripts' Python run on this machine: the wheelhouse must suit the
# images' interpreter.
platform="$("$PYTHON" -c 'import platform, sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}-{platform.system()}-{platform.machine()}")')"
if [ "$platform" != "3.11-Linux-x86_64" ]; then
  echo "build.sh: PYTHON=$PYTHON is $platform; the wheelhouse needs CPython 3.11 on Linux" \
    "x86_64 (the images' interpreter). Set PYTHON to such a python3.11." >&2
  exit 1
fi

# The tag is the project's version: the chart's appVersion and examples/*.yaml name the images
# raytrain/operator:<version> and raytrain/trainer-runtime:<version>, which containerd stores
# as docker.io/..., so imported images are found without a registry (imagePullPolicy Never or
# IfNotPresent).
version="$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$ROOT/pyproject.toml")"
OPERATOR_IMAGE="docker.io/raytrain/operator:${IMAGE_TAG:-$version}"
RUNTIME_IMAGE="docker.io/raytrain/trainer-runtime:${IMAGE_TAG:-$version}"
FRAMEWORKS_IMAGE="docker.io/raytrain/trainer-runtime-frameworks:${IMAGE_TAG:-$version}"

# Every file that goes into the build context, per the allow-list in .dockerignore.
context_files() {
  local entry
  sed -n 's|^!\(.*\)|\1|p' "$ROOT/.dockerignore" | while read -r entry; do
    entry="${entry%/}"
    [ -e "$ROOT/$entry" ] || continue
    (cd "$ROOT" && find "$entry" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
      ! -path '*.egg-info/*')
  done | LC_ALL=C sort
}

input_key() {
  {
    (cd "$ROOT" && { echo Dockerfile; echo .dockerignore; context_files; } | xargs -d '\n' sha256sum)
    (cd "$HERE" && sha256sum build.sh base.sh check.sh deps_hash.py)
    echo "$OPERATOR_IMAGE $RUNTIME_IMAGE $FRAMEWORKS_IMAGE"
  } | sha256sum | cut -c1-16
}

key="$(input_key)"
operator_tar="$IMAGES/operator-$key.tar"
runtime_tar="$IMAGES/trainer-runtime-$key.tar"
frameworks_tar="$IMAGES/trainer-runtime-frameworks-$key.tar"

print_result() {
  echo "OPERATOR_ARCHIVE=$operator_tar OPERATOR_IMAGE=$OPERATOR_IMAGE"
  echo "RUNTIME_ARCHIVE=$runtime_tar RUNTIME_IMAGE=$RUNTIME_IMAGE"
  echo "FRAMEWORKS_ARCHIVE=$frameworks_tar FRAMEWORKS_IMAGE=$FRAMEWORKS_IMAGE"
}

current() {
  { ! wanted operator || [ -f "$operator_tar" ]; } &&
    { ! wanted trainer-runtime || [ -f "$runtime_tar" ]; } &&
    { ! wanted trainer-runtime-frameworks || [ -f "$frameworks_tar" ]; }
}
if ! current && [ "$CHECK_ONLY" = 1 ]; then
  log "a build is due: no archives of ${TARGETS[*]} for input key $key"
  exit 1
fi
if ! current; then
  # One build at a time (make prereqs and a test may both ask); the second one waits and then
  # finds the archives the first one made.
  mkdir -p "$IMAGES"
  exec 9>"$IMAGES/.build.lock"
  flock 9
fi
if current; then
  log "archives of ${TARGETS[*]} for input key $key are current"
  print_result
  exit 0
fi

# constraints.txt must have been pinned for the dependencies pyproject.toml lists now;
# otherwise some package has no wheel and pip fails deep inside the build.
pinned_for="$(sed -n 's/^# pyproject-deps: //p' "$ROOT/constraints.txt")"
deps_now="$("$PYTHON" "$HERE/deps_hash.py" "$ROOT/pyproject.toml")"
if [ "$pinned_for" != "$deps_now" ]; then
  echo "build.sh: constraints.txt was pinned for other dependencies than pyproject.toml lists" \
    "now (fingerprint '${pinned_for:-none}', pyproject.toml: $deps_now). Run" \
    "'bash scripts/pin-constraints.sh' and commit constraints.txt with pyproject.toml." >&2
  exit 1
fi

# --------------------------------------------------------------------- 1. base image
base="$(bash "$HERE/base.sh" | tail -n 1)"
# base.sh names the image after its own key, and base.sh is hashed into ours.

# --------------------------------------------------------------------- 2. wheelhouse
mkdir -p "$WHEELS" "$IMAGES"
# Only pins without a wheel in the wheelhouse are fetched: a change of one pin downloads one
# wheel, not torch again. Old versions stay until you delete the directory.
missing="$(mktemp)"
trap 'rm -f "$missing"' EXIT
"$PYTHON" - "$ROOT/constraints.txt" "$WHEELS" >"$missing" <<'PY'
import os, re, sys
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
have = set()
for wheel in os.listdir(sys.argv[2]):
    if wheel.endswith(".whl"):
        name, version = wheel.split("-")[:2]
        have.add((canon(name), version))
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        if (canon(name), version) not in have:
            print(line)
PY
if [ -s "$missing" ]; then
  log "wheelhouse: fetching $(wc -l <"$missing") wheels into $WHEELS"
  # --no-deps: constraints.txt is already the whole resolved set.
  env -u PIP_FIND_LINKS -u PIP_CONSTRAINT nice -n 10 "$PYTHON" -m pip wheel --quiet --no-deps \
    --wheel-dir "$WHEELS" -r "$missing" >&2
fi

# The framework packages of the Transformers and Lightning examples are not in constraints.txt
# (pyproject.toml keeps them out, see docs/images.md): resolve them against its pins once per
# version of both files, from metadata only (--dry-run), and fetch the wheels the wheelhouse
# lacks. The build's pip then finds all of them in /wheels.
frameworks_stamp="$WHEELS/.frameworks-$(cat "$ROOT/examples/requirements-frameworks.txt" \
  "$ROOT/constraints.txt" | sha256sum | cut -c1-16)"
if wanted trainer-runtime-frameworks && [ ! -f "$frameworks_stamp" ]; then
  log "wheelhouse: resolving examples/requirements-frameworks.txt against constraints.txt"
  report="$(mktemp)"
  env -u PIP_FIND_LINKS -u PIP_CONSTRAINT "$PYTHON" -m pip install --quiet --dry-run \
    --ignore-installed --report "$report" -r "$ROOT/examples/requirements-frameworks.txt" \
    -c "$ROOT/constraints.txt" >&2
  "$PYTHON" - "$report" "$WHEELS" >"$missing" <<'PY'
import json, os, re, sys
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
have = {
    (canon(w.split("-")[0]), w.split("-")[1]) for w in os.listdir(sys.argv[2]) if w.endswith(".whl")
}
for item in json.load(open(sys.argv[1]))["install"]:
    name, version = canon(item["metadata"]["name"]), item["metadata"]["version"]
    if (name, version) not in have:
        print(f"{name}=={version}")
PY
  rm -f "$report"
  if [ -s "$missing" ]; then
    log "wheelhouse: fetching $(wc -l <"$missing") framework wheels into $WHEELS"
    env -u PIP_FIND_LINKS -u PIP_CONSTRAINT nice -n 10 "$PYTHON" -m pip wheel --quiet --no-deps \
      --wheel-dir "$WHEELS" -r "$missing" >&2
  fi
  touch "$frameworks_stamp"
fi

# --------------------------------------------------------------------- 3. images
# Disk: the runtime's dependency layer is ~6.4 GB, and while buildah commits it, the
# container, a temporary diff and the new layer each hold a copy (~20 GB at the peak; see
# docs/images.md). Hence: stale archives go first, the previous build's layers go as soon as
# the new image has the tag, and buildah's temporary files live in a directory of ours that is
# removed whatever happens (its default, /var/tmp, keeps them when a build is killed).
tmp_root="$CACHE/tmp/images-$$"
mkdir -p "$tmp_root"
trap 'rm -f "$missing"; rm -rf "$tmp_root"' EXIT
export TMPDIR="$tmp_root"
find "$IMAGES" -maxdepth 1 \( -name 'operator-*.tar*' -o -name 'trainer-runtime-*.tar*' \) \
  ! -name "operator-$key.tar" ! -name "trainer-runtime-$key.tar" \
  ! -name "trainer-runtime-frameworks-$key.tar" -delete

# Layers of earlier builds: the untagged images without children that carry base.sh's label
# (every image built on our base inherits it). The cached layers of the current images are
# their ancestors, so they stay.
prune_old_layers() {
  buildah images --quiet --filter dangling=true --filter label=dev.raytrain.base-key |
    xargs -r buildah rmi >/dev/null
}

build_target() { # target image archive
  local target="$1" image="$2" archive="$3"
  log "buildah bud --target $target (base $base)"
  # --network=host: buildah's default network is podman's CNI bridge, which changes host
  # sysctls and iptables. --layers: a source change rebuilds only the small project layer.
  # --force-rm: a failed build leaves no working container (and its GBs) behind.
  nice -n 10 buildah bud --pull=never --isolation=chroot --network=host --layers --force-rm \
    --build-arg "PYTHON_IMAGE=$base" -v "$WHEELS:/wheels:ro" \
    --target "$target" -t "$image" -f "$ROOT/Dockerfile" "$ROOT" >&2
  prune_old_layers
  log "checking $image"
  bash "$HERE/check.sh" "$target" "$image" >&2
  log "saving $image to $archive"
  rm -f "$archive.tmp"
  buildah push --quiet "$image" "docker-archive:$archive.tmp:$image" >&2
  mv "$archive.tmp" "$archive"
}

# An archive already current is not built again (a build of fewer targets came first).
if wanted operator && [ ! -f "$operator_tar" ]; then
  build_target operator "$OPERATOR_IMAGE" "$operator_tar"
fi
if wanted trainer-runtime && [ ! -f "$runtime_tar" ]; then
  build_target trainer-runtime "$RUNTIME_IMAGE" "$runtime_tar"
fi
# On top of the runtime image's layers (buildah's --layers cache): only the framework
# packages' layer is new.
if wanted trainer-runtime-frameworks && [ ! -f "$frameworks_tar" ]; then
  build_target trainer-runtime-frameworks "$FRAMEWORKS_IMAGE" "$frameworks_tar"
fi

log "done: $(for f in "$operator_tar" "$runtime_tar" "$frameworks_tar"; do
  [ -f "$f" ] && printf '%s %s, ' "$(du -h "$f" | cut -f1)" "$(basename "${f%-"$key".tar}")"
done)"
print_result
