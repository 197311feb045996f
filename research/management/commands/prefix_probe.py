"""`manage.py prefix_probe`: what a client's public prefix saves a further student's first turn, on a
running gateway (research/prefix_probe.py says how):

    manage.py prefix_probe --base-url http://127.0.0.1:8491 --persona agent --k 5 --repeats 5

`--k` must be the gateway's OCS_SHARED_PREFIX_K. Stores two runs of one group (shared, and the same
turn without sharing) and prints the figures as JSON.
"""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.prefix_probe import PERSONAS, ProbeOptions, prefix_probe_run
from research.replay_services import ReplayRefused


class Command(BaseCommand):
    help = "Measure a further student's first turn with the class's public prefix, against the same turn without."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", default=settings.OCS_RUNS_BASE_URL)
        parser.add_argument("--persona", choices=PERSONAS, default="agent")
        parser.add_argument("--k", type=int, default=settings.OCS["SHARED_PREFIX_K"])
        parser.add_argument("--repeats", type=int, default=5)
        parser.add_argument("--scale", type=float, default=0.2)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--label", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["k"] < 1 or options["repeats"] < 1 or not 0 < options["scale"] <= 1:
            raise CommandError("--k and --repeats must be at least 1, --scale in (0, 1]")
        try:
            result = prefix_probe_run(ProbeOptions(
                base_url=options["base_url"], persona=options["persona"], k=options["k"], repeats=options["repeats"],
                scale=options["scale"], seed=options["seed"], label=options["label"]), say=self.stderr.write)
        except ReplayRefused as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(json.dumps(result, indent=2))
