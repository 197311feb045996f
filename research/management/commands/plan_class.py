"""`manage.py plan_class`: what a class would feel on a configuration, predicted by the planner.

    manage.py plan_class --calibration 3 --mix agent:12,claude:6,codex:4,chat:6,burst:2 \\
        --workers 2 --slots 4 --context 32768 --cache-type q8_0 --target-p95 10 \\
        --students 5,10,20,30 --json plan.json --plot plan.svg

Simulates the class replay (research/planner/) on the calibration's cost model, once per class
size (the mix scaled to it), and prints p95 TTFT per persona against class size, then the answer:
`largest class with agent p95 TTFT ≤ T s: N`. `--json` writes every size's prediction in the
class replay's JSON shape (docs/research/class-replay.md), so it compares field by field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.scheduler import LANE_TOKENS
from inference.admission.fair_share import POLICIES
from research.class_metrics import AGENT_PERSONAS
from research.class_personas import PERSONAS, parse_mix
from research.models import Calibration
from research.planner.cost import CostModel
from research.planner.plan import DEFAULT_REPLICATES
from research.planner.report import seconds_text, sweep_chart, sweep_table
from research.planner_services import class_plan, plan_class

DEFAULT_MIX = "agent:12,claude:6,codex:4,chat:6,burst:2"


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--students {text!r}: expected class sizes separated by commas, e.g. 5,10,20,30") from None
    if not sizes or sizes[0] < 1:
        raise ValueError("--students needs class sizes of at least 1")
    return sizes


def table(rows: list[dict[str, Any]], personas: list[str]) -> list[str]:
    header = f"{'students':>8} " + " ".join(f"{p:>8}" for p in personas) + f" {'agents':>8} {'refused':>8} {'cache':>6}"
    lines = ["p95 TTFT (s) by persona and class size:", header]
    for row in sweep_table(rows, personas):
        hit = row["cache_hit_rate"]
        lines.append(f"{row['students']:>8} " + " ".join(f"{seconds_text(v):>8}" for v in row["p95_s"])
                     + f" {seconds_text(row['agents_p95_s']):>8} {row['refused']:>8} "
                     + f"{'-' if hit is None else f'{hit:.0%}':>6}")
    return lines


class Command(BaseCommand):
    help = ("Predict what a class feels on a configuration (workers, slots, context, KV cache type) from a stored "
            "calibration: p95 TTFT per persona against class size, and the largest class meeting a target.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--calibration", type=int, required=True, help="A calibration id (calibrate_worker).")
        parser.add_argument("--mix", default=DEFAULT_MIX, help="PERSONA:COUNT,... as class_replay takes it.")
        parser.add_argument("--workers", type=int, default=1, help="Workers, each like the calibrated one.")
        parser.add_argument("--slots", type=int, default=None, help="Slots per worker (default: the calibration's).")
        parser.add_argument("--context", type=int, default=None,
                            help="Tokens of context per slot (default: the calibration's, else 32768).")
        parser.add_argument("--cache-type", choices=["f16", "q8_0", "q4_0"], default=None,
                            help="KV cache type (default: the calibration's).")
        parser.add_argument("--lane-workers", type=int, default=0, metavar="N",
                            help="Of --workers, N kept for short prompts (lane workers, docs/classroom.md).")
        parser.add_argument("--lane-tokens", type=int, default=LANE_TOKENS, metavar="T",
                            help=f"A lane worker takes prompts of at most T tokens (default {LANE_TOKENS}).")
        parser.add_argument("--target-p95", type=float, default=10.0, help="Agents' p95 TTFT target, seconds.")
        parser.add_argument("--students", default="", help="Class sizes to sweep, e.g. 5,10,20,30 (default: the mix).")
        parser.add_argument("--duration", type=float, default=600.0, help="Seconds of simulated class.")
        parser.add_argument("--scale", type=float, default=1.0, help="As class_replay --scale.")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--replicates", type=int, default=DEFAULT_REPLICATES,
                            help="Simulated runs averaged, each with step times drawn with the calibration's jitter "
                                 f"(default {DEFAULT_REPLICATES}; 1: one exact run).")
        parser.add_argument("--policy", choices=POLICIES, default=None,
                            help="Fair sharing (default: this site's OCS_FAIR_POLICY).")
        parser.add_argument("--max-wait", type=float, default=None,
                            help="Seconds a request may wait for a slot (default: OCS_QUEUE_MAX_WAIT_S).")
        parser.add_argument("--json", default=None, help="Write the predictions (the replay's JSON per size).")
        parser.add_argument("--plot", default=None, help="Write an SVG of p95 TTFT per persona against class size.")

    def handle(self, *args: Any, **options: Any) -> None:
        calibration = Calibration.objects.filter(pk=options["calibration"]).first()
        if calibration is None:
            raise CommandError(f"no calibration {options['calibration']}: make one with calibrate_worker")
        try:
            mix = parse_mix(options["mix"])
            sizes = parse_sizes(options["students"]) if options["students"] else [sum(mix.values())]
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if not any(persona in AGENT_PERSONAS for persona in mix):
            raise CommandError("--mix has no agent persona (agent, claude, codex): the answer is about agents")
        if options["workers"] < 1 or (options["slots"] or 1) < 1 or (options["context"] or 256) < 256:
            raise CommandError("--workers and --slots must be at least 1, --context at least 256")
        if not 0 <= options["lane_workers"] < options["workers"] or options["lane_tokens"] < 1:
            raise CommandError("--lane-workers must be 0 or more and fewer than --workers, --lane-tokens at least 1")
        if options["duration"] <= 0 or not 0 < options["scale"] <= 1 or not 1 <= options["replicates"] <= 64:
            raise CommandError("--duration must be positive, --scale in (0, 1] and --replicates from 1 to 64")
        plan = class_plan(calibration=calibration, mix=mix, workers=options["workers"], slots=options["slots"],
                          context=options["context"], cache_type=options["cache_type"], duration_s=options["duration"],
                          scale=options["scale"], seed=options["seed"], policy=options["policy"],
                          max_wait_s=options["max_wait"], replicates=options["replicates"],
                          lane_workers=options["lane_workers"], lane_tokens=options["lane_tokens"])
        fleet = plan.fleet
        target = options["target_p95"]
        result = plan_class(calibration=calibration, plan=plan, sizes=sizes, target_p95_s=target)
        self.stdout.write(f"calibration {calibration.pk} ({calibration.source}): {calibration.label}")
        self.stdout.write(f"{fleet.workers} workers x {fleet.slots} slots, {fleet.context_tokens} tokens per slot, "
                          f"KV {result['rows'][0]['report']['config']['cache_type']}, policy {fleet.policy}, "
                          f"max wait {fleet.max_wait_s:g} s, {fleet.duration_s:g} s simulated, mix {options['mix']}")
        if fleet.lane_workers:
            self.stdout.write(f"{fleet.lane_workers} of them kept for prompts of at most {fleet.lane_tokens} tokens "
                              f"(lane workers)")
        replicates = result["rows"][0]["report"]["prediction"]["replicates"]
        cost = CostModel.from_dict(calibration.cost)
        self.stdout.write(f"the mean of {replicates} simulated runs, step times drawn with {cost.jitter:.1%} jitter"
                          if replicates > 1 else "one simulated run, every step exactly its fitted cost"
                          + ("" if cost.jitter else " (the calibration has no jitter)"))
        if cost.load_factor != 1:
            self.stdout.write(f"every step and request overhead at x{cost.load_factor:.3f} of its fitted time "
                              f"(the calibration's load factor: the worker's speed under a class)")
        if calibration.source == Calibration.Source.ASSUMPTIONS:
            self.stdout.write("built from assumptions, not measured: `calibrate_worker --assumptions` lists their sources")
        if result["memory"]:
            self.stdout.write(("fits in memory: " if result["fits_memory"] else "DOES NOT FIT in memory: ")
                              + result["memory"])
        personas = [p for p in PERSONAS if p in mix]
        for line in table(result["rows"], personas):
            self.stdout.write(line)
        self.stdout.write("agents: the agent personas' turns together, a refused turn counted as waiting for ever")
        if options["json"]:
            Path(options["json"]).write_text(json.dumps(result, indent=2, default=str))
            self.stdout.write(f"wrote {options['json']}")
        if options["plot"]:
            title = f"Predicted p95 TTFT, {fleet.workers} x {fleet.slots} slots"
            Path(options["plot"]).write_text(sweep_chart(result["rows"], personas, title=title))
            self.stdout.write(f"wrote {options['plot']}")
        largest = result["largest_class"] if result["fits_memory"] else 0
        self.stdout.write(f"largest class with agent p95 TTFT ≤ {target:g} s: {largest}")
