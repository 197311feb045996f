"""After the nineteenth pass: does the simulator put too many prompts into one step of llama-server's
loop, why, and does it matter for the figures item 4 checks? (docs/research/planner-validation.md,
"Twentieth pass".)

1. One measured replay (its workers' trace logs, LLAMA_ARG_LOG_VERBOSITY=5, and its plan.json):
   steps carrying prompts, by how many prompts they carry, and how often a short prompt (at most
   SHORT tokens computed: a question, a burst) has its step to itself; the same counted in the
   simulator (four noisy runs of the plan), as it is and changed in one respect each:
   - `spread`: the request overhead (CostModel.request_overhead_s, one number: 21 ms here) drawn
     per request, log-normal with that mean and a relative spread (0.5, 1.0), instead of the
     same for every request;
   - `before`: three quarters of it spent before the claim (the gateway reads, checks and parses a
     request before it asks for a slot) and a quarter after (to the worker's loop), instead of all
     of it after the claim.
2. The same changes re-predicting the seventeenth to twentieth passes from their
   committed plans, judged against their committed replays by the project's own check
   (research.planner.compare.compare_reports): figures within the bound or the spread, of 12.

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/packing_20.py \\
        <OUT>/2x4/plan.json <VAR_BASE>/2x4/logs > docs/research/planner-validation/packing-20.txt
"""
from __future__ import annotations

import collections
import json
import math
import os
import random
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
sys.path.insert(0, str(Path(__file__).parent))
import django  # noqa: E402

django.setup()
import step_timing  # noqa: E402
from research.planner import plan as planmod  # noqa: E402
from research.planner import sim as S  # noqa: E402
from research.planner.compare import compare_reports  # noqa: E402
from research.planner.plan import plan_from_report, predict  # noqa: E402
from research.planner.workload import class_students  # noqa: E402

HERE = Path(__file__).parent
SHORT = 40
VARIANTS = (("as it is", 0.0, 0.0), ("spread 0.5", 0.0, 0.5), ("spread 1.0", 0.0, 1.0),
            ("before 3/4, spread 1.0", 0.75, 1.0))


class _Intake:
    """A student's request on its way through the gateway's intake (Variant.before): the `send`
    event that carries it makes the request, dated from when the student sent it."""

    def __init__(self, student, sent: float) -> None:  # noqa: ANN001
        self.student, self.sent = student, sent


class Variant(S.Simulation):
    """The simulator with the request overhead drawn per request (`spread`) and partly spent
    before the claim (`before`). Only `_send` and `_send_prompt` change."""

    before = 0.0
    spread = 0.0

    def __init__(self, **kwargs) -> None:  # noqa: ANN003
        super().__init__(**kwargs)
        self._draws = random.Random(7)

    def _overhead(self, seconds: float) -> float:
        if self.spread <= 0:
            return seconds
        sigma = math.sqrt(math.log(1 + self.spread ** 2))
        return seconds * self._draws.lognormvariate(-sigma * sigma / 2, sigma)

    def _send(self, student) -> None:  # noqa: ANN001
        if isinstance(student, _Intake):  # through the intake: the request reaches the line now
            known = len(self.requests)
            super()._send(student.student)
            if len(self.requests) > known:  # (none after the run's end)
                self.requests[next(reversed(self.requests))].sent_s = student.sent
            return
        if self.before <= 0 or self.now >= self.plan.duration_s:
            super()._send(student)
            return
        intake = self._overhead(self.before * self.workers[1].cost.overhead_s)
        self._at(self.now + intake, "send", _Intake(student, self.now))

    def _send_prompt(self, request, worker) -> None:  # noqa: ANN001
        self._at(self.now + self._overhead((1 - self.before) * worker.cost.overhead_s), "loop", request)


def measured_steps(logs: Path) -> tuple[collections.Counter, int, int]:
    """Steps by prompts carried (3 = three or more), short prompts, short prompts alone."""
    by_prompts: collections.Counter = collections.Counter()
    short = alone = 0
    for log in sorted(logs.glob("demo-worker-*.log")):
        for step in step_timing.parse(log.read_text(errors="replace").splitlines()):
            prompts = [tokens for _slot, tokens, _context in step.chunks if tokens > 0]
            if prompts:
                by_prompts[min(len(prompts), 3)] += 1
            for tokens in prompts:
                if tokens <= SHORT:
                    short += 1
                    alone += len(prompts) == 1
    return by_prompts, short, alone


def simulated_steps(plan, cost, before: float, spread: float, runs: int = 4):  # noqa: ANN001, ANN201
    by_prompts: collections.Counter = collections.Counter()
    short = alone = 0
    ttft: dict[str, list[float]] = {}
    fleet = plan.fleet
    for seed in range(runs):
        Variant.before, Variant.spread = before, spread
        students = class_students(mix=plan.mix, seed=plan.seed, scale=plan.scale, context_tokens=fleet.context_tokens,
                                  duration_s=fleet.duration_s, tools_inline=plan.tools_inline, model=fleet.model_id,
                                  tokens=cost.tokens)
        sim = Variant(plan=replace(fleet, noise_seed=1000 + seed), costs=[cost] * fleet.workers, students=students)
        begin = sim._begin_step

        def counted(worker, begin=begin):  # noqa: ANN001, ANN202
            nonlocal short, alone
            begin(worker)
            if not worker.stepping:
                return
            prompts = [(r, chunk) for r, chunk in worker.step if chunk]
            if prompts:
                by_prompts[min(len(prompts), 3)] += 1
            for request, chunk in prompts:
                if chunk <= SHORT and request.prefill_left == chunk:
                    short += 1
                    alone += len(prompts) == 1
        sim._begin_step = counted
        turns, _ = sim.run()
        for turn in turns:
            if turn.completed and turn.first_token_s is not None:
                ttft.setdefault(turn.persona, []).append(turn.first_token_s - turn.sent_s)
    return by_prompts, short, alone, ttft


def composition(by_prompts: collections.Counter, short: int, alone: int) -> str:
    steps = sum(by_prompts.values())
    return (f"{steps} steps carrying prompts: one {by_prompts[1] / steps:.0%}, two {by_prompts[2] / steps:.0%}, "
            f"three or more {by_prompts[3] / steps:.0%}; short prompts alone in their step {alone}/{short} "
            f"({alone / short:.0%})")


def main() -> None:
    plan_path, logs = Path(sys.argv[1]), Path(sys.argv[2])
    plan, cost = plan_from_report(json.loads(plan_path.read_text())["rows"][0]["report"])
    print(f"1. {plan_path}: step composition, measured ({logs}) and simulated (4 noisy runs each)")
    print(f"  {'measured':24} " + composition(*measured_steps(logs)))
    for label, before, spread in VARIANTS:
        by_prompts, short, alone, ttft = simulated_steps(plan, cost, before, spread)
        medians = ", ".join(f"{p} p50 {sorted(v)[len(v) // 2]:.2f} s" for p, v in sorted(ttft.items())
                            if p in ("agent", "chat", "burst"))
        print(f"  {label:24} " + composition(by_prompts, short, alone) + f"; TTFT {medians}")

    def simulate_variant(*, plan, costs, students):  # noqa: ANN001, ANN202
        return Variant(plan=plan, costs=costs, students=students).run()

    planmod.simulate = simulate_variant
    print("\n2. earlier passes re-predicted (8 replicates each, as plan_class), judged by compare_reports: "
          "agent p50/p95, chat p50/p95 in s, and the figures that hold")
    for number in ("17", "18", "19", "20"):
        for label, before, spread in VARIANTS:
            Variant.before, Variant.spread = before, spread
            held, cells = 0, []
            for config in ("2x4", "1x4", "1x2"):
                saved = json.loads((HERE / config / f"plan-{number}.json").read_text())["rows"][0]["report"]
                pass_plan, pass_cost = plan_from_report(saved)
                runs = [json.loads((HERE / config / f"replay-{number}-{run}.json").read_text()) for run in (1, 2, 3)]
                comparison = compare_reports(predict(pass_plan, pass_cost), runs, label=config)
                held += sum(f.holds for f in comparison.figures)
                cells.append(config + " " + "/".join(f"{f.predicted_ms / 1000:.2f}" for f in comparison.figures))
            print(f"  pass {number} {label:24} {held:2d} of 12   " + "   ".join(cells), flush=True)


if __name__ == "__main__":
    main()
