# The README's commands. Each creates .venv on a fresh machine and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
DEMO_ARGS ?=

.PHONY: test typecheck test-js demo bench install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[aggregator,dev]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[aggregator,dev,bench]'
	touch $(BENCH_STAMP)

install: $(STAMP)

# `make test` runs the JS client's tests too (SKIP_JS=1 leaves them out, as for a second run with
# other PYTEST_ARGS). They need the aggregator from .venv (the end-to-end tests start `ldp-telemetry
# serve`) and the dev tools pinned in js/package-lock.json (npm ci; CI has Node 20).
test: typecheck
	$(PY) -m pytest $(PYTEST_ARGS)
	test -n "$(SKIP_JS)" || $(MAKE) test-js

# mypy, configured in pyproject.toml ([tool.mypy]). It cannot follow the editable install's import
# hook to ldp_telemetry.*, so it reads the folders through links named as they install.
TYPED := $(VENV)/typecheck/ldp_telemetry
typecheck: $(STAMP)
	mkdir -p $(TYPED)
	for p in shared client aggregator tools relay; do ln -sfn $(CURDIR)/$$p $(TYPED)/$$p; done
	$(VENV)/bin/mypy

test-js: $(STAMP)
	cd js && npm ci --no-audit --no-fund && npm test

demo: $(STAMP)
	$(VENV)/bin/ldp-telemetry demo $(DEMO_ARGS)

# Figures beside their targets, and bench-results/bench.json. BENCH_ARGS=--quick for a smoke run.
bench: $(BENCH_STAMP)
	$(PY) -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache js/node_modules js/dist
