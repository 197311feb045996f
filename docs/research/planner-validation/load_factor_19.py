"""The nineteenth pass's predictions again, changed in one respect each: the jitter at the
eighteenth pass's 2.1 %, the load factor at 1 (the benches' speed), both, and a load factor per
kind of step read from the configuration's warm-up (warmup-steps-19.txt, each worker's first
table: decode-only iterations and iterations carrying prompt chunks apart; the request overhead
keeps the single factor). Which of the day's differences moved the medians.

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/load_factor_19.py \
        > docs/research/planner-validation/load-factor-19.txt
"""
import json
import re
from dataclasses import replace
from pathlib import Path

from research.planner import cost as costmod
from research.planner.plan import plan_from_report, predict

HERE = Path(__file__).parent
ROW = re.compile(r"\s+(decode \d+(?: \+ chunks)?|chunks only)\s+\d+\s+([\d.]+)\s+([\d.]+)")


def kind_factors(cfg: str) -> tuple[float, float]:
    """Measured over modelled seconds of the warm-up's decode-only and prompt-carrying iterations."""
    decode, chunks = [0.0, 0.0], [0.0, 0.0]
    for block in (HERE / cfg / "warmup-steps-19.txt").read_text().split("\n\n"):
        if "the model with contention" not in block:
            continue
        for line in block.split("the same against")[0].splitlines():
            match = ROW.match(line)
            if match:
                into = chunks if "chunks" in match.group(1) else decode
                into[0] += float(match.group(2))
                into[1] += float(match.group(3))
    return decode[0] / decode[1], chunks[0] / chunks[1]


def figures(report: dict) -> str:
    chat = report["per_persona"]["chat"]["ttft_ms"]
    return "agent p50/p95 %.2f %.2f chat p50/p95 %.2f %.2f" % (
        report["agents"]["ttft_ms"]["p50"] / 1000, report["agents"]["ttft_ms"]["p95"] / 1000,
        chat["p50"] / 1000, chat["p95"] / 1000)


def per_kind(plan, cost, decode: float, chunks: float) -> dict:
    """`predict` with each step slowed by its kind's factor (the cost model has one factor)."""
    plain = costmod.CostModel.step_s

    def step_s(self, batch, *, streams, cache_type=None):
        factor = chunks if any(not piece.decode for piece in batch) else decode
        return factor * plain(self, batch, streams=streams, cache_type=cache_type)

    costmod.CostModel.step_s = step_s
    try:
        return predict(plan, replace(cost, load_factor=1.0,
                                     request_overhead_s=cost.request_overhead_s * cost.load_factor))
    finally:
        costmod.CostModel.step_s = plain


for cfg in ("2x4", "1x4", "1x2"):
    saved = json.loads((HERE / cfg / "plan-19.json").read_text())["rows"][0]["report"]
    plan, cost = plan_from_report(saved)
    for label, c in (("as predicted", cost), ("jitter 2%", replace(cost, jitter=0.021)),
                     ("load 1.0", replace(cost, load_factor=1.0)),
                     ("both", replace(cost, jitter=0.021, load_factor=1.0))):
        print(cfg, f"{label:13}", figures(predict(plan, c)), flush=True)
    decode, chunks = kind_factors(cfg)
    print(cfg, f"{'per kind':13}", figures(per_kind(plan, cost, decode, chunks)),
          f"(decode x{decode:.3f}, chunks x{chunks:.3f}, one factor x{cost.load_factor:.3f})", flush=True)
