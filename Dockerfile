# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target operator        -t raytrain/operator:0.1.0 .
#   docker build --target trainer-runtime -t raytrain/trainer-runtime:0.1.0 .
#
# Base: the official python:3.11 slim image (Debian bookworm), pinned by its full tag. We could
# not resolve registry digests where this file was written; pin by digest in your own build
# (`docker buildx imagetools inspect python:3.11.14-slim-bookworm`) for reproducible images.
# Why not rayproject/ray for the runtime: it brings its own Ray (and Python) version, which would
# have to match the `runtime` extra exactly; one Python and one resolver run keep the operator,
# the runtime and Ray in step. GPUs still work: PyPI's torch wheels carry the CUDA runtime as
# nvidia-* wheels, and the NVIDIA container toolkit on the node supplies the driver.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ------------------------------------------------------------------------- shared builder base
FROM ${PYTHON_IMAGE} AS build-base
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY trainer_runtime/ trainer_runtime/

# --------------------------------------------------------------------------------- operator
# The light install: kopf, kubernetes, pydantic, prometheus-client, boto3. No torch, no Ray.
FROM build-base AS operator-build
RUN pip install .

FROM ${PYTHON_IMAGE} AS operator
# Everything pip installed lives under /usr/local; the final stage copies it and no compiler,
# pip cache or source tree comes along.
COPY --from=operator-build /usr/local /usr/local
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# A fixed numeric user so `runAsNonRoot` can verify it; the chart runs as the same uid.
RUN groupadd --gid 10001 raytrain && useradd --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin raytrain
USER 10001:10001
# Metrics (/metrics) and liveness (/healthz).
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "raytrain_operator"]

# -------------------------------------------------------------------------- trainer runtime
FROM build-base AS runtime-build
# torch from PyPI is the CUDA build (several GB). For CPU-only clusters or CI, pass
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# to install the CPU wheel of torch first; the runtime extra then finds it already satisfied.
ARG TORCH_INDEX_URL=""
# Versions come from pyproject.toml's ranges (one place to pin them), not from this file.
# hadolint ignore=DL3013
RUN if [ -n "$TORCH_INDEX_URL" ]; then pip install --index-url "$TORCH_INDEX_URL" torch; fi \
 && pip install '.[runtime]'

FROM ${PYTHON_IMAGE} AS trainer-runtime
# KubeRay's injected probes and its job submitter run `wget` and `bash` inside Ray containers.
# Unpinned on purpose: take the distribution's security updates at each build.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends wget \
 && rm -rf /var/lib/apt/lists/*
# Into /usr/local (not a venv): KubeRay starts Ray through a login shell, which resets PATH to
# the system default, and /usr/local/bin is on it.
COPY --from=runtime-build /usr/local /usr/local
RUN groupadd --gid 1000 ray && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash ray
WORKDIR /app
# The examples ship in the image so examples/*.yaml run as they are
# (entrypoint examples.digits.train:train_loop_per_worker).
COPY --chown=1000:1000 examples/ /app/examples/
ENV PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
# The RayJob entrypoint the operator sets; KubeRay replaces it with `ray start` in cluster pods.
CMD ["python", "-m", "trainer_runtime"]
