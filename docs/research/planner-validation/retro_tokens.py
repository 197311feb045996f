"""After the runs: the sixth and seventh passes' predictions again, with the prompt tokens counted at
the validation's scale (0.03) instead of calibrate_worker's 0.1 (docs/research/planner-validation.md,
"What is left"). The cost models are the passes' own (plan-6.json, plan-7.json); the token counts
are asked of a llama-server of the demo's model listening on 127.0.0.1:8799 (--jinja):

    llama-server -m SmolLM2-135M-Instruct.Q4_1.gguf --port 8799 --jinja -c 4096 &
    PYTHONPATH=. .venv/bin/python docs/research/planner-validation/retro_tokens.py > docs/research/planner-validation/retro-7.txt
"""
import dataclasses
import json
import os
import statistics
import urllib.request
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django; django.setup()
from research.planner.cost import CostModel
from research.planner.plan import ClassPlan, predict
from research.planner.sim import FleetPlan
from research.planner.tokens import measure_tokens, sample_parts
from research.class_personas import parse_mix
def post(path, body):
    r = urllib.request.Request("http://127.0.0.1:8799" + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r))
def count(msgs):
    return len(post("/tokenize", {"content": post("/apply-template", {"messages": msgs})["prompt"]})["tokens"])
tok03, _ = measure_tokens(count, sample_parts(scale=0.03))
print("tokens at 0.03:", {k: round(v, 2) for k, v in tok03.chars_per_token.items()}, tok03.tokens_per_message, tok03.head_tokens, tok03.head_tokens_no_system)
MIX = parse_mix("agent:3,claude:1,codex:1,chat:2,burst:1")
HERE = os.path.dirname(os.path.abspath(__file__))
for p in ("6", "7"):
    held = {"as predicted": 0, "tokens at 0.03": 0}
    for cfg, (w, s, c) in {"1x4": (1, 4, 4096), "2x2": (2, 2, 4096), "2x4": (2, 4, 2048)}.items():
        plan_file = json.load(open(f"{HERE}/{cfg}/plan-{p}.json"))
        cost = CostModel.from_dict(plan_file["rows"][0]["report"]["prediction"]["cost_model"])
        ms = [json.load(open(f"{HERE}/{cfg}/replay-{p}-{i}.json")) for i in (1, 2)]
        def figs(r):
            return [r["agents"]["ttft_ms"]["p50"], r["agents"]["ttft_ms"]["p95"], r["per_persona"]["chat"]["ttft_ms"]["p50"], r["per_persona"]["chat"]["ttft_ms"]["p95"]]
        m = [statistics.fmean(x) for x in zip(*[figs(r) for r in ms])]
        spread = [(max(x) - min(x)) / statistics.fmean(x) for x in zip(*[figs(r) for r in ms])]
        for label, model in (("as predicted", cost), ("tokens at 0.03", dataclasses.replace(cost, tokens=dataclasses.replace(tok03, renders_tool_calls=cost.tokens.renders_tool_calls)))):
            plan = ClassPlan(mix=MIX, fleet=FleetPlan(workers=w, slots=s, context_tokens=c, duration_s=180.0, policy="tokens"), seed=1, scale=0.03, replicates=8)
            r = predict(plan, model)
            ratios = [a / b for a, b in zip(figs(r), m)]
            ok = sum(abs(x - 1) <= max(0.25, sp) for x, sp in zip(ratios, spread))
            held[label] += ok
            print(f"pass {p} {cfg} {label:15s} ratios " + " ".join(f"{x:.2f}" for x in ratios) + f"  held {ok}/4  turns {r['completed']}/{statistics.fmean(x['completed'] for x in ms):.0f}")
    print("pass", p, held)
