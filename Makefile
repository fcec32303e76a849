# Two entry points for a fresh machine: `make demo` and `make test`. Everything else hangs off them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-faults lint bench bytecode clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,lint]'
	$(MAKE) --no-print-directory bytecode
	touch $(STAMP)

# the package's bytecode, as pip writes it for an installed package: an editable checkout is otherwise compiled
# by every process where PYTHONDONTWRITEBYTECODE is set (0.2 s of each CLI run on the machines here)
bytecode:
	$(BIN)/python -m compileall -q lcm_etl

# the bundled OpenClaw 2026.9.6 installations: history in cold storage, evicted windows, the doctor's archive-tier
# leftovers and a pending input, besides the live rows (fixtures/openclaw-hidden/README.md)
DEMO_LCM_DB := fixtures/lossless-claw/multiparent-newest.db
DEMO_OPENCLAW := $(foreach s,cold/state evicted/state archive-tier/state pending/state,--sessions fixtures/openclaw-hidden/$(s))
demo: $(STAMP)
	rm -rf build/demo
	$(BIN)/lcm-etl inspect --src $(DEMO_LCM_DB)
	$(BIN)/lcm-etl migrate --src $(DEMO_LCM_DB) --dest build/demo/lcm.sqlite
	@echo "--- a second run finds everything already present:"
	$(BIN)/lcm-etl migrate --src $(DEMO_LCM_DB) --dest build/demo/lcm.sqlite
	@echo "--- OpenClaw's own transcripts hold more than lcm.db: audit says what the target lacks (exit 3)"
	$(BIN)/lcm-etl audit --src $(DEMO_LCM_DB) $(DEMO_OPENCLAW) --dest build/demo/lcm.sqlite; test $$? -eq 3
	@echo "--- reconcile recovers it, cold storage, evicted windows, archives and a pending input included:"
	$(BIN)/lcm-etl reconcile --src $(DEMO_LCM_DB) $(DEMO_OPENCLAW) --dest build/demo/lcm.sqlite
	@echo "--- and audit proves it:"
	$(BIN)/lcm-etl audit --src $(DEMO_LCM_DB) $(DEMO_OPENCLAW) --dest build/demo/lcm.sqlite

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
