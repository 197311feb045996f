"""`manage.py bench_gateway`: what the gateway costs, against the same upstream reached directly.

    manage.py bench_gateway                                  # replay upstream, daphne and uvicorn
    manage.py bench_gateway --upstream both --streams 1,4    # also a real llama-server (SmolLM2)
    manage.py bench_gateway --processes 1,2,4                # needs REDIS_URL and a PostgreSQL DATABASE_URL
    manage.py bench_gateway --processes 1,2 --beside-embedded    # and the embedded gateway in the same rounds
    manage.py bench_gateway --rss-requests 10000 --json out.json

Starts its own upstream, database and gateway processes (research/gateway_bench/run.py) and
never touches the database this command itself is configured with.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.gateway_bench.run import SERVERS, BenchOptions, run_bench

UPSTREAMS = {"replay": ("replay",), "llama": ("llama",), "both": ("replay", "llama")}


def _positive_ints(flag: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise CommandError(f"{flag} {text!r}: expected numbers like 1,8,32") from None
    if not values or any(v < 1 for v in values):
        raise CommandError(f"{flag} {text!r}: each value must be at least 1")
    return values


def _servers(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in SERVERS]
    if not names or unknown:
        raise CommandError(f"--servers {text!r}: choose from {', '.join(SERVERS)}")
    return names


class Command(BaseCommand):
    help = ("Measure the gateway against the same upstream reached directly: streaming chat completions, "
            "alternating direct and gateway rounds at each concurrency; prints TTFT, completions/s, chunks/s, "
            "errors and the gateway's ratios to direct and to the reference hop (a bare pass-through).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--upstream", choices=sorted(UPSTREAMS), default="replay",
                            help="replay: the CPU-cheap replay upstream; llama: a real llama-server (SmolLM2); both.")
        parser.add_argument("--streams", default=None,
                            help="Concurrent streams per level (default: replay 1,8,32,128; llama 1,4).")
        parser.add_argument("--rounds", type=int, default=3, help="Rounds per target and level; medians are shown.")
        parser.add_argument("--duration", type=float, default=4.0, help="Seconds per round (closed loop).")
        parser.add_argument("--tokens", type=int, default=64, help="Tokens per answer (replay chunks; max_tokens).")
        parser.add_argument("--token-ms", type=float, default=5.0, help="Replay upstream: ms between tokens.")
        parser.add_argument("--servers", default="daphne,uvicorn",
                            help=f"ASGI servers to measure, from {','.join(SERVERS)}.")
        parser.add_argument("--processes", default="1", help="Gateway processes per server, a list: 1,2,4.")
        parser.add_argument("--rss-requests", type=int, default=0,
                            help="After the rounds, this many requests through each gateway, RSS before and after "
                                 "(0: skip; 10000 is the check).")
        parser.add_argument("--embedded", action="store_true",
                            help="Ignore DATABASE_URL / REDIS_URL: a temporary SQLite, live state in process.")
        parser.add_argument("--beside-embedded", action="store_true",
                            help="With DATABASE_URL (PostgreSQL) and REDIS_URL: also one embedded gateway per server "
                                 "(temporary SQLite, live state in process), measured in the same rounds; "
                                 "`manage.py judge_backends` judges the two back ends from this one report.")
        parser.add_argument("--no-reference", action="store_true",
                            help="Leave out the reference hop (a bare pass-through on the same server and upstream "
                                 "client, measured in the same rounds as direct and the gateway).")
        parser.add_argument("--consumer-hop", action="store_true",
                            help="Also measure the reference hop's work as a Channels AsyncHttpConsumer under "
                                 "URLRouter (research/gateway_bench/consumer_hop.py), in the same rounds.")
        parser.add_argument("--json", default=None, help="Write every number to this file.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["rounds"] < 1 or options["duration"] <= 0 or options["tokens"] < 1 or options["token_ms"] < 0:
            raise CommandError("--rounds and --tokens must be at least 1, --duration positive, --token-ms not negative")
        if options["rss_requests"] < 0:
            raise CommandError("--rss-requests must not be negative")
        if options["beside_embedded"] and options["embedded"]:
            raise CommandError("--beside-embedded measures the embedded gateway beside PostgreSQL + Redis: "
                               "leave out --embedded")
        bench = BenchOptions(
            upstreams=UPSTREAMS[options["upstream"]],
            streams=_positive_ints("--streams", options["streams"]) if options["streams"] else None,
            rounds=options["rounds"], duration_s=options["duration"], tokens=options["tokens"],
            token_ms=options["token_ms"], servers=_servers(options["servers"]),
            processes=_positive_ints("--processes", options["processes"]),
            rss_requests=options["rss_requests"], embedded=options["embedded"],
            reference=not options["no_reference"],
            consumer_hop=options["consumer_hop"] and not options["no_reference"],
            beside_embedded=options["beside_embedded"],
        )

        def say(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            report = run_bench(bench, say)
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            Path(options["json"]).write_text(json.dumps(report.as_dict(), indent=2, ensure_ascii=False) + "\n")
            say(f"\nwrote {options['json']}")
