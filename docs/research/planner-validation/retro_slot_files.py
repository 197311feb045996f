"""After the sixteenth pass: its three configurations re-predicted from their committed plans
(plan-16.json, each at its own load factor) with a slot file task's time in the loop, at sizes
around what was measured in the seventeenth (calibrate_worker --slot-files: save 22 us, restore
2.4 us a token; a 1x4 replay's trace log: restores 3.9 us a token at the median), beside the runs.

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/retro_slot_files.py
"""
import glob
import json
import os
from dataclasses import replace

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django  # noqa: E402

django.setup()
from research.planner.plan import plan_from_report, predict  # noqa: E402

BASE = "docs/research/planner-validation"
SIZES = ((0, 0), (10, 2), (20, 5), (40, 10))  # save, restore: microseconds a token


def figures(report: dict) -> list[float]:
    return [report["agents"]["ttft_ms"]["p50"], report["agents"]["ttft_ms"]["p95"],
            report["per_persona"]["chat"]["ttft_ms"]["p50"], report["per_persona"]["chat"]["ttft_ms"]["p95"]]


print("TTFT seconds: agent p50, agent p95, chat p50, chat p95")
for config in ("2x4", "1x4", "1x2"):
    runs = [figures(json.load(open(path))) for path in sorted(glob.glob(f"{BASE}/{config}/replay-16-*.json"))]
    print(f"{config}, pass 16 measured ({len(runs)} runs): "
          + "  ".join(f"{min(r[i] for r in runs) / 1000:.2f}-{max(r[i] for r in runs) / 1000:.2f}" for i in range(4)))
    for save, restore in SIZES:
        plan, cost = plan_from_report(json.load(open(f"{BASE}/{config}/plan-16.json"))["rows"][0]["report"])
        cost = replace(cost, slot_save_s_per_token=save / 1e6, slot_restore_s_per_token=restore / 1e6)
        predicted = figures(predict(plan, cost))
        print(f"   save {save:2d} us, restore {restore:2d} us a token: "
              + "  ".join(f"{value / 1000:.2f}" for value in predicted))
