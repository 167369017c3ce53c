# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target operator        -t raytrain/operator:0.1.0 .
#   docker build --target trainer-runtime -t raytrain/trainer-runtime:0.1.0 .
# Without a Docker daemon, e2e/images/build.sh builds both with buildah on a base image made
# from Debian packages (PYTHON_IMAGE=localhost/raytrain-base:...) and a local wheelhouse.
#
# Base: the official python:3.11 slim image (Debian bookworm), pinned by its full tag. We could
# not resolve registry digests where this file was written; pin by digest in your own build
# (`docker buildx imagetools inspect python:3.11.14-slim-bookworm`) for reproducible images.
# Either base works: python:slim has Python in /usr/local; Debian's python3 lives in /usr and
# refuses `pip install` outside a venv unless PIP_BREAK_SYSTEM_PACKAGES=1. On both, pip as root
# installs into /usr/local, which is on the PATH of KubeRay's login shells.
# Why not rayproject/ray for the runtime: it brings its own Ray (and Python) version, which would
# have to match the `runtime` extra exactly; one Python and one resolver run keep the operator,
# the runtime and Ray in step. GPUs still work: PyPI's torch wheels carry the CUDA runtime as
# nvidia-* wheels, and the NVIDIA container toolkit on the node supplies the driver.
#
# Each image is one stage on top of the shared python-base: the dependency layer of the final
# image is the layer the next build reuses, so the multi-GB runtime dependencies exist once in
# the image store (a copy from a builder stage would store them twice). pip runs without a cache
# and there is no compiler, so a builder stage would save nothing.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ------------------------------------------------------------------------------- python-base
FROM ${PYTHON_IMAGE} AS python-base
# PIP_BREAK_SYSTEM_PACKAGES: see the header (python:slim ignores it); kept in the images so
# images built FROM ours can `pip install` on either base.
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /opt/raytrain
# The dependency layers depend on these files only, so a change to the source rebuilds nothing
# but the small project layer. The images install two of the project's distributions: the
# shared contract (contract/pyproject.toml) and the operator with the runtime (pyproject.toml);
# the SDK and CLI (sdk/) are for users' machines and neither image imports them. The
# requirements are the two files' dependencies without the project's own distributions, which
# are not on PyPI: they are installed from the source below.
COPY constraints.txt pyproject.toml ./
COPY contract/pyproject.toml contract/
RUN python -c "import re, tomllib; \
ps = [tomllib.load(open(f, 'rb'))['project'] for f in ('contract/pyproject.toml', 'pyproject.toml')]; \
ours = {p['name'] for p in ps}; \
pypi = lambda reqs: [r for r in reqs if re.match(r'[A-Za-z0-9._-]+', r).group(0) not in ours]; \
open('requirements-core.txt', 'w').write('\n'.join(r for p in ps for r in pypi(p['dependencies'])) + '\n'); \
open('requirements-runtime.txt', 'w').write('\n'.join(pypi(ps[1]['optional-dependencies']['runtime'])) + '\n')"
# Every `pip install` below:
# - takes its files from a wheelhouse when the build mounts one at /wheels
#   (`buildah bud -v ~/.cache/raytrain/wheels:/wheels:ro`; e2e/images/build.sh fills it from
#   constraints.txt) and then never reaches the index; without one it downloads from PyPI;
# - gets the pins through PIP_CONSTRAINT (not `-c`) so they also reach the isolated environment
#   pip builds the project in. Set per RUN, not ENV: a user's `pip install` in an image built
#   FROM ours is not bound to our pins.

# --------------------------------------------------------------------------------- operator
# The light install: kopf, kubernetes, pydantic, prometheus-client. No torch, no Ray.
FROM python-base AS operator
RUN if [ -n "$(ls /wheels 2>/dev/null)" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels; fi \
 && PIP_CONSTRAINT=/opt/raytrain/constraints.txt pip install -r requirements-core.txt
# The allow-list in .dockerignore decides what the source is; it stays behind in this layer
# (a few MB), removed from the file system below.
COPY . /tmp/src
RUN if [ -n "$(ls /wheels 2>/dev/null)" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels; fi \
 && PIP_CONSTRAINT=/opt/raytrain/constraints.txt pip install --no-deps /tmp/src/contract /tmp/src \
 && pip check && rm -rf /tmp/src
# A fixed numeric user so `runAsNonRoot` can verify it; the chart runs as the same uid.
RUN groupadd --gid 10001 raytrain && useradd --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin raytrain
WORKDIR /
USER 10001:10001
# Metrics (/metrics) and liveness (/healthz).
EXPOSE 8080 8081
# kopf handles SIGTERM itself, so Python can be PID 1 here.
ENTRYPOINT ["python", "-m", "raytrain_operator"]

# -------------------------------------------------------------------------- trainer runtime
FROM python-base AS trainer-runtime
# KubeRay's injected probes and its job submitter run `wget` and `bash` inside Ray containers;
# tini is the PID 1 that forwards SIGTERM (a Python PID 1 without a handler ignores it). The
# Debian-packages base already has both; on python:slim they come from apt, unpinned on
# purpose to take the distribution's security updates at each build.
# hadolint ignore=DL3008
RUN if ! command -v wget >/dev/null || ! command -v tini >/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends wget tini \
      && rm -rf /var/lib/apt/lists/*; \
    fi
# torch from PyPI is the CUDA build (several GB). For CPU-only clusters, pass
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# to install the CPU wheel of torch first (same version: constraints.txt pins it); the runtime
# extra then finds it already satisfied.
ARG TORCH_INDEX_URL=""
RUN if [ -n "$(ls /wheels 2>/dev/null)" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels; fi \
 && export PIP_CONSTRAINT=/opt/raytrain/constraints.txt \
 && if [ -n "$TORCH_INDEX_URL" ]; then pip install --index-url "$TORCH_INDEX_URL" torch; fi \
 && pip install -r requirements-core.txt -r requirements-runtime.txt
RUN groupadd --gid 1000 ray && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash ray
# Into /usr/local (not a venv): KubeRay starts Ray through a login shell, which resets PATH to
# the system default, and /usr/local/bin is on it.
COPY . /tmp/src
RUN if [ -n "$(ls /wheels 2>/dev/null)" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels; fi \
 && PIP_CONSTRAINT=/opt/raytrain/constraints.txt pip install --no-deps /tmp/src/contract /tmp/src \
 && pip check && rm -rf /tmp/src
WORKDIR /app
# The examples ship in the image so examples/*.yaml run as they are
# (entrypoint examples.digits.train:train_loop_per_worker).
COPY --chown=1000:1000 examples/ /app/examples/
# Ray's usage statistics are off: training clusters often have no route out, and a job's
# metadata stays in the cluster unless its owner turns this back on.
ENV PYTHONPATH=/app RAY_USAGE_STATS_ENABLED=0
USER 1000:1000
# tini as PID 1 forwards SIGTERM to the default command. KubeRay replaces the container's
# command (`ray start` through bash) in Ray pods, so there the pod spec decides what PID 1 is;
# /usr/bin/tini is there for it.
ENTRYPOINT ["/usr/bin/tini", "--"]
# The RayJob entrypoint the operator sets.
CMD ["python", "-m", "trainer_runtime"]

# ----------------------------------------------------------------- trainer runtime + frameworks
# The runtime with Hugging Face Transformers, Accelerate and Lightning for
# examples/hf-transformers.yaml and examples/lightning-digits.yaml (and loops of your own that
# use them). e2e/images/build.sh builds it as the third image; with Docker:
#   docker build --target trainer-runtime-frameworks -t raytrain/trainer-runtime-frameworks:0.1.0 .
# The project's pins still hold, so torch, numpy and Ray stay those of the runtime image. As
# above, a wheelhouse mounted at /wheels (holding these packages' wheels) replaces the index.
FROM trainer-runtime AS trainer-runtime-frameworks
USER root
COPY examples/requirements-frameworks.txt /opt/raytrain/
RUN if [ -n "$(ls /wheels 2>/dev/null)" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels; fi \
 && PIP_CONSTRAINT=/opt/raytrain/constraints.txt \
    pip install -r /opt/raytrain/requirements-frameworks.txt \
 && pip check
USER 1000:1000
