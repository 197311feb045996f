"""The nineteenth pass predicted again with a load factor per kind of step, read from each
configuration's warm-up (warmup-steps-19.txt, the first worker table: decode-only iterations and
iterations carrying prompt chunks apart), the request overhead at the single factor. Tests the
explanation that the single factor over-predicts medians by slowing decode steps as much as prompt
steps: it does not hold (the medians barely move).

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/load_factor_kinds_19.py \
        > docs/research/planner-validation/load-factor-kinds-19.txt
"""
import json, re, sys
from dataclasses import replace
from pathlib import Path
from research.planner import cost as costmod
from research.planner.plan import plan_from_report, predict
D = Path("docs/research/planner-validation")
def factors(cfg):
    text = (D / cfg / "warmup-steps-19.txt").read_text()
    dec = [0.0, 0.0]; chk = [0.0, 0.0]
    for block in text.split("\n\n"):
        if "the model with contention" not in block: continue
        for line in block.splitlines():
            m = re.match(r"\s+(decode \d+|decode \d+ \+ chunks|chunks only)\s+\d+\s+([\d.]+)\s+([\d.]+)", line)
            if not m: continue
            if "the same against" in line: break
            tgt = chk if "chunks" in m.group(1) else dec
            tgt[0] += float(m.group(2)); tgt[1] += float(m.group(3))
            if m.group(1) == "chunks only": pass
        # only the first table of each worker block
    return dec[0] / dec[1], chk[0] / chk[1]
orig = costmod.CostModel.step_s
for cfg in ("2x4", "1x4", "1x2"):
    fd, fc = factors(cfg)
    saved = json.loads((D / cfg / f"plan-19.json").read_text())["rows"][0]["report"]
    plan, cost = plan_from_report(saved)
    base = replace(cost, load_factor=1.0)
    def step_s(self, batch, *, streams, cache_type=None, _fd=fd, _fc=fc):
        f = _fc if any(not p.decode for p in batch) else _fd
        return f * orig(self, batch, streams=streams, cache_type=cache_type)
    costmod.CostModel.step_s = step_s
    r = predict(plan, replace(base, request_overhead_s=cost.request_overhead_s * cost.load_factor))
    costmod.CostModel.step_s = orig
    pp = r["per_persona"]
    print(cfg, f"decode x{fd:.3f} chunks x{fc:.3f} (one factor x{cost.load_factor:.3f}):",
          "agent p50/p95 %.2f %.2f chat p50/p95 %.2f %.2f" % (r["agents"]["ttft_ms"]["p50"]/1000, r["agents"]["ttft_ms"]["p95"]/1000,
          pp["chat"]["ttft_ms"]["p50"]/1000, pp["chat"]["ttft_ms"]["p95"]/1000), flush=True)
