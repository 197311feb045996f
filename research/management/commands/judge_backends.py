"""`manage.py judge_backends`: issue 53's targets, the PostgreSQL + Redis gateway against the
embedded one, from pairs of `bench_gateway --json` reports (research/gateway_bench/backends.py).

    manage.py bench_gateway --upstream replay --streams 1,32,128 --processes 1,2 --servers uvicorn --json pg.json
        (with DATABASE_URL and REDIS_URL set)
    manage.py bench_gateway --upstream replay --streams 1,32,128 --embedded --servers uvicorn --json emb.json
    manage.py judge_backends pg.json emb.json [pg2.json emb2.json ...] [--no-save]
    manage.py bench_gateway --upstream replay --streams 1,32,128 --processes 1,2 --servers uvicorn \
        --beside-embedded --json both.json          (with DATABASE_URL and REDIS_URL set)
    manage.py judge_backends both.json [both2.json ...]
    manage.py judge_backends --stored [--no-save]

A report made with --beside-embedded is a pair by itself (both back ends in the same rounds);
other reports come in pairs. Prints each target's figure in each pair and whether it was met (in every pair, in some, in
none), and stores the pairs' reports and the verdicts as a probe run (`/research/runs/<id>/`)
in the database this command is configured with, unless --no-save. `--stored` judges again the
pairs kept in the repository (research/data/backends_judged.json: docs/performance.md, "Judged
in pairs"), one probe run per set of pairs.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.gateway_bench.backends import Report, beside_pair, has_beside, judge
from research.replay_services import probe_record

STORED = Path(__file__).resolve().parents[2] / "data" / "backends_judged.json"


class Kept(NamedTuple):
    """A set of pairs kept in the repository, and when its runs were made."""

    label: str
    pairs: list[tuple[Report, Report]]
    started_at: datetime | None = None
    ended_at: datetime | None = None


def stored_pairs(path: Path = STORED) -> list[Kept]:
    """Each set of pairs kept in the repository: a pair is two runs' reports ("redis",
    "embedded") or one --beside-embedded report ("same_rounds")."""
    return [Kept(entry["label"], [beside_pair(pair["same_rounds"]) if "same_rounds" in pair
                                  else (pair["redis"], pair["embedded"]) for pair in entry["summary"]["pairs"]],
                 datetime.fromisoformat(entry["started_at"]), datetime.fromisoformat(entry["ended_at"]))
            for entry in json.loads(path.read_text())]


class Command(BaseCommand):
    help = ("Judge the PostgreSQL + Redis gateway against the embedded one (issue 53's targets) from pairs of "
            "bench_gateway --json reports: PostgreSQL + Redis first, then embedded, in each pair.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("reports", nargs="*",
                            help="pg.json emb.json [...], or a --beside-embedded report (a pair by itself)")
        parser.add_argument("--stored", action="store_true",
                            help="Judge the pairs kept in research/data/backends_judged.json instead.")
        parser.add_argument("--no-save", action="store_true", help="Print only; store no probe run.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["stored"] == bool(options["reports"]):
            raise CommandError("give pairs of reports, or --stored")
        sets = stored_pairs() if options["stored"] else [Kept("", self._pairs(options["reports"]))]
        for kept in sets:
            self._judge(kept, save=not options["no_save"])

    def _pairs(self, paths: list[str]) -> list[tuple[Report, Report]]:
        reports = []
        for path in paths:
            try:
                reports.append(json.loads(Path(path).read_text()))
            except (OSError, ValueError) as exc:
                raise CommandError(f"{path}: not a bench_gateway --json report ({exc})") from None
        pairs, waiting = [], []
        try:
            for report in reports:
                if has_beside(report):
                    pairs.append(beside_pair(report))
                else:
                    waiting.append(report)
                    if len(waiting) == 2:
                        pairs.append((waiting[0], waiting[1]))
                        waiting = []
        except (KeyError, TypeError) as exc:
            raise CommandError(f"not a bench_gateway --json report ({exc})") from None
        if waiting:
            raise CommandError("give the reports in pairs: a PostgreSQL + Redis report, then an embedded one "
                               "(a --beside-embedded report is a pair by itself)")
        return pairs

    def _judge(self, kept: Kept, *, save: bool) -> None:
        label, pairs = kept.label, kept.pairs
        try:
            judged = judge(pairs)
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"these reports cannot be judged: {exc}") from None
        if label:
            self.stdout.write(label)
        self.stdout.write(f"PostgreSQL + Redis (1 process) against embedded, {len(pairs)} pair"
                          f"{'s' if len(pairs) > 1 else ''} of runs, each gateway against its own run's reference hop:")
        for item in judged:
            self.stdout.write(item.line())
        if not save:
            return
        run = probe_record(
            name="backends", base_url="", model="bench-replay", output_tokens=int(pairs[0][0]["setup"].get("tokens", 0)),
            label=label or f"PostgreSQL + Redis against embedded, {len(pairs)} pair(s) of bench_gateway runs",
            result={"judged": [item.as_dict() for item in judged],
                    "pairs": [{"redis": redis, "embedded": embedded} for redis, embedded in pairs]},
            started_at=kept.started_at, ended_at=kept.ended_at)
        self.stdout.write(f"stored as run {run.pk}: /research/runs/{run.pk}/")
