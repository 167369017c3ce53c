# raytrain-operator: the commands a contributor and CI run.
#
# `make demo` and `make test` work on a fresh clone in a fresh virtualenv: both install the
# project first (`install`, skipped while nothing it depends on changed), and `make test` builds
# what the tests need (`prereqs`) before it runs them in a network namespace of their own.
PYTHON ?= python
# Two jobs at once: the prerequisites of `make test` and `make demo` build side by side (see
# prereqs). Each recipe that must run alone is a target's whole recipe, so nothing else changes.
MAKEFLAGS += -j2
PKGS := operator/raytrain_operator sdk/raytrain trainer_runtime raytrain_contract
CRD := crds/trainjobs.raytrain.dev.yaml
TEMPLATE_CRDS := crds/trainjobtemplates.raytrain.dev.yaml
EXTRAS := dev,runtime

# The install is redone only when what it depends on changes: the distributions' pyproject.toml
# files, constraints.txt (exact pins, used when present) and the interpreter it installs into
# (another virtualenv needs its own install). The stamp's name carries a hash of all of them;
# .make/ is gitignored. The distributions, in dependency order: the runtime contract (contract/),
# the SDK and CLI (sdk/), then the operator and the runtime (the root).
DISTS := contract sdk
STAMP_DIR := .make
# The interpreter's prefix and version: "/path/to/venv 3.11.7 (main, ...)".
PYTHON_ID := $(shell $(PYTHON) -c 'import sys; print(sys.prefix, sys.version)')
# constraints.txt pins what the images run, resolved for CPython 3.11 (its header says so): the
# installs use it on 3.11 only. Elsewhere pip resolves pyproject.toml's ranges (kopf 1.45, say,
# needs 3.11 and 1.44 serves 3.10).
CONSTRAINTS := $(if $(filter 3.11.%,$(word 2,$(PYTHON_ID))),$(wildcard constraints.txt))
INSTALL_KEY := $(shell { cat $(DISTS:%=%/pyproject.toml) pyproject.toml $(CONSTRAINTS); \
  echo '$(PYTHON_ID)'; } | sha256sum | cut -c1-16)
INSTALL_STAMP := $(STAMP_DIR)/install-$(INSTALL_KEY)
# The light install of `make check`: the contract, the SDK and CLI and the operator with the dev
# extra; no runtime extra, so no Ray and no torch. Same key and rule as the full install, a stamp
# of its own; where the full install is done, it is not needed.
CHECK_STAMP := $(STAMP_DIR)/check-install-$(INSTALL_KEY)
# The framework packages of the Transformers and Lightning examples: outside pyproject.toml so
# the images' dependency layer (keyed on it) stays the same; their own stamp, same rule.
FRAMEWORKS := examples/requirements-frameworks.txt
FRAMEWORKS_KEY := $(shell { cat $(FRAMEWORKS) pyproject.toml $(CONSTRAINTS); \
  echo '$(PYTHON_ID)'; } | sha256sum | cut -c1-16)
FRAMEWORKS_STAMP := $(STAMP_DIR)/frameworks-$(FRAMEWORKS_KEY)

# The tests run inside a network namespace where nothing reaches the network (see
# e2e/netns/run.sh); PYTEST_ARGS narrows them (make test PYTEST_ARGS=tests/unit).
NETNS := bash e2e/netns/run.sh
PYTEST_ARGS ?=

.PHONY: help check check-install check-lint check-tests check-pythons install prereqs builds-debs builds-go builds-images builds-demo-images builds-minio builds-kueue demo up down shell test test-faults test-frameworks test-long test-pending unit lint crds crds-check cluster-up cluster-down bench

help:
	@echo "make check         the fast loop, before every commit: lint, then the unit and contract"
	@echo "                  tests (no Ray, no torch, no cluster; a light install, once), also on"
	@echo "                  each other Python of CHECK_PYTHONS found here; what CI runs on a pull request"
	@echo "make demo          run the example TrainJob end to end (installs first; see README)"
	@echo "make up            the demo's cluster, left running: the real node, MinIO, the operator"
	@echo "                  (prints how to reach it); make shell opens a shell in it"
	@echo "make down          stop what make up started and restore the host"
	@echo "make test          install, build the test prerequisites, lint, the test suite CI runs"
	@echo "make test-faults   the real-pod fault tests make test leaves out (long: its evictions and drain alone take about 20 min)"
	@echo "make test-frameworks  the Transformers and Lightning examples on real pods"
	@echo "make test-long     the long local-mode Ray runs and real-pod runs make test leaves out"
	@echo "make install       install the project with the runtime and dev extras, and the"
	@echo "                  framework packages of the examples (once)"
	@echo "make prereqs       build what the tests need (control plane, real node, MinIO, Kueue,"
	@echo "                  images; cached; two builds at a time)"
	@echo "make lint          ruff + mypy --strict + import contracts"
	@echo "make crds          regenerate crds/ and the chart's CRDs from the API models"
	@echo "make cluster-up    start the local control plane (builds it once, cached)"
	@echo "make cluster-down  stop it"
	@echo "make bench         benchmarks (long; not part of make test)"

install: $(INSTALL_STAMP) $(FRAMEWORKS_STAMP)

check-install: $(if $(wildcard $(INSTALL_STAMP)),,$(CHECK_STAMP))

$(CHECK_STAMP):
	$(PYTHON) -m pip install $(DISTS:%=-e ./%) -e '.[dev]' $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	@mkdir -p $(STAMP_DIR)
	@rm -f $(STAMP_DIR)/check-install-*
	@touch $@

$(INSTALL_STAMP):
	$(PYTHON) -m pip install $(DISTS:%=-e ./%) -e '.[$(EXTRAS)]' $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	@mkdir -p $(STAMP_DIR)
	@rm -f $(STAMP_DIR)/install-*
	@touch $@

$(FRAMEWORKS_STAMP): $(INSTALL_STAMP)
	$(PYTHON) -m pip install -r $(FRAMEWORKS) $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	@rm -f $(STAMP_DIR)/frameworks-*
	@touch $@

# Everything the tests would otherwise download or build on first use. Each step is cached
# outside the clone (~/.cache/raytrain) and costs seconds once built. Inside the tests'
# network namespace nothing can be downloaded, so whatever a test builds must be built here.
#
# From nothing they take about half an hour. Two at a time (the -j2 above), as a slot frees:
# the control plane's and the real node's Go compiles (builds-go) keep both cores busy; the
# images beside them are downloads (Debian packages, PyPI wheels) and layers written to disk;
# `make test` adds the install and lint. MinIO and Kueue take whichever slot frees first. All
# of them need the Debian packages first (buildah for the images, runc for the node). Helm is
# one of the real node's builds.
prereqs: builds-go builds-images builds-minio builds-kueue

builds-debs:
	bash e2e/realnode/build.sh debs

builds-go: builds-debs
	bash e2e/controlplane/build.sh
	bash e2e/realnode/build.sh

builds-images: builds-debs
	bash e2e/images/build.sh

builds-minio: builds-debs
	bash e2e/minio/build.sh >/dev/null

builds-kueue: builds-debs
	bash e2e/kueue/build.sh >/dev/null

# The demo and `make up` build only what they use (cached): the control plane and the real node
# (helm with it), MinIO, and the operator and trainer-runtime images; not Kueue, nor the
# frameworks image.
DEMO_BUILDS := builds-go builds-demo-images builds-minio

builds-demo-images: builds-debs
	bash e2e/images/build.sh --only operator,trainer-runtime

# On real pods (scripts/demo.sh): up, digits to Succeeded, down, whatever fails.
demo: install $(DEMO_BUILDS)
	PYTHON='$(PYTHON)' bash scripts/demo.sh

# The demo's world, left running (scripts/demo_realnode.py up): the control plane, the real
# node, the two images imported, MinIO as minio.raytrain-system:9000, the chart's operator. It
# lives in a network namespace: `make shell` (scripts/shell.sh) opens a shell there, KUBECONFIG
# set. `make down` stops it all and restores the host.
up: install $(DEMO_BUILDS)
	$(NETNS) $(PYTHON) scripts/demo_realnode.py up

down:
	$(PYTHON) scripts/demo_realnode.py down

shell:
	PYTHON='$(PYTHON)' bash scripts/shell.sh

# import-linter runs through the interpreter: it has no `python -m` entry, and its console
# script is not on PATH when the virtualenv is not activated (make PYTHON=.venv/bin/python).
# mypy checks as Python 3.10 (pyproject.toml), the oldest that requires-python allows.
LINT = \
	$(PYTHON) -m ruff check . && \
	$(PYTHON) -m ruff format --check . && \
	$(PYTHON) -m mypy $(PKGS) && \
	$(PYTHON) -c 'from importlinter.cli import lint_imports_command; lint_imports_command()'

lint: install
	$(LINT)

# `make check`: lint, then the tests a bare `pytest` runs (pyproject.toml: tests/unit and
# tests/contract, not the `runtime` ones), on the light install or the full one; then the same
# tests on each other Python of CHECK_PYTHONS (the versions CI's matrix runs,
# .github/workflows/check.yml) that this machine has, each in a virtualenv of its own under
# .make/ with the same light install (once). A Python it does not find is skipped with a line
# that says so; `make check CHECK_PYTHONS=` checks $(PYTHON) alone. Nothing here needs the
# network namespace: no test of the set reaches a cluster.
CHECK_PYTHONS ?= python3.10 python3.11 python3.12 python3.13

check: check-pythons

check-lint: check-install
	$(LINT)

check-tests: check-lint
	$(PYTHON) -m pytest --durations=10

check-pythons: check-tests
	@PYTHON='$(PYTHON)' bash scripts/check-pythons.sh $(CHECK_PYTHONS)

# pytest exits 5 when it collects no test, so a suite that runs nothing fails here too.
# --durations: the log of every run names its slowest tests, CI's included. TEST_MARKERS
# leaves out what only `make test-faults`, `make test-frameworks`, `make test-long`,
# `make test-pending` and a benchmark run (tests/integration/
# conftest.py and pyproject.toml name the markers).
TEST_MARKERS ?= not realpods_pending and not realpods_manifest_window and not realpods_damaged_checkpoints and not realpods_preemption and not realpods_second_cluster and not realpods_bench and not realpods_sigkill and not realpods_mid_epoch and not realpods_frameworks and not long
# scripts/test.sh runs tests/integration and the tests that need no cluster side by side.
test: install prereqs lint
	PYTHON='$(PYTHON)' bash scripts/test.sh '$(TEST_MARKERS)' $(PYTEST_ARGS)

# The real-pod fault tests alone (docs/real-node.md): `make test` runs the deleted worker pod
# with the rest; the deleted head pod, the suspend and resume and the node that takes the pods
# away (marker realpods_second_cluster), the SIGKILLed training worker (realpods_sigkill) and
# the evictions and the drain of test_realpods_preemption.py (marker realpods_preemption) and
# the resumable example's mid-epoch resume after a deleted worker pod (realpods_mid_epoch) and
# the hung rank's restart (test_realpods_hang.py, realpods_second_cluster) run only here.
test-faults: install prereqs
	$(NETNS) $(PYTHON) -m pytest -m realpods_faults tests/integration/test_realpods.py tests/integration/test_realpods_preemption.py tests/integration/test_realpods_triage.py tests/integration/test_realpods_checkpoints.py tests/integration/test_realpods_hang.py

# The Transformers and Lightning examples as written, in the frameworks image, on real pods.
# `make test` checks the image (tests/images) and leaves these out to stay within CI's time;
# `make test-long` trains both in local mode (tests/runtime/test_frameworks.py).
test-frameworks: install prereqs
	$(NETNS) $(PYTHON) -m pytest -m realpods_frameworks tests/integration/test_realpods.py

# The long runs `make test` leaves out to stay within CI's time (marker `long`): local-mode Ray
# runs of a minute or more each (Tune, Ray Data, the frameworks, mid-epoch and preemption-notice
# resumes, a killed worker; make test keeps `raytrain run --local` and its resume), the code
# folder on real pods through the shared test cluster (make test runs the same path through
# `make up`'s test), and on real pods Kueue's workload slices, a DRA device in each worker and a
# host-network worker (make test checks slices and device claims on the KWOK nodes, and the
# node's DRA driver and NetworkPolicy in test_realnode.py).
test-long: install prereqs
	$(NETNS) $(PYTHON) -m pytest -m long tests/runtime tests/integration/test_realpods.py tests/integration/test_realpods_code.py

# The real-pod tests that do not pass yet (docs/real-node.md); not part of `make test`.
# When none carries the marker, pytest's "no tests collected" (exit 5) is a pass.
test-pending: install prereqs
	$(NETNS) $(PYTHON) -m pytest -m realpods_pending tests/integration || [ $$? -eq 5 ]

unit: check-install
	$(PYTHON) -m pytest tests/unit

crds:
	$(PYTHON) -m raytrain_operator.api.crd --out $(CRD) --templates-out $(TEMPLATE_CRDS)
	@if [ -d charts/raytrain-operator/templates ]; then \
	  $(PYTHON) -m raytrain_operator.api.crd --chart --out charts/raytrain-operator/templates/crds.yaml; fi

cluster-up:
	bash e2e/controlplane/cluster.sh up

cluster-down:
	bash e2e/controlplane/cluster.sh down

bench:
	bash benchmarks/run.sh
	$(PYTHON) benchmarks/checkpoint_manifest.py
