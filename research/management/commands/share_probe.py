"""`manage.py share_probe`: what a cancelling student and a count_tokens flood get, on a running
gateway (research/share_probe.py), with two synthetic students of the replay class:

    manage.py share_probe cancel --duration 60 --loops 4
    manage.py share_probe count-tokens --duration 40 --loops 8

Prints the figures as JSON; docs/usage-and-limits.md quotes one run of each.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.replay_services import (
    DEFAULT_LIMITS,
    ReplayRefused,
    model_and_pool,
    replay_keys_revoke,
    replay_students_ensure,
)
from research.share_probe import cancel_probe, count_tokens_probe


class Command(BaseCommand):
    help = "Check the fair share against a cancelling student, or a classmate's stream under a count_tokens flood."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("probe", choices=["cancel", "count-tokens"])
        parser.add_argument("--base-url", default=settings.OCS_RUNS_BASE_URL)
        parser.add_argument("--model", default="")
        parser.add_argument("--duration", type=float, default=60.0)
        parser.add_argument("--loops", type=int, default=4)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["duration"] <= 0 or options["loops"] < 1:
            raise CommandError("--duration must be above 0 and --loops at least 1")
        try:
            pool, model = model_and_pool(model_id=options["model"])
        except ReplayRefused as refused:
            raise CommandError(str(refused)) from None
        issued = replay_students_ensure(roster=[("replay-probe-a", "probe"), ("replay-probe-b", "probe")],
                                        limits={**DEFAULT_LIMITS, "concurrency": 2 * options["loops"]}, pool=pool)
        (_, _, key_a), (_, _, key_b) = issued
        url = options["base_url"].rstrip("/").removesuffix("/v1")
        try:
            if options["probe"] == "cancel":
                result = asyncio.run(cancel_probe(url=url, model=model.public_id, cutter_key=key_a, reader_key=key_b,
                                                  loops=options["loops"], duration_s=options["duration"]))
            else:
                result = asyncio.run(count_tokens_probe(url=url, model=model.public_id, flooder_key=key_a,
                                                        reader_key=key_b, loops=options["loops"],
                                                        duration_s=options["duration"]))
        finally:
            replay_keys_revoke([key for _, key, _ in issued])
        self.stdout.write(json.dumps({"probe": options["probe"], "model": model.public_id, **result}, indent=2))
