# Two commands on a fresh machine: `make demo` and `make test`. While working: `make check` (lint and
# the fast tests, under a minute; tests over ~3 s carry @pytest.mark.slow and run in `make test`).
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

check: $(STAMP) lint
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/canary bench --out bench-out

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache bench-out
