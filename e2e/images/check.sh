#!/usr/bin/env bash
# Run an image built from our Dockerfile and check that it does its job, without a daemon
# and without network: a container from the image in buildah's store runs the commands a
# pod would, as the image's own user.
#
#   e2e/images/check.sh operator IMAGE
#   e2e/images/check.sh trainer-runtime IMAGE
#   e2e/images/check.sh trainer-runtime-frameworks IMAGE
#
# IMAGE: a name in buildah's store, or docker-archive:PATH / oci-archive:PATH (loaded into the
# store first; layers already there are reused).
#
# Exit status 0 when every check passed; otherwise the failing check's output and status.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 operator|trainer-runtime|trainer-runtime-frameworks IMAGE" >&2
  exit 2
fi
target="$1" image="$2"

case "$image" in
  docker-archive:* | oci-archive:*) image="$(buildah pull --quiet "$image")" ;;
esac

config() { buildah inspect --type image --format "$1" "$image"; }

case "$target" in
  operator)
    want_uid=10001
    want_entrypoint='[python -m raytrain_operator]'
    # --help parses the arguments after importing kopf, the settings and the metrics; the
    # handlers module pulls in the Kubernetes client and every builder.
    script='set -e
      python -m raytrain_operator --help >/dev/null
      python -c "import raytrain_operator.handlers"
      echo "operator: python -m raytrain_operator --help ok, handlers import"'
    ;;
  trainer-runtime)
    want_uid=1000
    want_entrypoint='[/usr/bin/tini --]'
    script='set -e
      python -c "import torch, ray, trainer_runtime, examples.digits.train; print(\"torch\", torch.__version__, \"ray\", ray.__version__)"
      ray --version
      wget --version >/dev/null
      tini --version
      echo "trainer-runtime: imports, ray, wget and tini ok"'
    ;;
  trainer-runtime-frameworks)
    want_uid=1000
    want_entrypoint='[/usr/bin/tini --]'
    # The two examples' modules import their frameworks at the top; torch and Ray must still
    # be the runtime image's pins.
    script='set -e
      python -c "import transformers, accelerate, lightning, torch, ray, examples.hf_transformers.train, examples.lightning_digits.train; print(\"transformers\", transformers.__version__, \"lightning\", lightning.__version__, \"torch\", torch.__version__, \"ray\", ray.__version__)"
      python -m pip check
      echo "trainer-runtime-frameworks: framework imports and pip check ok"'
    ;;
  *)
    echo "check.sh: unknown target '$target' (operator, trainer-runtime or" \
      "trainer-runtime-frameworks)" >&2
    exit 2
    ;;
esac

fail() { echo "check.sh: $image: $*" >&2; exit 1; }

entrypoint="$(config '{{.OCIv1.Config.Entrypoint}}')"
[ "$entrypoint" = "$want_entrypoint" ] || fail "entrypoint is $entrypoint, want $want_entrypoint"
user="$(config '{{.OCIv1.Config.User}}')"
[ "$user" = "$want_uid:$want_uid" ] || fail "USER is '$user', want $want_uid:$want_uid"

c="$(buildah from --pull-never --quiet "$image")"
trap 'buildah rm "$c" >/dev/null' EXIT
# No network: an image that needs the network to start would fail in the test cluster too.
# chroot isolation cannot drop the network (buildah refuses), runc's OCI isolation can. Inside
# a namespace of e2e/netns/run.sh (RAYTRAIN_NETNS), `ip netns exec` has remounted /sys without
# the cgroup hierarchies runc needs, but the only network there is loopback: chroot isolation
# with the namespace's own network is just as cut off.
if [ -n "${RAYTRAIN_NETNS:-}" ]; then
  isolation=(--isolation=chroot --network=host)
else
  isolation=(--isolation=oci --network=none)
fi
buildah run "${isolation[@]}" "$c" -- sh -c "
  uid=\$(id -u); [ \"\$uid\" = $want_uid ] || { echo \"runs as uid \$uid, want $want_uid\" >&2; exit 1; }
  $script"
