#!/usr/bin/env bash
# Predict, then measure (issue 20 item 4, docs/research/planner-validation.md): for three
# configurations of CPU workers on this machine, calibrate the planner from bench runs of that
# configuration, predict a scaled class replay with plan_class, run the real replay twice through
# the gateway (the noise), and compare with planner_check.
#
#   scripts/validate_planner.sh                 # all three configurations, ~25 min on 2 cores
#   CONFIGS="2x2" scripts/validate_planner.sh   # one of them
#   CONFIGS="2x4 1x4 1x2" MIX=agent:6,claude:2,codex:2,chat:4,burst:2 scripts/validate_planner.sh
#                                               # the sixteenth pass's: twice the class
#
# The bench runs: worker 1 alone (the cost model), then every worker at once (the contention of
# workers that share the cores; calibrate_worker --loaded-label); the real replays are not touched.
# Before each replay a drift probe repeats the bench's 256-token point on the replay's demo;
# <config>/drift.txt compares them (the machine's speed then against the calibration's).
#
# Per configuration, the demo is started three times, fresh each time (new workers, empty slot
# caches, a new gateway): once for the bench runs, once for each replay, so the two replays start
# from the same state as the simulation (empty slots) and as each other. Each configuration has a
# database of its own ($VAR_BASE/<config>), so `calibrate_worker --worker` sees only its own runs.
# A step whose output file exists is skipped: a run cut short resumes where it stopped.
#
# Environment: OUT (results, default /tmp/h20v/validation), VAR_BASE (default /tmp/h20v/var),
# PORT_BASE (default 8610), DURATION, SCALE, SEED, MIX, POLICY, LABEL (of the runs), PYTHON,
# RUNS (the real replays, default "1 2"; the comparison takes every replay-N.json in the
# configuration's directory).
#
# The measured replays do not depend on the model: to judge a changed cost model against replays
# already measured, copy replay-1.json and replay-2.json into a new OUT's <config>/ and run with a
# fresh VAR_BASE; the bench runs, the calibration and the prediction are redone, the replays kept.
# To measure more runs of a prediction already made, copy its plan.json, calibration.txt and
# replays into a new OUT's <config>/ and run with RUNS="1 2 3 4": only the missing replays run.
#
# CHECK_NAME (default the LABEL): the check is stored under this name (planner_check --name) in the
# database of the caller's environment (DATABASE_URL and OCS_VAR_DIR as they were when this started;
# the demos use databases of their own) and shown at /research/checks/<CHECK_NAME>/, with the noise
# read from each configuration's directory.
#
# STEP_TIMING=1: the workers write their logs at trace verbosity (LLAMA_ARG_LOG_VERBOSITY=5, benches
# and replays alike), and after each replay `manage.py step_timing` costs
# every iteration of their loops with the calibration (<config>/steps-N.txt): how fast the workers
# ran during that replay against the speed the calibration measured.
#
# LOAD_FACTOR=1 (implies STEP_TIMING=1): after the benches, a warm-up class replay of another seed
# (WARM_SEED, default SEED + 100; WARM_DURATION, default 120 s) on a fresh demo, its steps timed
# from the workers' logs against the bench calibration; that speed becomes the calibration's load
# factor (calibrate_worker --load-factor: <config>/calibration-load.txt, the one the prediction
# uses): the workers' speed under a class, which the benches alone do not show (eleventh pass).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
OUT="${OUT:-/tmp/h20v/validation}"
VAR_BASE="${VAR_BASE:-/tmp/h20v/var}"
PORT_BASE="${PORT_BASE:-8610}"
DURATION="${DURATION:-180}"
SCALE="${SCALE:-0.03}"
SEED="${SEED:-1}"
MIX="${MIX:-agent:3,claude:1,codex:1,chat:2,burst:1}"
POLICY="${POLICY:-tokens}"
LABEL="${LABEL:-h20v}"
RUNS="${RUNS:-1 2}"
STEP_TIMING="${STEP_TIMING:-0}"
LOAD_FACTOR="${LOAD_FACTOR:-0}"
WARM_SEED="${WARM_SEED:-$((SEED + 100))}"
WARM_DURATION="${WARM_DURATION:-120}"
[ "$LOAD_FACTOR" = 1 ] && STEP_TIMING=1
[ "$STEP_TIMING" = 1 ] && export LLAMA_ARG_LOG_VERBOSITY=5  # llama-server reads it; the demo passes it on
# name:workers:slots:context (tokens per slot). 1x2 from the sixteenth pass on: with twice the
# class (MIX), the planner asked beforehand with four earlier passes' cost models (candidates.py)
# ranks 2x4 < 1x4 < 1x2 under every one, where 1x4 and 2x4 measure the same at the class above.
ALL_CONFIGS="${ALL_CONFIGS:-1x4:1:4:4096 2x2:2:2:4096 2x4:2:4:2048 1x2:1:2:4096}"
CONFIGS="${CONFIGS:-1x4 2x2 2x4}"

CHECK_NAME="${CHECK_NAME:-$LABEL}"
CHECK_DATABASE_URL="${DATABASE_URL:-}"
CHECK_VAR_DIR="${OCS_VAR_DIR:-}"
COMMAND_LINE="LABEL=$LABEL CONFIGS=\"$CONFIGS\" MIX=$MIX SEED=$SEED DURATION=$DURATION SCALE=$SCALE RUNS=\"$RUNS\" LOAD_FACTOR=$LOAD_FACTOR STEP_TIMING=$STEP_TIMING POLICY=$POLICY bash scripts/validate_planner.sh"

# The embedded default (SQLite, in-process live state): class_replay cannot set the gateway's
# policy there, so the gateway, the planner and the replay all read it from here.
export OCS_FAIR_POLICY="$POLICY"
export OCS_LIVE_NAMESPACE="${OCS_LIVE_NAMESPACE:-h20v}"
unset DATABASE_URL REDIS_URL
mkdir -p "$OUT"

say() { echo "[$(date -u +%H:%M:%S)] $*"; }

# Each worker's log and its server's start time (seconds since boot, from /proc: the log's own
# timestamps count from the process's start), so step_timing.py can line the workers' logs up.
worker_starts() {  # var_dir
    local pid log
    for pid in $(pgrep -x llama-server); do
        log=$(readlink "/proc/$pid/fd/1" 2>/dev/null) || continue
        case "$log" in "$1"/logs/demo-worker-*.log)
            echo "$log $(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", $22 / hz}' "/proc/$pid/stat")" ;;
        esac
    done | sort
}

# Every iteration of the workers' loops during one run, costed with calibration $1 (read from the
# configuration's own database, $OCS_VAR_DIR) on workers of $2 slots, whose logs and start times
# are $3 (worker_starts); the last line of $4 is the run's speed against the calibration.
step_times() {  # calibration slots workers-file out
    "$PYTHON" manage.py step_timing "$1" --slots "$2" \
        $(awk '{print $1}' "$3") --started "$(awk '{print $2}' "$3" | paste -sd,)" >"$4"
}

DEMO_PID=""
demo_start() {  # name workers slots context port log
    local name=$1 workers=$2 slots=$3 context=$4 port=$5 log=$6
    say "$name: demo --workers $workers --slots $slots --context $context --port $port"
    "$PYTHON" manage.py demo --workers "$workers" --slots "$slots" --context "$context" --port "$port" >"$log" 2>&1 &
    DEMO_PID=$!
    for _ in $(seq 1 360); do
        if grep -q "OCS Intelligence is up" "$log"; then
            say "$name: $(grep -m1 'OCS Intelligence is up' "$log" | cut -c1-40)"
            return 0
        fi
        if ! kill -0 "$DEMO_PID" 2>/dev/null; then
            tail -20 "$log"; echo "the demo exited" >&2; exit 1
        fi
        sleep 0.5
    done
    tail -20 "$log"; echo "the demo did not come up in 180 s" >&2; exit 1
}
demo_stop() {
    if [ -n "$DEMO_PID" ] && kill -0 "$DEMO_PID" 2>/dev/null; then
        kill -TERM "$DEMO_PID"
        wait "$DEMO_PID" || true
    fi
    DEMO_PID=""
}
trap demo_stop EXIT

bench_worker() {  # worker slots prefix phase: a prompt-size sweep at concurrency 1, cached-vs-uncached turns, a concurrency sweep
    local worker=$1 slots=$2 prefix=$3 phase=$4 levels="1,2"
    local LABEL="$LABEL $phase"
    [ "$slots" -ge 4 ] && levels="1,2,4"
    for prompt in 64 256 768; do
        "$PYTHON" manage.py bench --worker "$worker" --requests 3 --warmup 1 --concurrency 1 \
            --prompt-tokens "$prompt" --output-tokens 8 --label "$LABEL prompt sweep $prompt" \
            --json "$prefix-prompt-$prompt.json"
    done
    # Turns that find a prefix cached and compute a few more tokens (cached:prompt): what a
    # continuing agent turn does, and what separates the per-context prefill cost from the rest.
    # 16 to 256 after 512 (several sizes after one prefix: the small-chunk term,
    # research/planner/fit.py); 16 and 64 after 1,280, because after one prefix only the
    # small-chunk term (its cost grows with the prefix) and a fixed request overhead differ only on
    # the chunks shorter than the term's size, and the fit could take one for the other (the fifth
    # pass's 1x4 calibration did): a second prefix tells them apart.
    for shape in 512:528 512:544 512:576 512:640 512:768 1280:1296 1280:1344; do
        local cached=${shape%:*} prompt=${shape#*:}
        "$PYTHON" manage.py bench --worker "$worker" --requests 3 --warmup 1 --concurrency 1 \
            --prompt-tokens "$prompt" --prefix-tokens "$cached" --output-tokens 8 \
            --label "$LABEL cached prefix $cached of $prompt" --json "$prefix-prefix-$prompt.json"
    done
    "$PYTHON" manage.py bench --worker "$worker" --requests 6 --warmup 1 --concurrency "$levels" \
        --prompt-tokens 128 --output-tokens 32 --label "$LABEL concurrency sweep" --json "$prefix-concurrency.json"
}

cases=()
index=0
for config in $ALL_CONFIGS; do
    IFS=: read -r name workers slots context <<<"$config"
    port=$((PORT_BASE + index)); index=$((index + 1))
    case " $CONFIGS " in *" $name "*) ;; *) continue ;; esac
    export OCS_VAR_DIR="$VAR_BASE/$name"
    mkdir -p "$OCS_VAR_DIR"
    dir="$OUT/$name"; mkdir -p "$dir"
    loaded=()
    [ "$workers" -gt 1 ] && loaded=(--loaded-label "$LABEL loaded" --loaded-workers "$workers")

    # 1. Bench runs of this configuration: worker 1 alone (the cost model), then, with more than
    # one worker, every worker at once (they share the cores: how much slower worker 1 is then
    # is the model's contention, applied only while the simulated workers compute together).
    if [ ! -s "$dir/calibration.txt" ]; then
        demo_start "$name" "$workers" "$slots" "$context" "$port" "$dir/demo-bench.log"
        bench_worker demo-worker-1 "$slots" "$dir/bench-alone-w1" "alone" >"$dir/bench-alone-w1.log" 2>&1
        if [ "$workers" -gt 1 ]; then
            pids=()
            for w in $(seq 1 "$workers"); do
                bench_worker "demo-worker-$w" "$slots" "$dir/bench-w$w" "loaded" >"$dir/bench-w$w.log" 2>&1 &
                pids+=($!)
            done
            for pid in "${pids[@]}"; do wait "$pid"; done
        fi
        say "$name: bench done"
        # 2. The cost model, from worker 1's runs (the planner gives every worker the same one);
        # worker 2's fit (its loaded runs) is printed beside it, as a check of that assumption.
        # While the demo is still up: --count-tokens asks the worker's tokenizer and template how
        # many tokens the personas' messages are (no generation), sampled at the replay's own scale
        # (shorter texts tokenize denser; from the eighth pass on, docs/research/planner-validation.md);
        # --slot-files times worker 1's slot file saves and restores (from the seventeenth pass on).
        for w in $(seq 2 "$workers"); do
            "$PYTHON" manage.py calibrate_worker --worker "demo-worker-$w" --count-tokens --token-scale "$SCALE" \
                --label "$LABEL $name worker $w" >"$dir/calibration-w$w.txt"
        done
        "$PYTHON" manage.py calibrate_worker --worker demo-worker-1 --count-tokens --token-scale "$SCALE" "${loaded[@]}" \
            --slot-files --label "$LABEL $name worker 1" >"$dir/calibration.txt"
        demo_stop
    fi
    calibration=$(tail -1 "$dir/calibration.txt" | awk '{print $2}')
    say "$name: calibration $calibration"

    # 2b. LOAD_FACTOR=1: the workers' speed under a class (a warm-up replay of another seed),
    # against the calibration just fitted, stored as a second calibration with that load factor.
    if [ "$LOAD_FACTOR" = 1 ]; then
        if [ ! -s "$dir/calibration-load.txt" ]; then
            demo_start "$name" "$workers" "$slots" "$context" "$port" "$dir/demo-warmup.log"
            worker_starts "$OCS_VAR_DIR" >"$dir/workers-warmup.txt"
            "$PYTHON" manage.py class_replay --base-url "http://127.0.0.1:$port/v1" --mix "$MIX" \
                --duration "$WARM_DURATION" --scale "$SCALE" --seed "$WARM_SEED" --policy "$POLICY" \
                --label "$LABEL $name warm-up" --json "$dir/warmup.json" >"$dir/warmup.txt"
            step_times "$calibration" "$slots" "$dir/workers-warmup.txt" "$dir/steps-warmup.txt"
            factor=$(tail -1 "$dir/steps-warmup.txt" | sed -n 's/.*against the calibration: x\([0-9.]*\).*/\1/p')
            [ -n "$factor" ] || { tail -3 "$dir/steps-warmup.txt"; echo "no speed in steps-warmup.txt" >&2; exit 1; }
            "$PYTHON" manage.py calibrate_worker --worker demo-worker-1 --count-tokens --token-scale "$SCALE" \
                "${loaded[@]}" --slot-files --load-factor "$factor" --label "$LABEL $name worker 1 under a class" \
                >"$dir/calibration-load.txt"
            demo_stop
        fi
        calibration=$(tail -1 "$dir/calibration-load.txt" | awk '{print $2}')
        say "$name: calibration $calibration ($(grep -m1 'under a class' "$dir/calibration-load.txt" | sed 's/^ *//'))"
    fi

    # 3. The prediction, with the replay's own flags.
    if [ ! -s "$dir/plan.json" ]; then
        "$PYTHON" manage.py plan_class --calibration "$calibration" --mix "$MIX" --workers "$workers" \
            --slots "$slots" --context "$context" --duration "$DURATION" --scale "$SCALE" --seed "$SEED" \
            --policy "$POLICY" --json "$dir/plan.json" | tee "$dir/plan.txt"
    fi

    # 4. The real replay, twice (RUNS), each on a fresh demo.
    for run in $RUNS; do
        if [ ! -s "$dir/replay-$run.json" ]; then
            demo_start "$name" "$workers" "$slots" "$context" "$port" "$dir/demo-replay-$run.log"
            [ "$STEP_TIMING" = 1 ] && worker_starts "$OCS_VAR_DIR" >"$dir/workers-$run.txt"
            # How fast the machine is now: the bench's 256-token point again, on this replay's demo
            # (a few seconds; no student owns a slot yet, so the replay recomputes what it wrote).
            "$PYTHON" manage.py bench --worker demo-worker-1 --requests 3 --warmup 1 --concurrency 1 \
                --prompt-tokens 256 --output-tokens 8 --label "$LABEL drift probe $name run $run" \
                --json "$dir/probe-$run.json" >/dev/null
            "$PYTHON" manage.py class_replay --base-url "http://127.0.0.1:$port/v1" --mix "$MIX" \
                --duration "$DURATION" --scale "$SCALE" --seed "$SEED" --policy "$POLICY" \
                --label "$LABEL $name run $run" --json "$dir/replay-$run.json" | tee "$dir/replay-$run.txt"
            demo_stop
            if [ "$STEP_TIMING" = 1 ]; then
                step_times "$calibration" "$slots" "$dir/workers-$run.txt" "$dir/steps-$run.txt"
                tail -1 "$dir/steps-$run.txt"
            fi
        fi
    done
    # Drift: each replay's probe against the bench's same point (worker 1 alone, before the
    # calibration). Well off 1.00, the machine ran at another speed than the one calibrated.
    "$PYTHON" - "$dir" >"$dir/drift.txt" <<'PY'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
def ttft(path):
    return json.loads(path.read_text())["levels"][0]["ttft_ms"]["p50"]
bench = d / "bench-alone-w1-prompt-256.json"
for probe in sorted(d.glob("probe-*.json")) if bench.exists() else []:
    print(f"{probe.stem}: 256-token TTFT {ttft(probe):.0f} ms against {ttft(bench):.0f} ms in the bench "
          f"(ratio {ttft(probe) / ttft(bench):.2f})")
PY
    cat "$dir/drift.txt"
    replays=$(ls "$dir"/replay-[0-9]*.json | sort -V)
    cases+=(--case "$name:$dir/plan.json:$(echo $replays | tr ' ' ',')")
    measured=()
    for replay in $replays; do measured+=(--measured "$replay"); done
    "$PYTHON" manage.py planner_check --label "$name" --predicted "$dir/plan.json" "${measured[@]}" | tee "$dir/check.txt"
done

# 5. All configurations together: the verdicts and the ranking by agent p95 TTFT, stored as a row
# (CHECK_NAME) in the caller's database.
if [ "${#cases[@]}" -gt 0 ]; then
    (
        if [ -n "$CHECK_DATABASE_URL" ]; then export DATABASE_URL="$CHECK_DATABASE_URL"; fi
        if [ -n "$CHECK_VAR_DIR" ]; then export OCS_VAR_DIR="$CHECK_VAR_DIR"; else unset OCS_VAR_DIR; fi
        "$PYTHON" manage.py planner_check "${cases[@]}" --json "$OUT/check.json" --name "$CHECK_NAME" \
            --reproduce "$COMMAND_LINE"
    ) | tee "$OUT/check.txt"
fi
say "done: $OUT"
