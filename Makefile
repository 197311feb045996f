# The front door. `make demo` and `make test` work on a fresh machine (Debian/Ubuntu, Python 3.11+).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PORT ?= 8000
WORKERS ?= 1
PROFILE ?= default

.PHONY: setup demo test test-embedded test-services clean

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: requirements.txt requirements-dev.txt scripts/ensure_llama_server.sh scripts/ensure_browser.sh scripts/ensure_oidc_provider.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	bash scripts/ensure_llama_server.sh $(PY)
	bash scripts/ensure_browser.sh
	bash scripts/ensure_oidc_provider.sh
	$(PY) manage.py collectstatic --no-input -v 0
	touch $@

demo: setup
	$(PY) manage.py demo --port $(PORT) --workers $(WORKERS) --profile $(PROFILE)

# The whole suite twice: on the embedded default (SQLite, in-process live state) and on
# PostgreSQL + Redis. Both must pass; a missing service fails the run, it is never skipped.
test: setup
	bash scripts/run_tests.sh $(PY)

test-embedded: setup
	bash scripts/run_tests.sh $(PY) embedded

test-services: setup
	bash scripts/run_tests.sh $(PY) services

clean:
	rm -rf $(VENV) var/test-*

# The students' real tools (Claude Code, Copilot CLI, Codex) through the gateway; part of `make test`.
.PHONY: test-realclients test-windows
test-realclients: setup
	bash scripts/run_tests.sh $(PY) realclients

# Real clients' sessions that outgrow a slot and must compact (docs/clients.md): 5-8 minutes, not in `make test`.
test-windows: setup
	REALCLIENTS_MARKS=windows bash scripts/run_tests.sh $(PY) realclients
