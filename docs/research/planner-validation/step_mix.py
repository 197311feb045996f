"""After the sixteenth pass: what the simulated worker's loop does, iteration by iteration, beside
what the real one did (step_timing.py's table of the same kinds, <config>/steps-<tag>-N.txt): how
many steps of each kind (decodes only, prompt chunks with or without decodes) and the seconds
they took. One simulated run without jitter, at a speed given (the replays' measured one).

`--extra-ms M` adds to every request's way into the loop a random delay (exponential, mean M ms,
seeded): do the simulated steps stop moving in lockstep when requests reach the loop one by one,
as they reach a real llama-server?

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/step_mix.py 1x4 16 --speed 1.076
    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/step_mix.py 1x4 16 --speed 1.076 --extra-ms 100
"""
import argparse
import collections
import json
import os
import random
import re
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django  # noqa: E402

django.setup()
from research.planner import sim as S  # noqa: E402
from research.planner.plan import plan_from_report, predict  # noqa: E402

HERE = Path(__file__).parent
WORKER = re.compile(r"^(\S+\.log): \d+ iterations")
ROW = re.compile(r"^  (decode \d+(?: \+ chunks)?|chunks only|all)\s+(\d+)\s+([\d.]+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("tag")
    parser.add_argument("--speed", type=float, help="the load factor to simulate at (default: the plan's own)")
    parser.add_argument("--extra-ms", type=float, default=0.0)
    parser.add_argument("--save-us", type=float, default=None,
                        help="a slot file save's microseconds per token in the loop (default: the plan's own)")
    parser.add_argument("--restore-us", type=float, default=None, help="the same for a restore")
    args = parser.parse_args()
    report = json.loads((HERE / args.config / f"plan-{args.tag}.json").read_text())["rows"][0]["report"]
    plan, cost = plan_from_report(report, replicates=1)
    cost = replace(cost, jitter=0.0, **({"load_factor": args.speed} if args.speed else {}))
    if args.save_us is not None:
        cost = replace(cost, slot_save_s_per_token=args.save_us / 1e6)
    if args.restore_us is not None:
        cost = replace(cost, slot_restore_s_per_token=args.restore_us / 1e6)

    tally: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    original_begin = S.Simulation._begin_step

    def begin_step(self, worker):  # noqa: ANN001, ANN202
        original_begin(self, worker)
        if worker.stepping and worker.step:
            decodes = sum(1 for _request, chunk in worker.step if not chunk)
            chunks = len(worker.step) - decodes
            kind = "chunks only" if not decodes else f"decode {decodes}" + (" + chunks" if chunks else "")
            tally[kind][0] += 1
            tally[kind][1] += worker.work_left / worker.rate  # at the rate it began with

    rng = random.Random(0)

    def send_prompt(self, request, worker):  # noqa: ANN001, ANN202
        extra = rng.expovariate(1000 / args.extra_ms) if args.extra_ms else 0.0
        self._at(self.now + worker.cost.overhead_s + extra, "loop", request)

    S.Simulation._begin_step, S.Simulation._send_prompt = begin_step, send_prompt
    result = predict(plan, cost)
    steps = sum(int(count) for count, _seconds in tally.values())
    print(f"{args.config}, pass {args.tag}, simulated at x{cost.load_factor:.3f}"
          + (f", +{args.extra_ms:.0f} ms mean on the way into the loop" if args.extra_ms else "")
          + f": {steps} steps, {sum(s for _c, s in tally.values()):.1f} s computing in {result['duration_s']:.1f} s, "
          f"{result['turns']} turns; TTFT agent p50 {result['agents']['ttft_ms']['p50'] / 1000:.2f} s, "
          f"p95 {result['agents']['ttft_ms']['p95'] / 1000:.2f} s, "
          f"chat p50 {result['per_persona']['chat']['ttft_ms']['p50'] / 1000:.2f} s")
    print(f"  {'iteration':<20}{'count':>6}{'seconds':>9}{'s each':>8}")
    for kind in sorted(tally):
        count, seconds = tally[kind]
        print(f"  {kind:<20}{int(count):>6}{seconds:>9.1f}{seconds / count:>8.2f}")
    for path in sorted((HERE / args.config).glob(f"steps-{args.tag}-*.txt")):
        print(f"measured, {path.name} (count, passes s):")
        taking = False  # each worker's first table (its steps against the model with contention)
        for line in path.read_text().splitlines():
            worker = WORKER.match(line)
            if worker:
                taking = True
                print(f" {worker.group(1)}")
            elif line.strip().startswith("the same against the model alone"):
                taking = False
            row = ROW.match(line)
            if row and taking:
                kind, count, seconds = row.group(1), int(row.group(2)), float(row.group(3))
                print(f"  {kind:<20}{count:>6}{seconds:>9.1f}{seconds / count:>8.2f}")


if __name__ == "__main__":
    main()
