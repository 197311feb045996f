#!/usr/bin/env bash
# After the eighth pass (docs/research/planner-validation.md): does the control plane take the 1x4
# worker's CPU during a class replay? Every process's CPU time (utime + stime, /proc/<pid>/stat)
# before and after one replay (the validation's mix, scale and seed) on a fresh 1x4 demo, summed
# by process kind, in cores (CPU seconds over the replay's wall seconds).
#
#   bash docs/research/planner-validation/cpu_share.sh > docs/research/planner-validation/cpu-share.txt
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR="${DIR:-/tmp/cpu-share}"
export OCS_FAIR_POLICY=tokens OCS_LIVE_NAMESPACE=cpu-share OCS_VAR_DIR="$DIR/var" OCS_ENV=development
unset DATABASE_URL REDIS_URL
mkdir -p "$DIR/var"
.venv/bin/python manage.py demo --workers 1 --slots 4 --context 4096 --port 8620 >"$DIR/demo.log" 2>&1 &
DEMO=$!
until grep -q "OCS Intelligence is up" "$DIR/demo.log"; do sleep 0.5; done
snap() {
    for p in /proc/[0-9]*; do
        [ -r "$p/stat" ] || continue
        echo "${p#/proc/}|$(awk '{print $14+$15}' "$p/stat" 2>/dev/null)|$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-80)"
    done
}
snap >"$DIR/before.txt"
T0=$(date +%s.%N)
.venv/bin/python manage.py class_replay --base-url http://127.0.0.1:8620/v1 --mix agent:3,claude:1,codex:1,chat:2,burst:1 \
    --duration 180 --scale 0.03 --seed 1 --policy tokens --label cpu-share --json "$DIR/replay.json" >"$DIR/replay.txt" 2>&1 &
REPLAY=$!
sleep 5
snap >"$DIR/during.txt"  # the replay's own process, which is gone by the end
wait "$REPLAY"
snap >"$DIR/after.txt"
T1=$(date +%s.%N)
kill -TERM "$DEMO"; wait "$DEMO" || true
python3 - "$DIR" "$T0" "$T1" <<'PY'
import collections, sys
def load(path):
    rows = {}
    for line in open(path):
        pid, ticks, cmd = line.rstrip("\n").split("|", 2)
        if ticks:
            rows[pid] = (int(ticks), cmd)
    return rows
directory, wall = sys.argv[1], float(sys.argv[3]) - float(sys.argv[2])
before, during, after = (load(f"{directory}/{name}.txt") for name in ("before", "during", "after"))
kinds = (("llama-server", "llama-server"), ("class_replay", "class replay (its first 5 s)"),
         ("ocsweb.ga", "gateway"), ("qcluster", "task cluster"), ("fleet_monitor", "monitor"), ("manage.py demo", "demo"))
def kind(cmd):
    return next((label for key, label in kinds if key in cmd), "other")
total = collections.Counter()
for pid, (ticks, cmd) in after.items():
    total[kind(cmd)] += ticks - before.get(pid, (0, ""))[0]
for pid, (ticks, cmd) in during.items():
    if pid not in after and "class_replay" in cmd:
        total[kind(cmd)] += ticks
print(f"one 1x4 class replay, {wall:.0f} s wall")
for label, ticks in total.most_common():
    print(f"  {label:30s} {ticks / 100:7.1f} s CPU  {ticks / 100 / wall:5.2f} cores")
PY
