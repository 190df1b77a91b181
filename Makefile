# Everything installs from nothing: `make demo` and `make test` create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# The oldest MindSpore that pyproject.toml admits (2.7.0: the first release for
# Python 3.11 on this index); `make test-oldest` tests it in a venv of its own.
OLDEST_MINDSPORE ?= 2.7.0
OLDEST_VENV := .venv-oldest
OLDEST_BIN := $(OLDEST_VENV)/bin
OLDEST_STAMP := $(OLDEST_VENV)/.installed-$(OLDEST_MINDSPORE)
# -qq keeps pip and the build backend's warnings out of the log; errors still print
PIP_INSTALL = python -m pip install -qq --no-warn-script-location

.PHONY: install browser demo test test-slow test-oldest lint docs bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP_INSTALL) --upgrade pip
	$(BIN)/$(PIP_INSTALL) -e '.[test]'
	touch $(STAMP)

$(OLDEST_STAMP): pyproject.toml
	rm -f $(OLDEST_VENV)/.installed-*
	test -x $(OLDEST_BIN)/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_BIN)/$(PIP_INSTALL) --upgrade pip
	$(OLDEST_BIN)/$(PIP_INSTALL) -e '.[test]' 'mindspore==$(OLDEST_MINDSPORE)'
	touch $@

# `make bench` compares against Ray Tune and runs a realistic model: extras of their own
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/$(PIP_INSTALL) -e '.[test,bench,models]'
	touch $@

install: $(STAMP)

# headless Chromium for the report.html test (Debian's package); skipped where apt is unavailable
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >.browser-install.log 2>&1 || \
	  (tail -5 .browser-install.log; echo "chromium could not be installed: the report.html browser test will be skipped")
	@rm -f .browser-install.log

demo: $(STAMP)
	$(BIN)/ampsweep run examples/seed_repro.yaml --out runs

test: $(STAMP) browser
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# fast tests and one end-to-end sweep on the oldest supported MindSpore; the benchmarks' own tests
# (analysis on synthetic tables, no MindSpore call that differs by version) run once, in `make test`
test-oldest: $(OLDEST_STAMP)
	$(OLDEST_BIN)/python -m pytest -q --ignore=tests/test_benchmarks.py
	rm -rf runs/oldest
	$(OLDEST_BIN)/ampsweep run examples/smoke.yaml --out runs/oldest --workers 2 --no-progress --top 4
	$(OLDEST_BIN)/python .ci/check_trials.py runs/oldest/smoke $(OLDEST_MINDSPORE)

# what CI checks besides the tests: formatting, lint rules, types of the contracts and the public API
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# the mkdocs site (docs/, mkdocs.yml) into site/; --strict turns every warning into an error
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf runs rewritten_network .pytest_cache site build/docs-api
