# raytrain-operator: the commands a contributor and CI run.
PYTHON ?= python
PKGS := operator/raytrain_operator trainer_runtime
CRD := crds/trainjobs.raytrain.dev.yaml

.PHONY: help install demo test unit lint crds crds-check cluster-up cluster-down bench

help:
	@echo "make install       install the project with the runtime and dev extras"
	@echo "make demo          run the example TrainJob (see README)"
	@echo "make test          lint + the whole test suite"
	@echo "make lint          ruff + mypy --strict + import contracts"
	@echo "make crds          regenerate crds/ and the chart's CRDs from the API models"
	@echo "make cluster-up    start the local control plane (builds it once, cached)"
	@echo "make cluster-down  stop it"
	@echo "make bench         benchmarks (long; not part of make test)"

install:
	$(PYTHON) -m pip install -e '.[dev,runtime]'

demo:
	bash scripts/demo.sh

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy $(PKGS)
	lint-imports

# pytest exits 5 when it collects no test, so a suite that runs nothing fails here too.
test: lint
	$(PYTHON) -m pytest

unit:
	$(PYTHON) -m pytest tests/unit

crds:
	$(PYTHON) -m raytrain_operator.api.crd --out $(CRD)
	@if [ -d charts/raytrain-operator/templates ]; then \
	  $(PYTHON) -m raytrain_operator.api.crd --chart --out charts/raytrain-operator/templates/crds.yaml; fi

cluster-up:
	bash e2e/controlplane/cluster.sh up

cluster-down:
	bash e2e/controlplane/cluster.sh down

bench:
	bash benchmarks/run.sh
