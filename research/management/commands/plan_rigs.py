"""`manage.py plan_rigs`: which model, placement, slots and KV cache the rigs should run for a class.

    manage.py plan_rigs --students 10,20,30 --plot rig-plan.svg --json rig-plan.json
    manage.py plan_rigs --models dense-8b,moe-30b-a3b --gguf /models/other.gguf:3.3 --students 10
    manage.py plan_rigs --calibration moe-30b-a3b=12   # after a rig day: measured speeds for a model

Tries every placement of each candidate model on the rigs (cards per worker, so workers per rig),
slots x the largest context a slot that fits, each KV cache type and the shared prefix off and on,
simulated by the capacity planner at each class size (research/planner/rigs.py), and prints them
ranked by students served within the agents' and chat's p95 TTFT targets. Stores the result for
the "Plan the rigs" page (/research/rigs/). Without --calibration every speed is an assumption,
listed with its source and the measurement that replaces it.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.gguf import read_gguf
from research.class_personas import parse_mix
from research.models import Calibration
from research.planner.rigs import PRESETS, ModelCandidate, SearchRow, Targets, candidate_from_gguf, rigs_of
from research.planner.rigs_report import curves_chart, ranked_lines
from research.planner_services import rig_plan_run
from research.management.commands.plan_class import DEFAULT_MIX, parse_sizes


def parse_models(text: str) -> list[ModelCandidate]:
    keys = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [key for key in keys if key not in PRESETS]
    if unknown or not keys:
        raise ValueError(f"--models: unknown {', '.join(unknown) or '(none given)'}; presets: {', '.join(PRESETS)}")
    return [PRESETS[key] for key in keys]


def parse_gguf(text: str) -> ModelCandidate:
    """PATH or PATH:ACTIVE_BILLIONS (a mixture of experts' active parameters)."""
    path, _, active = text.rpartition(":") if not Path(text).exists() and ":" in text else (text, "", "")
    try:
        facts = read_gguf(path)
    except (ImportError, OSError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(f"--gguf {path}: cannot read it ({type(exc).__name__}: {exc})") from None
    return candidate_from_gguf(facts, active_billions=float(active) if active else None)


def parse_calibrations(text: str) -> dict[str, Calibration]:
    out: dict[str, Calibration] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, _, ident = part.partition("=")
        calibration = Calibration.objects.filter(pk=int(ident)).first() if ident.isdigit() else None
        if calibration is None:
            raise ValueError(f"--calibration {part!r}: expected MODEL=ID of a stored calibration (calibrate_worker)")
        out[key] = calibration
    return out


class Command(BaseCommand):
    help = ("Search the configurations the rigs could run (model, cards per worker, slots x context, KV cache type, "
            "shared prefix) and rank them by students served within a p95 TTFT target, predicted by the planner.")

    # Options that shape the stored result; the others (where output goes, how much is printed) do not.
    NOT_IN_COMMAND = frozenset({"json", "plot", "top", "no_save"})

    def command_line(self, options: dict[str, Any]) -> str:
        """The command that reproduces this search, from the parsed options (not sys.argv: under
        call_command, a test or a page, that is the caller's own command line)."""
        parser = CommandParser()
        self.add_arguments(parser)
        words = ["python", "manage.py", "plan_rigs"]
        for action in parser._actions:
            value = options.get(action.dest)
            if action.dest in self.NOT_IN_COMMAND or action.dest == "help" or value == action.default:
                continue
            flag = max(action.option_strings, key=len)
            for item in (value if isinstance(value, list) else [value]):
                words += [flag] if item is True else [flag, str(item)]
        return " ".join(shlex.quote(word) for word in words)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rigs", type=int, default=2, help="Rigs (default 2).")
        parser.add_argument("--cards", type=int, default=8, help="Cards per rig (default 8).")
        parser.add_argument("--gpu", default="GTX 1070", help="Card name from research/roofline.py.")
        parser.add_argument("--link-gbs", type=float, default=0.2,
                            help="Each card's PCIe link, GB/s a direction (Gen1 x1 riser: 0.2).")
        parser.add_argument("--link", default="PCIe Gen1 x1 riser", help="What the link is, for the assumptions.")
        parser.add_argument("--models", default=",".join(PRESETS), help=f"Presets to try: {', '.join(PRESETS)}.")
        parser.add_argument("--gguf", action="append", default=[],
                            help="A GGUF file to try too, PATH or PATH:ACTIVE_BILLIONS for a mixture of experts.")
        parser.add_argument("--calibration", default="",
                            help="MODEL=ID,...: a stored calibration's measured speeds for a model (after a rig day).")
        parser.add_argument("--mix", default=DEFAULT_MIX, help="PERSONA:COUNT,... as class_replay takes it.")
        parser.add_argument("--students", default="10,20,30", help="Class sizes (default 10,20,30).")
        parser.add_argument("--target-p95", type=float, default=60.0, help="Agents' p95 TTFT target, seconds.")
        parser.add_argument("--chat-target-p95", type=float, default=15.0, help="Chat's p95 TTFT target, seconds.")
        parser.add_argument("--duration", type=float, default=600.0, help="Seconds of simulated class.")
        parser.add_argument("--scale", type=float, default=1.0, help="As class_replay --scale.")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--max-wait", type=float, default=None,
                            help="Seconds a request may wait for a slot (default: OCS_QUEUE_MAX_WAIT_S).")
        parser.add_argument("--top", type=int, default=15, help="Rows printed (all go to --json and the page).")
        parser.add_argument("--json", default=None, help="Write the whole result as JSON.")
        parser.add_argument("--plot", default=None,
                            help="Write an SVG: each model's best configuration, agents' p95 against class size.")
        parser.add_argument("--no-save", action="store_true", help="Do not store it for the page.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            models = parse_models(options["models"]) + [parse_gguf(text) for text in options["gguf"]]
            mix = parse_mix(options["mix"])
            sizes = parse_sizes(options["students"])
            measured = parse_calibrations(options["calibration"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["rigs"] < 1 or options["cards"] < 1 or options["link_gbs"] <= 0:
            raise CommandError("--rigs and --cards must be at least 1, --link-gbs positive")
        if options["duration"] <= 0 or not 0 < options["scale"] <= 1:
            raise CommandError("--duration must be positive and --scale in (0, 1]")
        rigs = rigs_of(options["rigs"], options["cards"], gpu=options["gpu"], link_gbs=options["link_gbs"],
                       link=options["link"])
        targets = Targets(agent_p95_s=options["target_p95"], chat_p95_s=options["chat_target_p95"])
        done = [0]

        def progress(row: SearchRow) -> None:
            done[0] += 1
            self.stderr.write(f"  [{done[0]}] {row.configuration.label()}: {row.served} students")

        command = self.command_line(options)
        try:
            result, stored = rig_plan_run(models=models, rigs=rigs, mix=mix, sizes=sizes, targets=targets,
                                          duration_s=options["duration"], seed=options["seed"],
                                          scale=options["scale"], max_wait_s=options["max_wait"], measured=measured,
                                          command=command, save=not options["no_save"], progress=progress)
        except (ValueError, KeyError) as exc:
            raise CommandError(str(exc)) from None
        for line in ranked_lines(result, top=options["top"]):
            self.stdout.write(line)
        if options["json"]:
            Path(options["json"]).write_text(json.dumps(result, indent=2, default=str))
            self.stdout.write(f"wrote {options['json']}")
        if options["plot"]:
            Path(options["plot"]).write_text(curves_chart(result))
            self.stdout.write(f"wrote {options['plot']}")
        if stored is not None:
            self.stdout.write(f"rig plan {stored.pk} (shown on /research/rigs/)")
