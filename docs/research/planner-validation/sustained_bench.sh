#!/usr/bin/env bash
# After the eleventh pass (docs/research/planner-validation.md): does a worker kept busy for minutes,
# with no class, run slower than its calibration? A 1x4 demo on a pass's var (its database holds the
# configuration's calibration), the workers' step logs on, the worker kept busy by benches for ~3.5
# minutes (256-token prompts at concurrency 4, then 64 new tokens after a 1,024-token cached prefix
# at concurrency 4), then step_timing.py against the calibration.
#
#   VAR=/tmp/p11/var/1x4 CALIBRATION=1 docs/research/planner-validation/sustained_bench.sh > sustained-1x4.txt
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OCS_VAR_DIR="${VAR:?the var directory of the configuration in a pass}" LLAMA_ARG_LOG_VERBOSITY=5
export OCS_LIVE_NAMESPACE=sustained
unset DATABASE_URL REDIS_URL
log=$(mktemp)
.venv/bin/python manage.py demo --workers 1 --slots 4 --context 4096 --port "${PORT:-8630}" >"$log" 2>&1 &
demo=$!
trap 'kill -TERM $demo 2>/dev/null; wait $demo 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do grep -q "OCS Intelligence is up" "$log" && break; sleep 0.5; done
.venv/bin/python manage.py bench --worker demo-worker-1 --requests 64 --warmup 0 --concurrency 4 \
    --prompt-tokens 256 --output-tokens 32 --label "sustained 256 x4" >/dev/null 2>&1
.venv/bin/python manage.py bench --worker demo-worker-1 --requests 96 --warmup 0 --concurrency 4 \
    --prompt-tokens 1088 --prefix-tokens 1024 --output-tokens 16 --label "sustained prefix x4" >/dev/null 2>&1
kill -TERM $demo; wait $demo || true
trap - EXIT
PYTHONPATH=. .venv/bin/python docs/research/planner-validation/step_timing.py "${CALIBRATION:?the calibration id}" \
    "$OCS_VAR_DIR/logs/demo-worker-1.log" --window 15
