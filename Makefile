# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint typecheck unit bench faults soak screenshots clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/lockstep demo

lint: install
	$(BIN)/ruff check src tests lab
	$(BIN)/ruff format --check src tests lab

typecheck: install
	$(BIN)/mypy

# Four workers on two cores: most tests wait on subprocesses and databases, not the CPU (45 min with
# -n 4 against 81 min in one process, measured on a 2-core CI machine). worksteal keeps the long tests
# from piling up at the end. PYTEST_ARGS= runs in one process. The 40 slowest tests are listed at the
# end, so a CI log says where its time went.
PYTEST_ARGS ?= -n 4 --dist worksteal
unit: install
	$(BIN)/pytest --durations=40 --durations-min=5 $(PYTEST_ARGS)

test: lint typecheck unit

# Benchmarks side by side with DBOS and Absurd (a bench-only extra); writes reports/bench.md and reports/bench.json.
# BENCH_ARGS=--quick for a short run.
bench: install
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python -m lab.bench $(BENCH_ARGS)

# The fault-injection matrix on SQLite and PostgreSQL; writes reports/faults.md and reports/faults.json.
# FAULTS_ARGS=--quick (CI size), --soak (longer, larger), --seed N, --only SCENARIO.
faults: install
	$(BIN)/python -m lab.faults $(FAULTS_ARGS)

# A mixed-fault soak on PostgreSQL (not in CI); writes reports/soak.md and reports/soak.json.
# SOAK_ARGS=--duration 2h, --seed N, --rate 8, --fault-interval 10s.
soak: install
	$(BIN)/python -m lab.soak $(SOAK_ARGS)

# The pictures of docs/ui.md, from a fresh `lockstep serve --example` (needs Chromium and Graphviz).
screenshots: install
	$(BIN)/python -m lab.screenshots docs/img

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis
