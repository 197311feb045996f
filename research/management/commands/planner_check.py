"""`manage.py planner_check`: the planner's prediction against measured class replays (a benchmark).

    manage.py planner_check --predicted plan.json --measured run1.json --measured run2.json
    manage.py planner_check --case 1x4:plan-1x4.json:a.json,b.json --case 2x2:plan-2x2.json:c.json,d.json \\
        --case 2x4:plan-2x4.json:e.json,f.json --json check.json

`--predicted` is `plan_class --json` (or any class replay JSON), `--measured` `class_replay --json`
of the same configuration (seed, mix, scale, duration). Prints, per configuration, agent and chat
TTFT p50 and p95: predicted, each run, the ratio predicted ÷ measured, the runs' spread and the
verdict (research/planner/compare.py); with two configurations or more, their ranking by agent
p95 TTFT, predicted and measured (the runs' means), the neighbours whose runs overlap, and the
orders the runs establish (every pair whose runs do not overlap), each predicted or not. Exits 0
whatever the verdicts: it measures, it does not gate.

`--name pass-21` also stores the check as a row (research.models.PlannerCheck, shown at
/research/checks/pass-21/): the comparison, each configuration's class, and the machine's noise
read from the prediction's directory (scripts/validate_planner.sh's calibration, drift and step
timing files: research/planner/validation/noise.py); `--finding` and `--reproduce` say what it
showed and how to measure it again.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from research.planner.compare import BOUND, Comparison, compare_reports, rank_configurations, replay_report
from research.planner.validation.noise import read_noise
from research.planner.validation.records import configuration_of
from research.planner_services import planner_check_record


def read_json(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CommandError(f"{path}: {exc}") from None


def parse_case(text: str) -> tuple[str, str, list[str]]:
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise CommandError(f"--case {text!r}: expected LABEL:PREDICTED.json:MEASURED.json[,MEASURED.json...]")
    return parts[0], parts[1], [p for p in parts[2].split(",") if p]


def _turns(report: Mapping[str, Any]) -> dict[str, Any]:
    return {"completed": report.get("completed"), "refused": report.get("refused")}


def seconds(value_ms: float | None) -> str:
    return "-" if value_ms is None else f"{value_ms / 1000:.2f} s"


def ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


class Command(BaseCommand):
    help = ("Compare the planner's prediction (plan_class --json) with measured class replays (class_replay --json): "
            "agent and chat TTFT p50/p95 ratios, the runs' spread, a verdict per figure, and the ranking.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--predicted", default=None, help="plan_class --json of one configuration.")
        parser.add_argument("--measured", action="append", default=[],
                            help="class_replay --json of the same configuration (repeat for each run).")
        parser.add_argument("--label", default="", help="The configuration's name (with --predicted).")
        parser.add_argument("--case", action="append", default=[],
                            help="LABEL:PREDICTED.json:MEASURED.json,MEASURED.json (repeat per configuration).")
        parser.add_argument("--bound", type=float, default=BOUND, help="Relative bound (0.25: ±25 %%).")
        parser.add_argument("--json", default=None, help="Write the comparison to this file.")
        parser.add_argument("--name", default=None,
                            help="Store the check as a row under this name (a slug: pass-21), replacing one.")
        parser.add_argument("--title", default="", help="With --name: a title.")
        parser.add_argument("--finding", default="", help="With --name: what it showed, in a sentence.")
        parser.add_argument("--reproduce", default="", help="With --name: the command that measures it again.")

    def handle(self, *args: Any, **options: Any) -> None:
        cases = [parse_case(text) for text in options["case"]]
        if options["predicted"] or options["measured"]:
            if not options["predicted"] or not options["measured"]:
                raise CommandError("--predicted needs at least one --measured, and the other way round")
            cases.insert(0, (options["label"] or "configuration", options["predicted"], options["measured"]))
        if not cases:
            raise CommandError("give --predicted and --measured, or --case")
        if not 0 < options["bound"] < 1:
            raise CommandError("--bound must be in (0, 1)")
        if options["name"] and not slugify(options["name"]) == options["name"]:
            raise CommandError(f"--name {options['name']!r}: a slug (letters, digits, - and _)")
        comparisons = []
        configurations: list[dict[str, Any]] = []
        noise: dict[str, Any] = {}
        turns: dict[str, Any] = {}
        for label, predicted_path, measured_paths in cases:
            measured = [replay_report(read_json(path)) for path in measured_paths]
            try:
                predicted = replay_report(read_json(predicted_path), students=measured[0].get("config", {}).get(
                    "students"))
                comparison = compare_reports(predicted, measured, label=label, bound=options["bound"])
            except ValueError as exc:
                raise CommandError(f"{label}: {exc}") from None
            comparisons.append(comparison)
            configurations.append(configuration_of(label, measured[0].get("config") or {}))
            noise[label] = read_noise(Path(predicted_path).parent)
            turns[label] = {"predicted": _turns(predicted), "measured": [_turns(run) for run in measured]}
            self._show(comparison, predicted_path, measured_paths)
        result: dict[str, Any] = {"bound": options["bound"], "configurations": [c.as_dict() for c in comparisons]}
        if len(comparisons) > 1:
            ranking = rank_configurations(comparisons)
            result["ranking"] = ranking.as_dict()
            self.stdout.write(f"ranking by {ranking.figure}, lowest first:")
            self.stdout.write(f"  predicted  {' < '.join(ranking.predicted)}")
            self.stdout.write(f"  measured   {' < '.join(ranking.measured)}")
            self.stdout.write("  the same order" if ranking.same else "  NOT the same order")
            for low, high in ranking.unresolved:
                self.stdout.write(f"  measured {low} and {high}: their runs overlap, the order is inside the noise")
            established = ", ".join(f"{low} < {high}" for low, high in ranking.resolved)
            if not ranking.resolved:
                self.stdout.write("  the runs establish no order (every pair's runs overlap)")
            elif ranking.contradicted:
                self.stdout.write(f"  the orders the runs establish ({established}): NOT all predicted ("
                                  + ", ".join(f"{low} < {high}" for low, high in ranking.contradicted)
                                  + " predicted the other way)")
            else:
                self.stdout.write(f"  the orders the runs establish ({established}): all predicted")
        held = sum(1 for c in comparisons for f in c.figures if f.holds)
        total = sum(len(c.figures) for c in comparisons)
        self.stdout.write(f"figures within the bound or the spread: {held} of {total}")
        if options["json"]:
            Path(options["json"]).write_text(json.dumps(result, indent=2))
            self.stdout.write(f"wrote {options['json']}")
        if options["name"]:
            for configuration in result["configurations"]:
                configuration["turns"] = turns[configuration["label"]]
            check = planner_check_record(name=options["name"], comparison=result, configurations=configurations,
                                         noise=noise, title=options["title"], finding=options["finding"],
                                         reproduce=options["reproduce"])
            self.stdout.write(f"stored as /research/checks/{check.name}/ ({check.figures_within} of "
                              f"{check.figures_total} within)")

    def _show(self, comparison: Comparison, predicted_path: str, measured_paths: list[str]) -> None:
        self.stdout.write(f"{comparison.label}: predicted {predicted_path}; measured {', '.join(measured_paths)}")
        runs = len(comparison.figures[0].measured_ms)
        header = (f"  {'figure':<15} {'predicted':>10} " + " ".join(f"{f'run {n}':>9}" for n in range(1, runs + 1))
                  + f" {'ratio':>6} {'per run':>12} {'spread':>7}  verdict")
        self.stdout.write(header)
        for check in comparison.figures:
            per_run = " ".join(ratio_text(r) for r in check.run_ratios) or "-"
            spread = "-" if check.spread is None else f"{check.spread:.0%}"
            self.stdout.write(f"  {check.name:<15} {seconds(check.predicted_ms):>10} "
                              + " ".join(f"{seconds(v):>9}" for v in check.measured_ms)
                              + f" {ratio_text(check.ratio):>6} {per_run:>12} {spread:>7}  {check.verdict_text()}")
        for text in comparison.mismatches:
            self.stdout.write(f"  configuration differs: {text}")
        for text in comparison.notes:
            self.stdout.write(f"  note: {text}")
