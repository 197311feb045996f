"""After the tenth pass: would a cost the simulator leaves out of llama-server's loop explain why
1x4 ranks behind 2x4 in the runs? Re-predicts the pass's three configurations from their committed
plan-10.json cost models with one such cost added (docs/research/planner-validation.md, "Tenth
pass"), both taken at the sizes measured:

- `stall S`: each slot-file task (a handover's save or restore) stalls its worker's loop for S
  seconds (measured 3-37 ms each, slot-file-io.txt; the simulator takes them as free);
- `pass S`: every forward pass of every step costs S seconds more (a graph rebuilt each time its
  shape changes; pass_s charges only the passes after a step's first).

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/retro_loop.py

Written against the simulator as it was until the seventeenth pass (commit 0dff6ce): since then a
slot file task's time is in the simulator itself (CostModel.slot_save_s_per_token and
slot_restore_s_per_token, run in the loop between steps and one after the other on an idle worker),
and the function this script patched is gone; rerun it on that commit.
"""
import json, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django; django.setup()
from research.planner import sim as S
from research.planner.cost import CostModel, ubatches
from research.planner.plan import plan_from_report, predict

BASE = "docs/research/planner-validation"
if not hasattr(S.Simulation, "_slot_tasks_at_boundary"):
    raise SystemExit("retro_loop.py patches the simulator of the tenth pass: git checkout 0dff6ce to rerun it")
original_boundary, original_step = S.Simulation._slot_tasks_at_boundary, CostModel.step_s
added = {"stall": 0.0, "pass": 0.0}


def at_boundary(self, worker):
    tasks = len(worker.slot_tasks) if worker.stepping else 0
    original_boundary(self, worker)
    if tasks and worker.stepping and added["stall"] > 0:  # the tasks ran before the step just begun
        worker.work_left += added["stall"] * tasks
        worker.version += 1
        self._at(worker.since + worker.work_left / worker.rate, "step", (worker, worker.version))


def step_s(self, batch, *, streams, cache_type=None):
    passes = len(ubatches(batch, ubatch_tokens=self.ubatch_tokens, streams=streams))
    return original_step(self, batch, streams=streams, cache_type=cache_type) + added["pass"] * passes


S.Simulation._slot_tasks_at_boundary = at_boundary
CostModel.step_s = step_s
print("agent TTFT p95 (s) predicted from the tenth pass's calibrations; measured 1x4 2.25-2.26, "
      "2x2 2.26-2.81, 2x4 2.04-2.07")
for kind, value in (("none", 0.0), ("stall", 0.015), ("stall", 0.030), ("pass", 0.003), ("pass", 0.006)):
    added.update({"stall": 0.0, "pass": 0.0})
    if kind != "none":
        added[kind] = value
    row = []
    for cfg in ("1x4", "2x2", "2x4"):
        plan, cost = plan_from_report(json.load(open(f"{BASE}/{cfg}/plan-10.json"))["rows"][0]["report"])
        row.append(f"{cfg} {predict(plan, cost)['agents']['ttft_ms']['p95'] / 1000:.2f}")
    print(f"  {kind:5s} {value * 1000:4.0f} ms: " + ", ".join(row))
