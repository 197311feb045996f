"""After the fourteenth pass: is the fitted request overhead partly compute? The benches show
what happens outside llama-server's loop directly: a request's TTFT less the server's own prompt
time (`timings`) is 5-7 ms in every configuration (pass 14's bench samples), while the prompt
line's fitted intercept came out 36 ms (1x4), 23 ms (2x2) and 8 ms (2x4). Here each committed
prediction is simulated again with the intercept split: OUTSIDE seconds before the loop, the rest
charged as compute in every step that carries a prompt chunk (so it occupies the worker in a
class, as compute would). Judged against the pass's own replays with the project's check.
(docs/research/planner-validation.md, "Fourteenth pass"; result: retro-overhead.txt.)

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/retro_overhead.py 14,13,12
"""
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django; django.setup()
from dataclasses import replace
from pathlib import Path
from research.planner.cost import CostModel
from research.planner.plan import plan_from_report, predict
from research.planner.compare import compare_reports, rank_configurations
HERE = Path(__file__).parent
START = {"s": 0.0}
orig = CostModel.step_s
def step_s(self, batch, *, streams, cache_type=None):
    prompts = sum(1 for p in batch if not p.decode)
    return orig(self, batch, streams=streams, cache_type=cache_type) + self.load_factor * START["s"] * prompts
CostModel.step_s = step_s
OUTSIDE = float(sys.argv[2]) if len(sys.argv) > 2 else 0.006
for tag in sys.argv[1].split(","):
    for variant in ("as predicted", "split"):
        comps = []
        for cfg in ("1x4", "2x2", "2x4"):
            plan, cost = plan_from_report(json.loads((HERE / cfg / f"plan-{tag}.json").read_text())["rows"][0]["report"], replicates=8)
            if variant == "split":
                START["s"] = max(cost.request_overhead_s - OUTSIDE, 0.0)
                cost = replace(cost, request_overhead_s=min(OUTSIDE, cost.request_overhead_s))
            else:
                START["s"] = 0.0
            replays = [json.loads(p.read_text()) for p in sorted((HERE / cfg).glob(f"replay-{tag}-*.json"))]
            comps.append(compare_reports(predict(plan, cost), replays, label=cfg))
        print(f"pass {tag} {variant}:")
        for c in comps:
            print("  ", c.label, "  ".join(f"{f.name} {f.predicted_ms/1000:.2f}/{(f.mean_ms or 0)/1000:.2f} {'ok' if f.holds else 'OUT'}" for f in c.figures))
        r = rank_configurations(comps)
        print("   ranking predicted", r.predicted, "measured", r.measured, "held", sum(f.holds for c in comps for f in c.figures), "contradicted", r.contradicted)
