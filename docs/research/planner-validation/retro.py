"""Yesterday's calibrations, judged with today's model (docs/research/planner-validation.md,
"Fourth pass"). The costs are those fitted on 2026-12-03 from each configuration's bench runs,
before its four replays (plan-3.json), so the machine state they describe is the replays'; what
changes is the model: tool calls not counted (SmolLM2's template drops them), slot file tasks at
step boundaries, and the mean of 8 replicates with a 10 % jitter (this pass's benches measured
8-12 %). Prints, per configuration, the prediction and its ratio to the mean of the four runs:

    PYTHONPATH=. .venv/bin/python docs/research/planner-validation/retro.py > docs/research/planner-validation/retro.txt

retro.txt is its output with the simulator of commit f606b5a; retro-5.txt with the fifth pass's
(a slot holds its answer less the last token sampled; these calibrations have no small-chunk term).
"""
import dataclasses
import json
import statistics
import sys
from pathlib import Path

exec((Path(__file__).parent / "sensitivity.py").read_text().split("for config, (workers")[0])  # setup, cost(), fleet()
JITTER = float(sys.argv[1]) if len(sys.argv) > 1 else 0.10
def measured(config):
    out = []
    for i in (1, 2, 3, 4):
        r = json.loads((HERE / config / f"replay-3-{i}.json").read_text())
        out.append((r["agents"]["ttft_ms"]["p50"], r["agents"]["ttft_ms"]["p95"], r["per_persona"]["chat"]["ttft_ms"]["p50"], r["per_persona"]["chat"]["ttft_ms"]["p95"], r["completed"]))
    return [statistics.fmean(x[k] for x in out) for k in range(5)]
for config, (workers, slots, context) in {"1x4": (1, 4, 4096), "2x2": (2, 2, 4096), "2x4": (2, 4, 2048)}.items():
    base = cost(config)
    tokens = dataclasses.replace(base.tokens, renders_tool_calls=False)
    m = measured(config)
    for label, model, reps in (("calls counted (as then), one run", base, 1),
                               ("calls dropped, one run", dataclasses.replace(base, tokens=tokens), 1),
                               (f"calls dropped, 8 runs, jitter {JITTER:.0%}", dataclasses.replace(base, tokens=tokens, jitter=JITTER), 8)):
        plan = ClassPlan(mix=MIX, fleet=fleet(workers, slots, context), seed=1, scale=0.03, replicates=reps)
        r = predict(plan, model)
        p = (r["agents"]["ttft_ms"]["p50"], r["agents"]["ttft_ms"]["p95"], r["per_persona"]["chat"]["ttft_ms"]["p50"], r["per_persona"]["chat"]["ttft_ms"]["p95"], r["completed"])
        ratios = [a / b for a, b in zip(p, m)]
        ok = sum(1 for x in ratios[:4] if 0.75 <= x <= 1.25)
        print(f"{config} {label:40s} turns {p[4]:4d}/{m[4]:.0f}  agent p50 {p[0]/1000:.2f} p95 {p[1]/1000:.2f}  chat p50 {p[2]/1000:.2f} p95 {p[3]/1000:.2f}  ratios " + " ".join(f"{x:.2f}" for x in ratios[:4]) + f"  held {ok}/4", flush=True)
    print(f"{config} measured mean of 4 runs: agent p50 {m[0]/1000:.2f} p95 {m[1]/1000:.2f} chat p50 {m[2]/1000:.2f} p95 {m[3]/1000:.2f}")
