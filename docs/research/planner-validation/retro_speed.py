"""After the eleventh pass: is the ranking miss in the simulator, or in the speed the machine ran at
(docs/research/planner-validation.md, "Eleventh pass")? Two experiments on a pass's committed
predictions (<config>/plan-<tag>.json, their own cost models):

- `--slowdowns`: every step's cost times k for every configuration (k 1.00 to 1.20), and a speed
  that moves over time (every 15 or 30 s a factor drawn log-normal around k, the same draws for
  every configuration): does a machine that runs slower than in its benches, steadily or in spells,
  move 1x4 and 2x4 apart?
- by default: each configuration re-timed at the speed its workers ran during its replays (the mean
  over its replays of step_timing.py's last line, <config>/steps-<tag>-N.txt), then judged against
  those replays with the project's own check and ranking (research.planner.compare).

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/retro_speed.py 11
    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/retro_speed.py 10 --slowdowns
    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/retro_speed.py 16 --configs 2x4,1x4,1x2
"""
import argparse
import itertools
import json
import math
import os
import random
import re
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django  # noqa: E402

django.setup()
from research.planner import sim as S  # noqa: E402
from research.planner.compare import compare_reports, rank_configurations  # noqa: E402
from research.planner.cost import CostModel  # noqa: E402
from research.planner.plan import plan_from_report, predict  # noqa: E402

HERE = Path(__file__).parent
CONFIGS = ["1x4", "2x2", "2x4"]  # --configs: another pass's set
SPEED = re.compile(r"speed in this run against the calibration: x([0-9.]+)")


def slower(model: CostModel, k: float) -> CostModel:
    """Every step and the request overhead at k times the benches' time (a plan's own load factor,
    if it had one, replaced: step_timing.py's speeds are against the benches)."""
    return replace(model, load_factor=k)


def predicted(config: str, tag: str, k: float | None = None, replicates: int = 16) -> dict:
    report = json.loads((HERE / config / f"plan-{tag}.json").read_text())["rows"][0]["report"]
    plan, model = plan_from_report(report, replicates=replicates)
    return predict(plan, model if k is None else slower(model, k))  # None: as the plan had it


# A speed that moves over time: the step's cost times the factor of the spell the simulated clock is in.
spells = {"mean": 1.0, "sd": 0.0, "window": 15.0, "draws": itertools.count(), "now": 0.0, "path": None}
original_begin, original_step = S.Simulation._begin_step, CostModel.step_s


def begin_step(self, worker):
    if getattr(self, "_speed_path", None) is None:
        rng = random.Random(next(spells["draws"]))
        sigma = math.sqrt(math.log(1 + spells["sd"] ** 2))
        self._speed_path = [spells["mean"] * math.exp(rng.gauss(-sigma * sigma / 2, sigma)) for _ in range(400)]
    spells["now"], spells["path"] = self.now, self._speed_path
    return original_begin(self, worker)


def step_s(self, batch, *, streams, cache_type=None):
    factor = spells["path"][int(spells["now"] // spells["window"])] if spells["path"] else 1.0
    return original_step(self, batch, streams=streams, cache_type=cache_type) * factor


def slowdowns(tag: str) -> None:
    print(f"agent TTFT p95 (s) predicted from pass {tag}'s calibrations, the machine slower than in their benches")
    for k in (1.0, 1.05, 1.10, 1.15, 1.20):
        print(f"  steadily x{k:.2f}: " + ", ".join(
            f"{c} {predicted(c, tag, k)['agents']['ttft_ms']['p95'] / 1000:.2f}" for c in CONFIGS), flush=True)
    S.Simulation._begin_step, CostModel.step_s = begin_step, step_s
    try:
        for mean, sd, window in ((1.0, 0.12, 15), (1.15, 0.12, 15), (1.15, 0.12, 30), (1.15, 0.20, 15)):
            row = []
            for config in CONFIGS:
                spells.update(mean=mean, sd=sd, window=window, draws=itertools.count())  # the same draws for each
                row.append(f"{config} {predicted(config, tag)['agents']['ttft_ms']['p95'] / 1000:.2f}")
            print(f"  in spells of {window} s, x{mean:.2f} with SD {sd:.2f}: " + ", ".join(row), flush=True)
    finally:
        S.Simulation._begin_step, CostModel.step_s = original_begin, original_step


def at_measured_speed(tag: str) -> None:
    comparisons = []
    for config in CONFIGS:
        speeds = [float(SPEED.search(path.read_text()).group(1))
                  for path in sorted((HERE / config).glob(f"steps-{tag}-*.txt"))]
        replays = [json.loads(path.read_text()) for path in sorted((HERE / config).glob(f"replay-{tag}-*.json"))]
        if not speeds or not replays:
            print(f"{config}: no steps-{tag}-N.txt or replay-{tag}-N.json")
            continue
        k = sum(speeds) / len(speeds)
        for label, factor in ((f"{config} as predicted", None), (f"{config} at x{k:.3f}", k)):
            comparison = compare_reports(predicted(config, tag, factor), replays, label=label)
            print(f"{label} (speeds in its replays: {', '.join(f'x{s:.3f}' for s in speeds)})")
            for figure in comparison.figures:
                runs = " / ".join(f"{v / 1000:.2f}" for v in figure.measured_ms if v is not None)
                ratio = f"{figure.ratio:.2f}" if figure.ratio is not None else "-"
                print(f"  {figure.name:<16}{(figure.predicted_ms or 0) / 1000:6.2f} s against {runs} s, "
                      f"ratio {ratio}: {figure.verdict_text()}")
            if factor is not None:
                comparisons.append(replace(comparison, label=config))
    if len(comparisons) > 1:
        ranking = rank_configurations(comparisons)
        print(f"ranking by {ranking.figure}, re-timed: predicted {' < '.join(ranking.predicted)}; "
              f"measured {' < '.join(ranking.measured)}" + ("" if ranking.same else " (differs)")
              + "".join(f"; {a} and {b} overlap in the runs" for a, b in ranking.unresolved))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tag", help="the pass: its files are <config>/plan-<tag>.json and so on")
    parser.add_argument("--slowdowns", action="store_true")
    parser.add_argument("--configs", help="the pass's configurations, comma-separated (default 1x4,2x2,2x4)")
    args = parser.parse_args()
    if args.configs:
        CONFIGS[:] = args.configs.split(",")
    slowdowns(args.tag) if args.slowdowns else at_measured_speed(args.tag)
