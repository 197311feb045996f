"""After the sixteenth pass: how many prompts each step of llama-server's loop carried, measured in
a worker's trace log and simulated from the pass's plan, and how long the slot file tasks took in
the loop (the seventeenth pass, docs/research/planner-validation.md).

- Steps carrying prompt chunks, by (prompts in the step, slots decoding beside them): from the log
  (step_timing.parse) and from one simulated run of the plan without jitter at the speed given,
  once with slot file tasks free (the simulator before this pass) and once at the plan's own cost
  (or at --save-us / --restore-us microseconds per token).
- Slot file tasks in the log: each task runs between `processing task, id = N` and `sending result
  for task id = N`; a restore names its size (`cell_count = C`); a task with nothing else in
  between is a save (whose size the log does not give).

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/loop_log.py \\
        <plan.json> <the replay's worker log, LLAMA_ARG_LOG_VERBOSITY=5> --speed 1.033 [--save-us 22 --restore-us 2.4]
"""
import argparse
import collections
import json
import os
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
sys.path.insert(0, str(Path(__file__).parent))
import django  # noqa: E402

django.setup()
import step_timing  # noqa: E402
from research.planner import sim as S  # noqa: E402
from research.planner.plan import plan_from_report, predict  # noqa: E402

PROCESSING = re.compile(r"processing task, id = (\d+)")
SENT = re.compile(r"sending result for task id = (\d+)")
CELLS = re.compile(r"cell_count = (\d+)")
NOT_A_FILE = ("n_idle_slots", "launch_slot", "decline", "get_availabl", "update slots")


def composition(steps: list[tuple[int, int]]) -> str:
    """`steps`: (prompts, decoders) of each step carrying prompts."""
    by_prompts = collections.Counter(p for p, _ in steps)
    pairs = collections.Counter(steps)
    return (f"{len(steps)} steps carrying prompts; by prompts in the step: "
            + ", ".join(f"{k}: {v}" for k, v in sorted(by_prompts.items()))
            + "\n    (prompts, decoding beside them): " + ", ".join(f"{k}: {v}" for k, v in sorted(pairs.items())))


def simulated(plan, cost) -> tuple[list[tuple[int, int]], dict]:  # noqa: ANN001
    steps: list[tuple[int, int]] = []
    original = S.Simulation._begin_step

    def begin_step(self, worker):  # noqa: ANN001, ANN202
        original(self, worker)
        if worker.stepping and worker.step:
            prompts = sum(1 for _request, chunk in worker.step if chunk)
            if prompts:
                steps.append((prompts, len(worker.step) - prompts))

    S.Simulation._begin_step = begin_step
    try:
        return steps, predict(plan, cost)
    finally:
        S.Simulation._begin_step = original


def file_tasks(lines: list[str]) -> tuple[list[tuple[float, int]], list[float]]:
    restores, saves = [], []
    for index, line in enumerate(lines):
        match = PROCESSING.search(line)
        if not match:
            continue
        task, began, cells, other = match.group(1), step_timing.seconds(line), None, False
        for later in lines[index + 1:index + 10]:
            if (found := CELLS.search(later)):
                cells = int(found.group(1))
            other = other or any(mark in later for mark in NOT_A_FILE)
            sent = SENT.search(later)
            if sent and sent.group(1) == task:
                seconds = step_timing.seconds(later) - began
                if cells:
                    restores.append((seconds, cells))
                elif not other:
                    saves.append(seconds)
                break
    return restores, saves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("log", type=Path)
    parser.add_argument("--speed", type=float, required=True, help="the load factor to simulate at (the replay's)")
    parser.add_argument("--save-us", type=float)
    parser.add_argument("--restore-us", type=float)
    args = parser.parse_args()
    plan, cost = plan_from_report(json.loads(args.plan.read_text())["rows"][0]["report"], replicates=1)
    cost = replace(cost, jitter=0.0, load_factor=args.speed)
    if args.save_us is not None:
        cost = replace(cost, slot_save_s_per_token=args.save_us / 1e6)
    if args.restore_us is not None:
        cost = replace(cost, slot_restore_s_per_token=args.restore_us / 1e6)
    lines = args.log.read_text(errors="replace").splitlines()
    measured = [(sum(1 for _s, tokens, _c in s.chunks if tokens > 0), len(s.decoding))
                for s in step_timing.parse(lines)]
    print(f"measured ({args.log.name}): " + composition([m for m in measured if m[0]]))
    free = replace(cost, slot_save_s_per_token=0.0, slot_restore_s_per_token=0.0)
    for title, model in (("simulated, slot files free", free),
                         (f"simulated, save {cost.slot_save_s_per_token * 1e6:.1f} us and restore "
                          f"{cost.slot_restore_s_per_token * 1e6:.1f} us a token", cost)):
        steps, result = simulated(plan, model)
        print(f"{title}: " + composition(steps))
        print(f"    TTFT agent p50 {result['agents']['ttft_ms']['p50'] / 1000:.2f} s, p95 "
              f"{result['agents']['ttft_ms']['p95'] / 1000:.2f} s; chat p50 "
              f"{result['per_persona']['chat']['ttft_ms']['p50'] / 1000:.2f} s, p95 "
              f"{result['per_persona']['chat']['ttft_ms']['p95'] / 1000:.2f} s")
    restores, saves = file_tasks(lines)
    if restores:
        rates = sorted(seconds / cells for seconds, cells in restores)
        print(f"restores in the log: {len(restores)}, {statistics.median(c for _s, c in restores):.0f} tokens and "
              f"{statistics.median(s for s, _c in restores) * 1000:.2f} ms at the median, "
              f"{statistics.median(rates) * 1e6:.2f} us a token (p90 {rates[int(0.9 * (len(rates) - 1))] * 1e6:.2f})")
    if saves:
        saves.sort()
        print(f"saves in the log: {len(saves)}, {statistics.median(saves) * 1000:.2f} ms at the median "
              f"(p90 {saves[int(0.9 * (len(saves) - 1))] * 1000:.2f} ms)")


if __name__ == "__main__":
    main()
