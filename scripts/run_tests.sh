#!/usr/bin/env bash
# Runs the suite: the whole of it on the embedded default (SQLite, in-process live state), then
# on PostgreSQL + Redis everything whose outcome can depend on the back end (tests marked
# `backend_neutral` — dialects, the demo, the rig agent, research runs — ran in the first pass
# and are not repeated), then the real-clients group once, on PostgreSQL + Redis. Prints how
# long each phase took at the end. Default: all.
set -euo pipefail
PY="${1:-.venv/bin/python}"
WHICH="${2:-all}"
export PYTHONUNBUFFERED=1
status=0
PHASES=()

timed() {  # timed NAME COMMAND...: runs it, records its wall time and outcome
    local name="$1" start rc=0
    shift
    start=$(date +%s)
    "$@" || rc=$?
    PHASES+=("$(printf '%-34s %5d s  %s' "$name" "$(( $(date +%s) - start ))" "$([ $rc = 0 ] && echo ok || echo FAILED)")")
    [ $rc = 0 ] || status=1
    return $rc
}

embedded_pytest() {
    env -u DATABASE_URL -u REDIS_URL OCS_ENV=test "$PY" -m pytest "$@"
}

services_pytest() {
    DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}" \
    REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/0}" \
    OCS_LIVE_NAMESPACE="ocs-test-$$" OCS_REQUIRE_SERVICES=1 OCS_ENV=test \
        "$PY" -m pytest "$@"
}

run_embedded() {
    # The school sign-in tests' OpenID Connect provider (node); they run in this pass only.
    timed "OIDC test provider: install" bash scripts/ensure_oidc_provider.sh || true
    echo "=== test suite on the embedded default (SQLite, in-process live state)"
    timed "embedded (all but real clients)" embedded_pytest -m "not realclients" --durations=15 "${PYTEST_ARGS[@]}" || true
}

run_services() {
    timed "PostgreSQL + Redis: set up" bash scripts/ensure_services.sh || return 0
    echo "=== test suite on PostgreSQL + Redis (what can depend on the back end)"
    timed "PostgreSQL + Redis" services_pytest -m "not realclients and not backend_neutral" --durations=15 "${PYTEST_ARGS[@]}" || true
}

# The students' real tools (tests/realclients), slow on CPU: once, on PostgreSQL + Redis only.
run_realclients() {
    bash scripts/ensure_services.sh >/dev/null || { status=1; return 0; }
    timed "real clients: install" bash scripts/ensure_clients.sh || return 0
    echo "=== real clients (Claude Code, Copilot CLI, Codex CLI) through the gateway, on PostgreSQL + Redis"
    timed "real clients" services_pytest -m realclients tests/realclients "${PYTEST_ARGS[@]}" || true
}

PYTEST_ARGS=(${PYTEST_EXTRA:-})
echo "=== type check (mypy)"
timed "type check (mypy)" env -u DATABASE_URL -u REDIS_URL "$PY" -m mypy core ocsweb accounts fleet inference research lessons portal || true
case "$WHICH" in
    embedded) run_embedded ;;
    services) run_services; run_realclients ;;
    realclients) run_realclients ;;
    all) run_embedded; run_services; run_realclients ;;
    *) echo "usage: run_tests.sh PYTHON [embedded|services|realclients|all]" >&2; exit 2 ;;
esac
echo "=== phase timings"
printf '%s\n' "${PHASES[@]}"
exit $status
