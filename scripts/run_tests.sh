#!/usr/bin/env bash
# Runs the suite: the whole of it on the embedded default (SQLite, in-process live state); on
# PostgreSQL + Redis everything whose outcome can depend on the back end (tests marked
# `backend_neutral` — dialects, the demo, the rig agent, research runs — run in the embedded
# pass only); and the real-clients group once, on PostgreSQL + Redis. With `all`, the embedded
# pass runs beside the PostgreSQL + Redis passes: they share nothing (SQLite against PostgreSQL,
# in-process live state against a Redis namespace of their own, a var directory each). Side by
# side they keep two cores busy (99 % while both run, 2026-12-07): the run is as short as its
# work, mostly llama-server reading test prompts, so a slow test is made to read less, not spread
# out. The two sides take about as long (2026-12-07, quiet machine: embedded ~950 s with the demo's
# tests; PostgreSQL + Redis 556 s, then real clients 391 s). The embedded pass's output follows
# the others'. Prints how long each phase took at the end.
set -euo pipefail
PY="${1:-.venv/bin/python}"
WHICH="${2:-all}"
export PYTHONUNBUFFERED=1
PHASE_FILE="$(mktemp)"  # one line per phase, from every pass (a pass may run in the background)
STATUS_FILE="$(mktemp)"  # a line per failed phase
trap 'rm -f "$PHASE_FILE" "$STATUS_FILE"' EXIT

timed() {  # timed NAME COMMAND...: runs it, records its wall time and outcome
    local name="$1" start rc=0
    shift
    start=$(date +%s)
    "$@" || rc=$?
    printf '%-34s %5d s  %s\n' "$name" "$(( $(date +%s) - start ))" "$([ $rc = 0 ] && echo ok || echo FAILED)" \
        >> "$PHASE_FILE"
    [ $rc = 0 ] || echo "$name" >> "$STATUS_FILE"
    return $rc
}

# Each pass has a var directory of its own (OCS_VAR_DIR: the stamp file of issued keys, workers'
# key files, the embedded database): with one shared `var/`, a key issued in one pass made the
# other's processes reload their set of key prefixes, and a test that counts those loads failed.
embedded_pytest() {
    env -u DATABASE_URL -u REDIS_URL OCS_ENV=test OCS_VAR_DIR="$PWD/var/test-embedded" "$PY" -m pytest "$@"
}

services_pytest() {
    DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}" \
    REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/0}" \
    OCS_LIVE_NAMESPACE="ocs-test-$$" OCS_REQUIRE_SERVICES=1 OCS_ENV=test OCS_VAR_DIR="$PWD/var/test-services" \
        "$PY" -m pytest "$@"
}

install_oidc_provider() {
    # The school sign-in tests' OpenID Connect provider (node); they run in the embedded pass only.
    timed "OIDC test provider: install" bash scripts/ensure_oidc_provider.sh || true
}

run_embedded() {  # run_embedded [PYTEST ARGS...]: the whole embedded pass, less what the arguments deselect
    echo "=== test suite on the embedded default (SQLite, in-process live state)"
    timed "embedded (all but real clients)" embedded_pytest -m "not realclients" --durations=15 "$@" "${PYTEST_ARGS[@]}" || true
}

run_services() {
    timed "PostgreSQL + Redis: set up" bash scripts/ensure_services.sh || return 0
    echo "=== test suite on PostgreSQL + Redis (what can depend on the back end)"
    timed "PostgreSQL + Redis" services_pytest -m "not realclients and not backend_neutral" --durations=15 "${PYTEST_ARGS[@]}" || true
}

# The students' real tools (tests/realclients), slow on CPU: once, on PostgreSQL + Redis only.
# REALCLIENTS_MARKS picks which: by default all but the long compaction sessions (`make test-windows`).
run_realclients() {
    bash scripts/ensure_services.sh >/dev/null || { echo "services" >> "$STATUS_FILE"; return 0; }
    timed "real clients: install" bash scripts/ensure_clients.sh || return 0
    echo "=== real clients (Claude Code, Copilot CLI, Codex CLI) through the gateway, on PostgreSQL + Redis"
    timed "real clients" services_pytest -m "${REALCLIENTS_MARKS:-realclients and not windows}" tests/realclients \
        "${PYTEST_ARGS[@]}" || true
}

PYTEST_ARGS=(${PYTEST_EXTRA:-})
echo "=== type check (mypy)"
timed "type check (mypy)" env -u DATABASE_URL -u REDIS_URL "$PY" -m mypy core ocsweb accounts fleet inference research lessons portal || true
case "$WHICH" in
    embedded) install_oidc_provider; run_embedded ;;
    services) run_services; run_realclients ;;
    realclients) run_realclients ;;
    all)
        install_oidc_provider
        bash scripts/ensure_clients.sh >/dev/null 2>&1 || true  # installs before the passes run side by side
        embedded_log="$(mktemp)"
        started=$(date +%s)
        echo "=== the embedded pass runs beside the PostgreSQL + Redis passes; its output follows theirs"
        run_embedded > "$embedded_log" 2>&1 &
        embedded_pid=$!
        run_services
        run_realclients
        wait "$embedded_pid" || true
        cat "$embedded_log"
        rm -f "$embedded_log"
        printf '%-34s %5d s\n' "all passes, side by side" "$(( $(date +%s) - started ))" >> "$PHASE_FILE"
        ;;
    *) echo "usage: run_tests.sh PYTHON [embedded|services|realclients|all]" >&2; exit 2 ;;
esac
echo "=== phase timings"
cat "$PHASE_FILE"
[ ! -s "$STATUS_FILE" ]
