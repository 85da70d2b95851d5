# The two commands a newcomer types: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Two stamps: the demo needs only the product (`.[full]`); the tests add the dev stack (pyspark, moto, ...).
STAMP   = $(VENV)/.installed-full
DEVSTAMP = $(VENV)/.installed-dev

.PHONY: demo test test-under-load lint bench fmt clean

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

# Three workers on two cores: many tests wait on a child process, a real Prometheus or Chromium, and a third
# worker runs while they wait; worksteal keeps every worker busy to the end (tests/conftest.py starts the long
# modules first).
test: $(DEVSTAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -n 3 --dist worksteal -q --durations=15

# The files whose tests run real processes, threads and clocks, with both cores kept busy by two spinning
# processes for the whole run: they must pass on a loaded machine (they wait on events and counts, never on
# speed). The trap ends the spinners however pytest ends.
LOAD_TESTS = tests/test_agent_*.py tests/test_collection.py tests/test_push.py tests/test_selftest*.py \
	tests/test_store_concurrency.py tests/test_import_concurrency.py tests/test_metrics_prometheus.py
test-under-load: $(DEVSTAMP)
	@$(BIN)/python -c 'while True: pass' & s1=$$!; \
	$(BIN)/python -c 'while True: pass' & s2=$$!; \
	trap 'kill $$s1 $$s2 2>/dev/null' EXIT INT TERM; \
	echo "two spinners (pids $$s1 $$s2) keep both cores busy"; \
	$(BIN)/pytest -n 2 -q --durations=15 $(LOAD_TESTS)

lint: $(DEVSTAMP)
	$(BIN)/ruff check src tests benchmarks

fmt: $(DEVSTAMP)
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(DEVSTAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) gpuaudit-data gpuaudit-report build dist
