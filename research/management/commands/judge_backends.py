"""`manage.py judge_backends`: issue 53's targets, the PostgreSQL + Redis gateway against the
embedded one, from pairs of `bench_gateway --json` reports (research/gateway_bench/backends.py).

    manage.py bench_gateway --upstream replay --streams 1,32,128 --processes 1,2 --servers uvicorn --json pg.json
        (with DATABASE_URL and REDIS_URL set)
    manage.py bench_gateway --upstream replay --streams 1,32,128 --embedded --servers uvicorn --json emb.json
    manage.py judge_backends pg.json emb.json [pg2.json emb2.json ...] [--no-save]

Prints each target's figure in each pair and whether it was met (in every pair, in some, in
none), and stores the pairs' reports and the verdicts as a probe run (`/research/runs/<id>/`)
in the database this command is configured with, unless --no-save.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.gateway_bench.backends import judge
from research.replay_services import probe_record


class Command(BaseCommand):
    help = ("Judge the PostgreSQL + Redis gateway against the embedded one (issue 53's targets) from pairs of "
            "bench_gateway --json reports: PostgreSQL + Redis first, then embedded, in each pair.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("reports", nargs="+", help="pg.json emb.json [pg2.json emb2.json ...]")
        parser.add_argument("--no-save", action="store_true", help="Print only; store no probe run.")

    def handle(self, *args: Any, **options: Any) -> None:
        paths = options["reports"]
        if len(paths) % 2:
            raise CommandError("give the reports in pairs: a PostgreSQL + Redis report, then an embedded one")
        reports = []
        for path in paths:
            try:
                reports.append(json.loads(Path(path).read_text()))
            except (OSError, ValueError) as exc:
                raise CommandError(f"{path}: not a bench_gateway --json report ({exc})") from None
        pairs = list(zip(reports[::2], reports[1::2]))
        try:
            judged = judge(pairs)
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"these reports cannot be judged: {exc}") from None
        self.stdout.write(f"PostgreSQL + Redis (1 process) against embedded, {len(pairs)} pair"
                          f"{'s' if len(pairs) > 1 else ''} of runs, each gateway against its own run's reference hop:")
        for item in judged:
            self.stdout.write(item.line())
        if options["no_save"]:
            return
        run = probe_record(
            name="backends", base_url="", model="bench-replay", output_tokens=int(reports[0]["setup"].get("tokens", 0)),
            label=f"PostgreSQL + Redis against embedded, {len(pairs)} pair(s) of bench_gateway runs",
            result={"judged": [item.as_dict() for item in judged],
                    "pairs": [{"redis": redis, "embedded": embedded} for redis, embedded in pairs]})
        self.stdout.write(f"stored as run {run.pk}: /research/runs/{run.pk}/")
