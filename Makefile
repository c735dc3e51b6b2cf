# Response Auditor: `make run` serves the dashboard with demo data, `make test` runs every test.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

# The first interpreter >= 3.12 found (Django 6 needs it); pyenv shims honour .python-version.
PYTHON ?= $(shell for p in python3.13 python3.12 python3 python; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: run test check docs test-postgres test-unit test-browser bench drill lint venv native clean

$(VENV)/.installed: pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python >= 3.12 is required (Django 6); install it or pass PYTHON=/path/to/python3.12" >&2; exit 1; fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

# The guardrails compiled with mypyc when a C compiler is at hand (analyzers/engine/native.py;
# nothing to do while the build is current). Without one they run as Python: a warning.
native: venv
	@$(PY) -m analyzers.engine.native || true

# `make run DEMO_STREAM=0` skips the streamed demo audits (manage.py demo_stream).
DEMO_STREAM ?= 1

# Development mode for `make run` only (DEBUG=false make run tries the production profile,
# which then needs SECRET_KEY and `manage.py collectstatic`).
run: export DEBUG ?= true

run: native
	$(PY) manage.py migrate --noinput
	$(PY) manage.py setup_demo --url http://$(HOST):$(PORT)/
	$(PY) manage.py recover_audits --stale-after 0 --pending-after 0
	@demo=""; if [ "$(DEMO_STREAM)" != "0" ]; then \
		$(PY) manage.py demo_stream --url http://$(HOST):$(PORT) & demo=$$!; fi; \
	trap '[ -n "$$demo" ] && kill $$demo 2>/dev/null' EXIT INT TERM; \
	$(PY) -m auditor_site.serve --host $(HOST) --port $(PORT)

# The checks (`make check`: format, lint, import contracts, types, docs), then unit, API and
# WebSocket tests; real-browser tests in their own pytest run
# (Playwright's sync API and pytest-asyncio do not share one process well).
test: native
	$(MAKE) --no-print-directory check
	$(PY) -m pytest -q -m "not browser" -p no:cacheprovider
	AUDITOR_PURE_PYTHON=1 $(PY) -m pytest -q -p no:cacheprovider tests/analyzers/engine
	$(PY) -m pytest -q -m browser -p no:cacheprovider; rc=$$?; [ $$rc -eq 5 ] || exit $$rc

# The documentation site (docs/, mkdocs-material) in strict mode: a broken link or anchor, or a
# page left out of the navigation, fails the build (and so `make test`). Output in var/site.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d var/site

# The same suite (not the browser tier) against a throwaway PostgreSQL cluster and a throwaway
# redis-server (needs Debian's postgresql and redis-server packages), with the tests that
# restart them.
test-postgres: native
	bash .ci/postgres-tests

# The fault drill (bench/drill.py): 2 servers and 2 db_workers on a throwaway PostgreSQL and
# Redis, broken on purpose while audits arrive (needs the postgresql and redis-server packages).
drill: native
	$(PY) -m pip install -q -e '.[postgres,redis]'
	$(PY) bench/drill.py $(DRILL_ARGS)

# Benchmarks run the production profile (DEBUG off): a throwaway key, collected static files.
bench: export SECRET_KEY ?= bench-only-secret-key-not-for-any-server-0123456789abcdef
bench: native
	@$(PY) manage.py collectstatic --noinput -v0
	@for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

# What a change passes before review: formatting, lint, import contracts, types, the docs
# (the pre-commit hooks of .pre-commit-config.yaml run the same tools on each commit).
check: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy analyzers/engine audits
	$(MAKE) --no-print-directory docs

lint: venv
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) var analyzers/engine/guardrails/_native
