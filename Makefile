# The two commands a newcomer types: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: demo test lint bench fmt clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[full,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuaudit demo

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

fmt: $(STAMP)
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) gpuaudit-data gpuaudit-report build dist
