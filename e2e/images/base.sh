#!/usr/bin/env bash
# Build the local base image (Debian bookworm packages, no registry) that the Dockerfile's
# PYTHON_IMAGE argument points at when images are built on a machine without Docker.
#
#   e2e/images/base.sh            prints the base image's name on its last line
#
# mmdebstrap writes a root filesystem tarball, cached under
# ${RAYTRAIN_CACHE:-~/.cache/raytrain}/images/ and keyed on the package list and mirror lines
# below (a cold run takes minutes, a warm one seconds). The image in buildah's store is named
# after the same key, so a store wiped by CI is refilled from the tarball in seconds.
# The tarball is not refreshed for Debian's later security updates while the key stays the
# same: delete it (or change the list) to take them.
set -euo pipefail

CACHE="${RAYTRAIN_CACHE:-$HOME/.cache/raytrain}/images"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

# python3-pip: users extend the runtime image with `pip install`; python-is-python3: the
# Dockerfile and KubeRay call `python`; wget: KubeRay's probes and submitter; tini: a PID 1
# that forwards SIGTERM to Python; procps/iproute2: `ps`, `ip` for debugging Ray pods and
# Ray's own node-IP detection; ca-certificates: HTTPS to S3 endpoints.
PACKAGES=(python3 python3-pip python-is-python3 ca-certificates wget bash procps iproute2 tini)
SOURCES=(
  "deb $MIRROR bookworm main"
  "deb $MIRROR bookworm-updates main"
  "deb $SECURITY_MIRROR bookworm-security main"
)

log() { printf '[images %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

for tool in mmdebstrap buildah; do
  if ! command -v "$tool" >/dev/null; then
    echo "e2e/images/base.sh: '$tool' not found; install it with" \
      "'apt-get install --no-install-recommends mmdebstrap buildah'" >&2
    exit 1
  fi
done

key="$(printf '%s\n' "${PACKAGES[@]}" "${SOURCES[@]}" | sha256sum | cut -c1-12)"
rootfs="$CACHE/rootfs-bookworm-$key.tar"
image="localhost/raytrain-base:bookworm-$key"
mkdir -p "$CACHE"

if [ ! -f "$rootfs" ]; then
  log "rootfs: mmdebstrap bookworm (${PACKAGES[*]})"
  # mmdebstrap picks the output format from the file name: keep the .tar suffix.
  tmp="$CACHE/.tmp-$$-$(basename "$rootfs")"
  trap 'rm -rf "$tmp"' EXIT
  # minbase + path-exclude: no docs, man pages or locales in the image (copyright files stay).
  nice -n 10 mmdebstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --aptopt='APT::Install-Recommends "false"' \
    bookworm "$tmp" "${SOURCES[@]}" >&2
  mv "$tmp" "$rootfs"
  trap - EXIT
fi

if ! buildah inspect --type image "$image" >/dev/null 2>&1; then
  log "base image: $image from $(basename "$rootfs")"
  c="$(buildah from scratch)"
  trap 'buildah rm "$c" >/dev/null 2>&1 || true' EXIT
  buildah add "$c" "$rootfs" / >/dev/null
  buildah config --env LANG=C.UTF-8 --cmd '["python3"]' \
    --label "dev.raytrain.base-key=$key" "$c"
  buildah commit --quiet "$c" "$image" >/dev/null
  buildah rm "$c" >/dev/null
  trap - EXIT
fi
echo "$image"
