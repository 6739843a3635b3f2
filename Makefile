# Two commands on a fresh machine: `make demo` and `make test`. While working: `make check` (lint and
# the fast tests, under a minute on an idle 2-core machine; tests over ~3 s alone carry
# @pytest.mark.slow and run in `make test`). `make check` spreads the tests over the machine's cores
# (pytest-xdist, a file per worker at a time) and prints the 15 slowest: a new entry over ~3 s there
# wants @pytest.mark.slow or a cheaper fixture (tests/README.md). Bytecode caching stays on for it
# (PYTHONDONTWRITEBYTECODE emptied): rewriting and compiling every test module anew costs seconds a run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo serve-demo test check install lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m canary.demo

serve-demo: $(STAMP)
	$(BIN)/python -m canary.serve.demo

lint: $(STAMP)
	$(BIN)/ruff check canary evidence_store migrations tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy canary evidence_store

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q

CHECK_WORKERS ?= auto

check: $(STAMP) lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -m "not slow" -n $(CHECK_WORKERS) --dist loadfile --durations=15

bench: $(STAMP)
	$(BIN)/canary bench --out bench-out

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache bench-out
