# seedbench: `make reproduce` runs the workflow and writes reports/index.html; `make test` tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
CONFIG ?= workflows/config/quick.yaml
CORES ?= all
SNAKEFLAGS ?=
PYTEST_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.seedbench-installed
# Console scripts of the venv (seedbench, snakemake) for the workflow's shell rules.
RUN := PATH="$(abspath $(BIN)):$$PATH"

.PHONY: help venv reproduce report rerun-noisy gpu-check gpu-wheels cuda-wheels bytetransformer fastertransformer test test-cluster slurm lint lock clean browser docs

help:
	@echo "make reproduce [CONFIG=workflows/config/paper.yaml]  run the workflow -> reports/index.html"
	@echo "make report                                         reports/index.html from the records of"
	@echo "                                                    every machine under results/ (runs nothing)"
	@echo "make rerun-noisy                                    re-run the points timed on a busy machine"
	@echo "make test                                           run the test suite"
	@echo "make test-cluster                                   only the cluster tests (local SLURM, two nodes)"
	@echo "make lint                                           ruff + snakemake --lint (fails on any finding)"
	@echo "make lock                                           rewrite requirements.lock from the venv"
	@echo "make docs                                           docs/cli.md from the parsers"

# The pinned stack: exact versions from requirements.lock, the project itself editable.
EXAMPLE_PLUGIN := examples/seedbench-example-plugin

LOGGER_PLUGIN := workflows/logger

$(STAMP): pyproject.toml requirements.lock $(EXAMPLE_PLUGIN)/pyproject.toml $(LOGGER_PLUGIN)/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check 'pip==25.3'
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -c requirements.lock -e '.[all]'
	# the scale model's peer (suite/scale/peer.py), without its dependencies: its metadata pins
	# transformers<5 and huggingface-hub<0.15, used only for hub look-ups that the peer never makes
	$(BIN)/python -m pip install -q --no-deps -c requirements.lock llm-analysis
	# the example plugin, installed as a user would install theirs (the tests run it)
	$(BIN)/python -m pip install -q --no-deps -e $(EXAMPLE_PLUGIN)
	# the progress lines of `make reproduce` (a Snakemake logger plugin; the local profile uses it)
	$(BIN)/python -m pip install -q --no-deps -e $(LOGGER_PLUGIN)
	touch $@

venv: $(STAMP)

# The command reference, generated from the parsers (a test fails when it drifts).
docs: $(STAMP)
	$(BIN)/python -m suite.commands.reference docs/cli.md

# A lock left by a killed run (no Snakemake process alive here) is dropped first, with a message:
# workflows/unlock_stale.py.
SNAKEMAKE = $(BIN)/snakemake --profile workflows/profiles/local --configfile $(CONFIG)
UNLOCK_STALE = $(BIN)/python workflows/unlock_stale.py $(SNAKEMAKE)

reproduce: $(STAMP)
	$(RUN) $(UNLOCK_STALE)
	$(RUN) $(SNAKEMAKE) --cores $(CORES) $(SNAKEFLAGS)

# Tables, figures and the report from the records on disk of every machine folder under results/
# and results/published/: no model runs (report_only in the config schema).
report: $(STAMP)
	$(RUN) $(UNLOCK_STALE)
	$(RUN) $(SNAKEMAKE) --config report_only=True --cores $(CORES) $(SNAKEFLAGS)

# The points of this config's machine folder timed on a busy or noisy machine (their records say
# so; the report lists them), run again: Snakemake forced on exactly those records
# (workflows/rerun_noisy.py).
rerun-noisy: $(STAMP)
	$(RUN) $(UNLOCK_STALE)
	$(RUN) $(BIN)/python workflows/rerun_noisy.py $(CONFIG) $(SNAKEMAKE) --cores $(CORES) $(SNAKEFLAGS)

# The GPU half (suite/gpu/pack.py) in one short lease of a bare GPU machine with its own torch,
# triton and transformers and no package registry. Here, first: `make gpu-wheels` (the suite's
# other needs, Snakemake and DeepSpeed included, as cp312 wheels into the git-ignored .whl/,
# which travels with `carry`: suite/gpu/wheels.py). There:
#   make gpu-check GPU_OUT=$$OUT    (installs the wheels the machine lacks, and the project and
#                                    its Snakemake logger without dependencies)
# DRY=1 rehearses every step on CPU at tiny sizes with this venv (make test runs it).
# STEPS="serving gemm_shapes" runs only those (the ones a cut-off run skipped, in a second call).
# BUDGET=<seconds> sets the pack's budget (480 s; no step or point starts past it).
# GPU_WORK=gpu-check-work keeps the records there: a second call on the same warm machine with
# the same GPU_WORK keeps the first's records, tuning and peak, and runs what it cut off.
GPU_OUT ?= gpu-check-out
GPU_STEPS = $(if $(STEPS),--steps $(STEPS)) $(if $(BUDGET),--budget-s $(BUDGET)) \
	$(if $(GPU_WORK),--work $(GPU_WORK))
gpu-wheels: $(STAMP)
	$(BIN)/python -m suite.gpu.wheels download .whl

# The paper's competitors without a pip package, built here for a GPU lease with no GPU: CUDA 13
# from pip wheels in .cuda/ (cuda-wheels), for sm_90, through `seedbench build-external` (the
# programs of paper.yaml) into build/external/<name>/ (carry its seedbench-build.json, and
# bytetransformer's bt_bert). BT_SOURCE / FT_SOURCE: checkouts with their cutlass submodule;
# BT_COMMIT / FT_COMMIT: their commits where a checkout is an archive, for the records.
# FasterTransformer does not build with CUDA 13: its failure is recorded (--record-failure), and
# its points are unavailable with cmake's error (examples/external-fastertransformer/README.md).
BT_SOURCE ?= ../ByteTransformer
BT_COMMIT ?=
FT_SOURCE ?= ../FasterTransformer
FT_COMMIT ?=
CUDA_WHEELS := nvidia-cuda-nvcc==13.5.37 nvidia-cuda-crt==13.5.37 nvidia-nvvm==13.5.37 \
	nvidia-cuda-runtime==13.5.37 nvidia-cublas==13.10.0.20 nvidia-cuda-cccl==13.3.5.0.6
CUDA_HOME_WHEELS = $(CURDIR)/.cuda/lib/python3.11/site-packages/nvidia/cu13
WITH_CUDA_WHEELS = CUDACXX=$(CUDA_HOME_WHEELS)/bin/nvcc CUDAToolkit_ROOT=$(CUDA_HOME_WHEELS) \
	CMAKE_LIBRARY_PATH=$(CURDIR)/.cuda/link
BUILD_EXTERNAL = $(BIN)/seedbench build-external --config workflows/config/paper.yaml
cuda-wheels:
	test -x .cuda/bin/python || $(PYTHON) -m venv .cuda
	.cuda/bin/python -m pip install -q --disable-pip-version-check $(CUDA_WHEELS)
	# the wheels ship lib*.so.13 only: the unversioned names the linker looks for, beside them
	mkdir -p .cuda/link && for lib in cudart cublas cublasLt; do \
		ln -sf $(CUDA_HOME_WHEELS)/lib/lib$$lib.so.13 .cuda/link/lib$$lib.so; done
bytetransformer: $(STAMP) cuda-wheels
	BYTETRANSFORMER_SOURCE=$(abspath $(BT_SOURCE)) BYTETRANSFORMER_COMMIT=$(BT_COMMIT) \
		$(WITH_CUDA_WHEELS) $(BUILD_EXTERNAL) bytetransformer
fastertransformer: $(STAMP) cuda-wheels
	FASTERTRANSFORMER_SOURCE=$(abspath $(FT_SOURCE)) FASTERTRANSFORMER_COMMIT=$(FT_COMMIT) \
		$(WITH_CUDA_WHEELS) $(BUILD_EXTERNAL) fastertransformer --record-failure

ifdef DRY
gpu-check: $(STAMP)
	$(BIN)/python -m suite.cli gpu-check --dry --out $(GPU_OUT) $(GPU_STEPS)
else
gpu-check:
	python3 -m suite.gpu.wheels install .whl /tmp/site
	# a carried build may arrive without its mode bits
	chmod +x build/external/bytetransformer/bt_bert 2>/dev/null || true
	python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e $(LOGGER_PLUGIN)
	PYTHONPATH=/tmp/site python3 -m suite.cli gpu-check --out $(GPU_OUT) $(GPU_STEPS)
endif

# The report's browser test (tests/test_report_browser.py) opens the report in Debian's chromium
# through chromedriver: installed here when absent and the user is root; otherwise it skips.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		  chromium chromium-driver >/dev/null; } \
		|| echo "apt-get could not install chromium: the report's browser test will skip"; \
	else echo "no chromium/chromedriver and not root: the report's browser test will skip"; fi

# The cluster tests (tests/test_cluster.py) bring up a local SLURM (workflows/cluster/
# local_slurm.py: Debian's slurm-wlm, slurmdbd, munge, MariaDB), installed here when absent and
# the user is root; otherwise those tests skip with the reason.
slurm:
	@if [ "$$(id -u)" = 0 ]; then $(PYTHON) workflows/cluster/local_slurm.py install \
		|| echo "local SLURM could not be installed: the SLURM tests will skip"; \
	else echo "not root: the SLURM tests skip unless SLURM is installed"; fi

# The tests on TEST_WORKERS processes (pytest-xdist), then the `serial` ones alone: they judge
# the machine's load while they time. Exit status 5 (PYTEST_ARGS selected none there) is no error.
TEST_WORKERS ?= 2
PYTEST_OK = s=$$?; [ $$s = 0 ] || [ $$s = 5 ] || exit $$s
test: $(STAMP) browser slurm
	$(RUN) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not serial" --durations=15 \
		$(PYTEST_ARGS); $(PYTEST_OK)
	$(RUN) $(BIN)/python -m pytest -m serial $(PYTEST_ARGS); $(PYTEST_OK)

test-cluster: $(STAMP) slurm
	$(RUN) $(BIN)/python -m pytest -m cluster -s $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(RUN) $(BIN)/python workflows/lint.py --configfile $(CONFIG)
	$(RUN) $(BIN)/python workflows/lint.py --configfile $(CONFIG) --config report_only=True

lock: $(STAMP)
	{ echo "# Exact versions this project is tested with (pip freeze of 'make venv', Python 3.11, CPU)."; \
	  echo "# make installs with: pip install -c requirements.lock -e '.[all]'. Regenerate: make lock"; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v -E '^(seedbench.*|pip)[= @]' \
	  | sed 's/^torch==\([0-9.]*\)+cpu/torch==\1/'; } > requirements.lock

# This checkout's machine folders and everything make report rebuilt beside published records;
# results/paper/ and the published records stay.
clean:
	rm -rf .snakemake reports
	find results -mindepth 1 -maxdepth 1 -type d ! -name paper ! -name published -exec rm -rf {} +
	git clean -fdqX results/published
