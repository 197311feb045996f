"""How much the planner's tails move with the cost model (docs/research/planner-validation.md,
"Four runs, and how sensitive the tails are"). Re-runs the committed predictions of 2x2 and 2x4
with their own fitted costs and with 1x4's (one worker benched alone, nothing beside it):

    PYTHONPATH=. .venv/bin/python docs/research/planner-validation/sensitivity.py
"""
import json
import os
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
django.setup()

from django.conf import settings  # noqa: E402

from research.class_personas import parse_mix  # noqa: E402
from research.planner.cost import CostModel  # noqa: E402
from research.planner.plan import ClassPlan, predict  # noqa: E402
from research.planner.sim import FleetPlan  # noqa: E402

HERE = Path(__file__).parent
MIX = parse_mix("agent:3,claude:1,codex:1,chat:2,burst:1")


def cost(config: str) -> CostModel:
    plan = json.loads((HERE / config / "plan-3.json").read_text())
    return CostModel.from_dict(plan["rows"][0]["report"]["prediction"]["cost_model"])


def fleet(workers: int, slots: int, context: int) -> FleetPlan:
    o = settings.OCS
    return FleetPlan(workers=workers, slots=slots, context_tokens=context, duration_s=180, policy="tokens",
                     max_wait_s=o["QUEUE_MAX_WAIT_S"], slot_lease_s=o["SLOT_LEASE_S"],
                     affinity_ttl_s=o["AFFINITY_TTL_S"], slot_files=o["SLOT_FILES"],
                     light_lane_tokens=o["LIGHT_LANE_TOKENS"], affinity_wait_s=o["AFFINITY_WAIT_S"],
                     affinity_wait_tokens=o["AFFINITY_WAIT_TOKENS"])


for config, (workers, slots, context) in {"2x2": (2, 2, 4096), "2x4": (2, 4, 2048)}.items():
    plan = ClassPlan(mix=MIX, fleet=fleet(workers, slots, context), seed=1, scale=0.03)
    for label, model in ((f"{config}'s own costs", cost(config)), ("1x4's costs", cost("1x4"))):
        r = predict(plan, model)
        chat = r["per_persona"]["chat"]["ttft_ms"]
        print(f"{config} with {label:16s} turns {r['completed']:4d}  agent TTFT p50 "
              f"{r['agents']['ttft_ms']['p50'] / 1000:.2f} p95 {r['agents']['ttft_ms']['p95'] / 1000:.2f} s  "
              f"chat p50 {chat['p50'] / 1000:.2f} p95 {chat['p95'] / 1000:.2f} s  hit rate {r['cache_hit_rate']:.3f}")
