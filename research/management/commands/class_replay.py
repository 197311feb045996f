"""`manage.py class_replay`: a class as a load, through the gateway, from the control plane.

    manage.py class_replay --base-url http://127.0.0.1:8000 --mix agent:4,claude:2,codex:2,chat:3,burst:1 \\
        --duration 300 --scale 0.1 --policy tokens --json replay.json

Students are personas (research/class_personas.py) with the real clients' request shapes; the
run's own accounts, class, limits and keys (research/replay_services.py); the run is stored and
shown at /research/runs/<id>/. docs/research/class-replay.md says what each JSON key means.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.class_metrics import parse_weights
from research.class_personas import parse_mix
from research.class_replay import SentTurn
from research.replay_services import (
    DEFAULT_LIMITS,
    POLICIES,
    ReplayOptions,
    ReplayRefused,
    class_replay_run,
    replay_json,
)

LIMIT_NAMES = {"rpm": "requests_per_minute", "tokens_per_day": "tokens_per_day", "concurrency": "concurrency"}


def parse_limits(text: str) -> dict[str, int]:
    """`rpm:600,tokens_per_day:1000000,concurrency:2` over DEFAULT_LIMITS."""
    limits = dict(DEFAULT_LIMITS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, number = part.partition(":")
        if not sep or name.strip() not in LIMIT_NAMES or not number.strip().isdigit() or int(number) < 1:
            raise ValueError(f"--limits {part!r}: expected rpm:N, tokens_per_day:N or concurrency:N with N >= 1")
        limits[LIMIT_NAMES[name.strip()]] = int(number)
    return limits


def format_report(report: dict[str, Any]) -> list[str]:
    def ms(value: Any) -> str:
        return "-" if value is None else f"{value:.0f}"

    lines = []
    for persona, row in report["per_persona"].items():
        hit = row.get("cache_hit_rate")
        lines.append(
            f"{persona:>6} x{row['students']}: {row['completed']} done, {row['refused']} refused "
            f"{row['refused_reasons'] or ''} | TTFT p50 {ms(row['ttft_ms']['p50'])} p95 {ms(row['ttft_ms']['p95'])} ms"
            f" | E2E p50 {ms(row['e2e_ms']['p50'])} p95 {ms(row['e2e_ms']['p95'])} ms | prompt {row['prompt_tokens']}"
            f" (reused {row['reused_prompt_tokens']}{'' if hit is None else f', {hit:.0%}'})")
    def fig(value: Any, form: str = ".3f") -> str:
        return "-" if value is None else format(value, form)

    against = report.get("jain_vs_ideal") or {}
    lines.append(f"fairness: Jain's index per second in hand {fig(against.get('per_s_in_hand'))}, the ideal fair "
                 f"server on these turns {fig(against.get('ideal_per_s_in_hand'))}: "
                 f"{fig(against.get('ratio'), '.2f')} x the ideal (who held a slot while in hand "
                 f"{fig(against.get('held_share'))}, service per second held {fig(against.get('per_held_s'))})")
    jain = report.get("jain_index")
    ideal = (report.get("jain_ideal") or {}).get("jain_index")
    hit = report.get("cache_hit_rate")
    chat = report.get("chat_under_load") or {}
    lines.append(f"Jain's index {'-' if jain is None else f'{jain:.3f}'} (the ideal fair server on these turns: "
                 f"{'-' if ideal is None else f'{ideal:.3f}'}) | cache hit rate "
                 f"{'-' if hit is None else f'{hit:.1%}'} | {report['tokens_per_s_per_worker']:.1f} output tok/s per "
                 f"worker | chat under load: {chat.get('turns', 0)} turns, TTFT p95 "
                 f"{ms((chat.get('ttft_ms') or {}).get('p95'))} ms")
    return lines


class Command(BaseCommand):
    help = ("Replay a class through the gateway: personas with the real clients' request shapes (Copilot CLI, "
            "Claude Code, Codex, a chat student, a burst student), their own replay accounts and keys (revoked at "
            "the end); stores the run and prints per-persona latency, fairness (Jain's index) and cache reuse.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", required=True, help="This control plane's gateway URL (root or /v1).")
        parser.add_argument("--students", type=int, default=None,
                            help="Number of students; optional, and if given it must equal the sum of --mix.")
        parser.add_argument("--mix", default="agent:12,claude:6,codex:4,chat:6,burst:2",
                            help="PERSONA:COUNT,... from agent (Copilot CLI), claude, codex, chat, burst.")
        parser.add_argument("--duration", type=float, default=300.0, help="Seconds of load (turns in flight finish).")
        parser.add_argument("--scale", type=float, default=1.0,
                            help="Shrinks prompt and output sizes by this factor, same shapes (0.1 for a CPU demo).")
        parser.add_argument("--seed", type=int, default=0, help="Same seed, same students, tasks and timings.")
        parser.add_argument("--policy", choices=POLICIES, default="tokens",
                            help="Fair sharing while slots are scarce: tokens (least weighted service first) or "
                                 "requests (round-robin).")
        parser.add_argument("--weights", default="",
                            help="Service weights for Jain's index: prompt:W (per computed prompt token), output:W; "
                                 "default: the fair-sharing rule's own (prompt:1,output:4, inference/admission/fair_share.py).")
        parser.add_argument("--limits", default="",
                            help="The replay class's limits, over rpm:600,tokens_per_day:1000000000,concurrency:2.")
        parser.add_argument("--pool", default="", help="Pool of the replay keys (default: the default pool).")
        parser.add_argument("--model", default="", help="Model id (default: the first the pool's workers serve).")
        parser.add_argument("--no-tools-inline", action="store_true",
                            help="Do not write the tool definitions into the system prompt (for a model whose "
                                 "template renders tools itself).")
        parser.add_argument("--label", default="", help="A label for the stored run.")
        parser.add_argument("--force", action="store_true", help="Replay even while real students are busy.")
        parser.add_argument("--json", default=None, help="Write the replay's JSON to this file.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            mix = parse_mix(options["mix"])
            weights = parse_weights(options["weights"])
            limits = parse_limits(options["limits"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["students"] is not None and options["students"] != sum(mix.values()):
            raise CommandError(f"--students {options['students']} does not equal the sum of --mix "
                               f"({sum(mix.values())})")
        if options["duration"] <= 0 or not 0 < options["scale"] <= 1:
            raise CommandError("--duration must be positive and --scale in (0, 1]")
        replay = ReplayOptions(
            base_url=options["base_url"], mix=mix, duration_s=options["duration"], scale=options["scale"],
            seed=options["seed"], policy=options["policy"], weights=weights, limits=limits, pool=options["pool"],
            model=options["model"], tools_inline=not options["no_tools_inline"], force=options["force"],
            label=options["label"],
        )

        def progress(turn: SentTurn) -> None:
            if not turn.completed:
                self.stderr.write(f"  {turn.student}: refused ({turn.refused_reason}) at {turn.sent_s:.0f} s")

        try:
            run = class_replay_run(replay, say=self.stdout.write, progress=progress)
        except ReplayRefused as exc:
            raise CommandError(str(exc)) from None
        report = replay_json(run)
        for line in format_report(report):
            self.stdout.write(line)
        self.stdout.write(f"stored as run {run.pk}: /research/runs/{run.pk}/")
        if options["json"]:
            Path(options["json"]).write_text(json.dumps(report, indent=2, default=str))
            self.stdout.write(f"wrote {options['json']}")
