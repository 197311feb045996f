"""The nineteenth pass's predictions again with the load factor at 1 (the benches' speed) and/or
the jitter at the eighteenth pass's 2.1 %: which of the day's two differences moved the medians.

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/load_factor_19.py \
        > docs/research/planner-validation/load-factor-19.txt
"""
import json
from dataclasses import replace
from pathlib import Path

from research.planner.plan import plan_from_report, predict

HERE = Path(__file__).parent
for cfg in ("2x4", "1x4", "1x2"):
    saved = json.loads((HERE / cfg / "plan-19.json").read_text())["rows"][0]["report"]
    plan, cost = plan_from_report(saved)
    for label, c in (("as predicted", cost), ("jitter 2%", replace(cost, jitter=0.021)),
                     ("load 1.0", replace(cost, load_factor=1.0)),
                     ("both", replace(cost, jitter=0.021, load_factor=1.0))):
        r = predict(plan, c)
        pp = r["per_persona"]
        print(cfg, f"{label:13}", "agent p50/p95 %.2f %.2f chat p50/p95 %.2f %.2f" % (
            r["agents"]["ttft_ms"]["p50"] / 1000, r["agents"]["ttft_ms"]["p95"] / 1000,
            pp["chat"]["ttft_ms"]["p50"] / 1000, pp["chat"]["ttft_ms"]["p95"] / 1000), flush=True)
