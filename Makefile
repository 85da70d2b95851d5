# The two commands a newcomer types: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Two stamps: the demo needs only the product (`.[full]`); the tests add the dev stack (pyspark, moto, ...).
STAMP   = $(VENV)/.installed-full
DEVSTAMP = $(VENV)/.installed-dev

.PHONY: demo test lint bench fmt clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "installing gpuaudit[full] into $(VENV) (first run only)"
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[full]'
	touch $(STAMP)

$(DEVSTAMP): $(STAMP)
	@echo "installing the test stack (gpuaudit[dev]) into $(VENV) (first run only)"
	$(BIN)/pip install --quiet -e '.[full,dev]'
	touch $(DEVSTAMP)

demo: $(STAMP)
	$(BIN)/gpuaudit demo

test: $(DEVSTAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -n 2 -q

lint: $(DEVSTAMP)
	$(BIN)/ruff check src tests benchmarks

fmt: $(DEVSTAMP)
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(DEVSTAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) gpuaudit-data gpuaudit-report build dist
