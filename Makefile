# The front door: `make demo` and `make test` work on a fresh machine with only Python 3.10+.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV  := $(VENV)/.installed-dev

.PHONY: demo test test-fast test-agents lint bench torture clean completion-table browser

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP_BASE): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP_BASE) $@

demo: $(STAMP_BASE)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash demo/demo.sh

# The test lanes write bytecode even where PYTHONDONTWRITEBYTECODE is set (__pycache__/ is git-ignored): without
# it every pytest process (each xdist worker) rewrites the asserts of every test module again at every run,
# ~6 s of CPU a process on this machine, and every `loki` subprocess a test starts compiles loki again.
test test-fast test-agents: export PYTHONDONTWRITEBYTECODE :=

test: $(STAMP_DEV)
	$(PY) -m pytest -q -n 2

# The inner loop: everything but the tests marked slow (crash, torture, fuzz, model, process races), on two
# workers (pytest-xdist: the fast lane mostly waits on fsync, subprocesses and PostgreSQL, so two overlap).
# worksteal: an idle worker takes tests queued on the other; with the default `load` one worker ended ~10 s before
# the other (BENCHMARKS.md, "Test suite").
test-fast: $(STAMP_DEV)
	$(PY) -m pytest -q -m "not slow" -n 2 --dist worksteal

# The end-to-end tests with the real agents alone (tests/agents/: Claude Code, installed with npm into
# .cache/agents/ on first use). `make test` runs them too; without node and npm they skip, saying why.
test-agents: $(STAMP_DEV)
	$(PY) -m pytest -q -m agent

# Debian's headless Chromium and its chromedriver, for the board's browser tests (tests/serve/browser.py): the
# system's packages, no browser download. Needs root (`.ci/run` runs it); without them those tests skip locally.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then echo "chromium and chromedriver are installed"; \
	else apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; fi

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check loki tests bench
	$(VENV)/bin/mypy loki

bench: $(STAMP_DEV)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) bench/run.py

torture: $(STAMP_DEV)
	$(PY) -m tests.torture.harness --rounds $(or $(ROUNDS),200) --workers $(or $(WORKERS),4) $(if $(SERVE),--serve)

# The table the typer-free completer reads (loki/cli/completiontable.py), from the app; tests check it is current.
completion-table: $(STAMP_DEV)
	$(PY) -c "from loki.cli.app import build_app; from loki.cli.completion import render_table; \
	          print(render_table(build_app()), end='')" > loki/cli/completiontable.py.new
	mv loki/cli/completiontable.py.new loki/cli/completiontable.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
