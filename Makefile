# Two entry points for a fresh machine: `make demo` and `make test`. Everything else hangs off them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.demo-stamp

.PHONY: demo test test-faults lint bench bytecode clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)    # on the demo's venv too: it adds the pip that one was made without
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,lint]'
	$(MAKE) --no-print-directory bytecode
	touch $(STAMP) $(DEMO_STAMP)

# the demo's install: the package and what it imports, none of the test and lint extras (they took 38 of the
# old demo's 44 s); -qq: no notice a newcomer need not act on. A pip that can install into another Python
# (--python, pip 22.3+) spares the venv its own pip (ensurepip: 3-7 s); `make test` then gives it one
$(DEMO_STAMP): pyproject.toml
	@echo "installing lcm-etl into $(VENV) (10-20 s; the test and lint tools come with \`make test\`)..."
	@if $(PYTHON) -m pip --help 2>/dev/null | grep -q -- '--python <python>'; then \
		$(PYTHON) -m venv --without-pip $(VENV) && \
		$(PYTHON) -m pip -qq --disable-pip-version-check --python $(BIN)/python install -e .; \
	else \
		$(PYTHON) -m venv $(VENV) && $(BIN)/pip install -qq --disable-pip-version-check -e .; \
	fi
	@$(MAKE) --no-print-directory -s bytecode
	@touch $(DEMO_STAMP)

# the package's bytecode, as pip writes it for an installed package: an editable checkout is otherwise compiled
# by every process where PYTHONDONTWRITEBYTECODE is set (0.2 s of each CLI run on the machines here)
bytecode:
	$(BIN)/python -m compileall -q lcm_etl

# the bundled fixtures through inspect, migrate, audit, reconcile and audit again (demo.sh; each report whole in
# build/demo/): lossless-claw's lcm.db and OpenClaw 2026.9.6 installations with history in cold storage, evicted
# windows, the doctor's archive-tier leftovers and a pending input (fixtures/openclaw-hidden/README.md)
demo: $(DEMO_STAMP)
	@LCM_ETL=$(BIN)/lcm-etl sh demo.sh

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test-faults: $(STAMP)
	$(BIN)/python -m pytest -m slow tests/faults

# SIZES / REPEAT / SYNC_REPEAT / SYNC_ONLY / STORE_SIZES: e.g. `make bench SIZES=200000 REPEAT=5`, or the sync re-runs' shares alone:
# `make bench SIZES=200000 REPEAT=3 SYNC_REPEAT=3 SYNC_ONLY=1`
SIZES  ?= 200000,2000000
# the gateway regime (bench/gateway.py): a store held open by one writer, synced by a --watch
GATEWAY_SIZES ?= 500000
REPEAT ?= 3
SYNC_REPEAT ?= 1
# the 10x session store too (20+ min, docs/benchmarks.md): make bench STORE_SIZES=50000,500000,5000000
STORE_SIZES ?= 50000,500000
bench: $(STAMP) bytecode
	$(BIN)/python bench/run.py --sizes $(SIZES) --repeat $(REPEAT) --sync-repeat $(SYNC_REPEAT) $(if $(SYNC_ONLY),--sync-only) \
		--store-sizes $(STORE_SIZES)
	$(BIN)/python bench/gateway.py --store-sizes $(GATEWAY_SIZES)

clean:
	rm -rf $(VENV) build .pytest_cache
