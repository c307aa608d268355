# The README's commands. Each creates .venv on a fresh machine and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
DEMO_ARGS ?=

.PHONY: test demo bench install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[aggregator,dev]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[aggregator,dev,bench]'
	touch $(BENCH_STAMP)

install: $(STAMP)

# The JS client's tests need the aggregator from .venv (its end-to-end test starts `ldp-telemetry serve`)
# and its dev tools from js/package-lock.json (npm ci; CI has Node 20).
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)
	cd js && npm ci --no-audit --no-fund && npm test

demo: $(STAMP)
	$(VENV)/bin/ldp-telemetry demo $(DEMO_ARGS)

# Figures beside their targets, and bench-results/bench.json. BENCH_ARGS=--quick for a smoke run.
bench: $(BENCH_STAMP)
	$(PY) -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache js/node_modules js/dist
