#!/usr/bin/env bash
# Runs the whole suite on each back end: `embedded` (no environment: SQLite, in-process live
# state) and `services` (PostgreSQL + Redis, required), then the real-clients group once, on
# PostgreSQL + Redis (`realclients`). Default: all, embedded first.
set -euo pipefail
PY="${1:-.venv/bin/python}"
WHICH="${2:-all}"
export PYTHONUNBUFFERED=1
status=0

run_embedded() {
    echo "=== test suite on the embedded default (SQLite, in-process live state)"
    env -u DATABASE_URL -u REDIS_URL OCS_ENV=test "$PY" -m pytest -m "not realclients" "${PYTEST_ARGS[@]}" || status=1
}

services_pytest() {
    DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}" \
    REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/0}" \
    OCS_LIVE_NAMESPACE="ocs-test-$$" OCS_REQUIRE_SERVICES=1 OCS_ENV=test \
        "$PY" -m pytest "$@"
}

run_services() {
    bash scripts/ensure_services.sh || { status=1; return; }
    echo "=== test suite on PostgreSQL + Redis"
    services_pytest -m "not realclients" "${PYTEST_ARGS[@]}" || status=1
}

# The students' real tools (tests/realclients), slow on CPU: once, on PostgreSQL + Redis only.
run_realclients() {
    bash scripts/ensure_services.sh || { status=1; return; }
    echo "=== real clients (Claude Code, Copilot CLI, Codex CLI) through the gateway, on PostgreSQL + Redis"
    bash scripts/ensure_clients.sh || { status=1; return; }
    services_pytest -m realclients tests/realclients "${PYTEST_ARGS[@]}" || status=1
}

PYTEST_ARGS=(${PYTEST_EXTRA:-})
echo "=== type check (mypy)"
env -u DATABASE_URL -u REDIS_URL "$PY" -m mypy core ocsweb accounts fleet inference research lessons portal || status=1
case "$WHICH" in
    embedded) run_embedded ;;
    services) run_services; run_realclients ;;
    realclients) run_realclients ;;
    all) run_embedded; run_services; run_realclients ;;
    *) echo "usage: run_tests.sh PYTHON [embedded|services|realclients|all]" >&2; exit 2 ;;
esac
exit $status
