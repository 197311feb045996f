"""`manage.py share_probe`: what a cancelling student and a count_tokens flood get, on a running
gateway (research/share_probe.py), with two synthetic students of the replay class; and what the
quiet student's questions wait for beside the class's agents (research/quiet_probe.py), with and
without the fleet's lane workers:

    manage.py share_probe cancel --duration 60 --loops 4
    manage.py share_probe count-tokens --duration 40 --loops 8
    manage.py share_probe quiet --alone 30 --duration 90

Prints the figures as JSON and stores each as a row (research.ProbeRun);
docs/usage-and-limits.md and docs/classroom.md quote them.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import CatalogModel, Pool, Worker
from fleet.services import worker_set_lane
from research import quiet_probe
from research.replay_services import (
    DEFAULT_LIMITS,
    ReplayRefused,
    model_and_pool,
    probe_record,
    replay_keys_revoke,
    replay_students_ensure,
)
from research.share_probe import cancel_probe, count_tokens_probe

QUIET_BOUND = 3.0  # the chat student's p95 under load at most 3 x its p95 alone (docs/classroom.md)


class Command(BaseCommand):
    help = "Check the fair share against a cancelling student, or a classmate's stream under a count_tokens flood."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("probe", choices=["cancel", "count-tokens", "quiet"])
        parser.add_argument("--base-url", default=settings.OCS_RUNS_BASE_URL)
        parser.add_argument("--model", default="")
        parser.add_argument("--duration", type=float, default=60.0)
        parser.add_argument("--loops", type=int, default=4)
        parser.add_argument("--alone", type=float, default=30.0,
                            help="quiet: seconds of the chat student's questions alone, before the load.")
        parser.add_argument("--no-compare", action="store_true",
                            help="quiet: skip the same load with the lane workers made ordinary.")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--label", default="", help="A label for the stored row.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["duration"] <= 0 or options["loops"] < 1:
            raise CommandError("--duration must be above 0 and --loops at least 1")
        try:
            pool, model = model_and_pool(model_id=options["model"])
        except ReplayRefused as refused:
            raise CommandError(str(refused)) from None
        if options["probe"] == "quiet":
            self._quiet(options, pool=pool, model=model)
            return
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
        report = {"probe": options["probe"], "model": model.public_id, **result}
        run = probe_record(name=options["probe"], base_url=url, model=model.public_id, result=report, label=options["label"])
        self.stdout.write(json.dumps(report, indent=2))
        self.stdout.write(f"stored as run {run.pk}: /research/runs/{run.pk}/")

    def _quiet(self, options: dict[str, Any], *, pool: Pool, model: CatalogModel) -> None:
        if options["alone"] <= 0:
            raise CommandError("--alone must be above 0")
        roster = ([("replay-quiet-chat", "chat"), ("replay-quiet-burst", "burst")]
                  + [(f"replay-quiet-agent-{n}", "agent") for n in range(1, quiet_probe.AGENT_STUDENTS + 1)])
        concurrency = max(quiet_probe.AGENT_STREAMS, quiet_probe.BURST_STREAMS)
        issued = replay_students_ensure(roster=roster, limits={**DEFAULT_LIMITS, "concurrency": concurrency}, pool=pool)
        keys = {username.removeprefix("replay-quiet-"): raw for (username, _), (_, _, raw) in zip(roster, issued)}
        lanes = {w.pk: w.lane_tokens for w in Worker.objects.filter(pool=pool, model=model, lane_tokens__gt=0)}
        url = options["base_url"].rstrip("/").removesuffix("/v1")
        report: dict[str, Any] = {"probe": "quiet", "model": model.public_id, "lane_workers": len(lanes),
                                  "lane_tokens": sorted(set(lanes.values()))}

        def phase(name: str, *, duration_s: float, loaded: bool, burst: bool = True) -> None:
            self.stderr.write(f"{name}: {duration_s:g} s")
            ran = asyncio.run(quiet_probe.run_phase(url=url, model=model.public_id, keys=keys, duration_s=duration_s,
                                                    loaded=loaded, seed=options["seed"], burst=burst,
                                                    context_tokens=model.context_length))
            report[name] = quiet_probe.phase_report(ran)

        try:
            phase("alone", duration_s=options["alone"], loaded=False)
            phase("load", duration_s=options["duration"], loaded=True)
            if lanes:
                phase("lane_alone", duration_s=options["alone"], loaded=True, burst=False)
            if lanes and not options["no_compare"]:
                workers = list(Worker.objects.filter(pk__in=lanes))
                try:
                    for worker in workers:
                        worker_set_lane(worker=worker, lane_tokens=0)
                    time.sleep(2 * settings.OCS["FLEET_CACHE_TTL_S"] + 0.5)  # every gateway sees it
                    phase("without_lanes", duration_s=options["duration"], loaded=True)
                finally:
                    for worker in workers:
                        worker_set_lane(worker=worker, lane_tokens=lanes[worker.pk])
        finally:
            replay_keys_revoke([key for _, key, _ in issued])
        report["verdict"] = quiet_probe.verdict(report, bound=QUIET_BOUND)
        run = probe_record(name="quiet", base_url=url, model=model.public_id, result=report,
                           label=options["label"] or f"quiet student, {len(lanes)} lane worker(s)")
        self.stdout.write(json.dumps(report, indent=2))
        self.stdout.write(f"stored as run {run.pk}: /research/runs/{run.pk}/")
