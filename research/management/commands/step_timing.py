"""`manage.py step_timing CALIBRATION LOG [LOG ...]`: every iteration of llama-server's loop in
workers' trace logs, costed with a stored calibration at the bench's speed
(research/planner/validation/step_timing.py says what it reads and prints). The last line is the
run's speed against the calibration: scripts/validate_planner.sh's load factor and each replay's
speed (research/planner/validation/noise.py reads it back)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.models import Calibration
from research.planner.cost import CostModel
from research.planner.validation.step_timing import time_steps


class Command(BaseCommand):
    help = "Cost every iteration of llama-server's loop in trace logs with a calibration: the run's speed against it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("calibration", type=int)
        parser.add_argument("logs", nargs="+", help="The workers' logs (one worker's, or every worker's of the run).")
        parser.add_argument("--slots", type=int, default=4)
        parser.add_argument("--start", type=int, default=-1,
                            help="Which start of the server in each log (0: the first; default -1, the last).")
        parser.add_argument("--started", default="",
                            help="With several logs: each server's start time on one clock (seconds, comma-separated), "
                                 "to line their logs up for the contention term.")
        parser.add_argument("--window", type=float, default=30.0, help="Seconds per value of the over-time line.")

    def handle(self, *args: Any, **options: Any) -> None:
        calibration = Calibration.objects.filter(pk=options["calibration"]).first()
        if calibration is None:
            raise CommandError(f"no calibration {options['calibration']}")
        # against the benches' speed: a calibration's load factor (a class's speed, measured apart) left out
        model = replace(CostModel.from_dict(calibration.cost), load_factor=1.0)
        try:
            started = [float(v) for v in options["started"].split(",")] if options["started"] else []
            logs = [(Path(path).name, Path(path).read_text(errors="replace")) for path in options["logs"]]
            timing = time_steps(logs, model, slots=options["slots"], started=started, start=options["start"],
                                window=options["window"])
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"calibration {calibration.pk}: " + timing.lines[0])
        for line in timing.lines[1:]:
            self.stdout.write(line)
