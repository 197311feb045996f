"""`manage.py bench`: measure a worker or the gateway under a load, store the runs, write JSON.

    manage.py bench --base-url http://127.0.0.1:8081 --model smollm2-135m-instruct \
        --requests 20 --concurrency 1,2,4,8 --prompt-tokens 256 --output-tokens 64 \
        --warmup 2 --goodput ttft:2000,tpot:100 --json out.json
    manage.py bench --worker rig1-a --concurrency 1,4   # a registered worker, with its key
    manage.py bench --scenario slots-sweep --json slots.json   # launches local llama-servers
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Worker
from research import scenarios
from research.bench_levels import BenchOptions, bench_levels, format_level_line, idle_levels
from research.loadgen import server_root
from research.metrics import parse_slo


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--concurrency {text!r}: expected numbers like 1,2,4,8") from None
    if not values or any(v < 1 for v in values):
        raise CommandError(f"--concurrency {text!r}: each level must be at least 1")
    return values


def _positive_floats(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--rate {text!r}: expected requests per second, e.g. 2 or 0.5,1,2") from None
    if not values or any(not v > 0 for v in values):
        raise CommandError(f"--rate {text!r}: rates must be positive")
    return values


def _idle_gaps(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--idle {text!r}: expected seconds like 60,300,900") from None
    if not values or any(not v >= 0 for v in values):
        raise CommandError(f"--idle {text!r}: seconds cannot be negative")
    return values


def _worker_target(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """--worker NAME: the worker's address, model and key (workers refuse requests without it)."""
    worker = Worker.objects.select_related("model").filter(name=name).first()
    if worker is None:
        raise CommandError(f"--worker {name!r}: no such worker (see the admin's Fleet -> Workers)")
    if options["scenario"]:
        raise CommandError("--worker measures a registered worker: not with --scenario, which launches its own")
    return {"base_url": worker.base_url, "model": worker.model.public_id,
            "api_key": options["api_key"] or worker.api_key or None}


class Command(BaseCommand):
    help = ("Run a workload against a llama-server worker or the gateway (OpenAI chat, streaming), store "
            "one run per load level and print TTFT, TPOT (AIPerf's ITL), inter-chunk latency, E2E percentiles "
            "and throughputs.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", default="http://127.0.0.1:8081",
                            help="llama-server's root, or the gateway's root or /v1 URL (OCS_BASE_URL; then give --api-key).")
        parser.add_argument("--api-key", default=None,
                            help="A student key for the gateway (ocs-…), or a worker's own key (ocswk-…).")
        parser.add_argument("--worker", default=None,
                            help="A registered worker's name: its address, model and key come from the control "
                                 "plane (instead of --base-url, --model and --api-key).")
        parser.add_argument("--model", default="smollm2-135m-instruct")
        parser.add_argument("--requests", type=int, default=20, help="Measured requests per level.")
        parser.add_argument("--concurrency", default=None, help="Requests in flight; a list sweeps: 1,2,4,8.")
        parser.add_argument("--rate", default=None, help="Poisson arrivals per second instead (a list sweeps).")
        parser.add_argument("--prompt-tokens", type=int, default=256)
        parser.add_argument("--output-tokens", type=int, default=64)
        parser.add_argument("--prefix-tokens", type=int, default=0,
                            help="Give every request the same first N or so of its prompt tokens, so each finds "
                                 "them cached (cached vs uncached turns: the planner's context cost).")
        parser.add_argument("--warmup", type=int, default=1, help="Requests sent first and left out.")
        parser.add_argument("--goodput", default=None, help="SLOs for goodput, e.g. ttft:2000,tpot:100 (ms).")
        parser.add_argument("--json", default=None, help="Write every level's numbers to this file.")
        parser.add_argument("--scenario", default=None, choices=sorted(scenarios.SCENARIOS),
                            help="A named preset; most launch their own local llama-servers.")
        parser.add_argument("--label", default="", help="What this run varies, shown in the lists.")
        parser.add_argument("--experiment", type=int, default=None, help="Attach the runs to this experiment id.")
        parser.add_argument("--bandwidth-gbs", type=float, default=None,
                            help="Memory bandwidth for the roofline (default: from the worker's GPUs).")
        parser.add_argument("--threads", type=int, default=None, help="Scenarios: llama-server --threads.")
        parser.add_argument("--idle", default=None,
                            help="Cold start after idle: seconds of nothing before each single measured request, "
                                 "e.g. 60,300,900 (after one request to warm up).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["requests"] < 1:
            raise CommandError("--requests must be at least 1")
        if options["prompt_tokens"] < 1 or options["output_tokens"] < 1:
            raise CommandError("--prompt-tokens and --output-tokens must be at least 1")
        if not 0 <= options["prefix_tokens"] < options["prompt_tokens"]:
            raise CommandError("--prefix-tokens must be at least 0 and fewer than --prompt-tokens")
        if options["warmup"] < 0:
            raise CommandError("--warmup cannot be negative")
        if options["concurrency"] and options["rate"]:
            raise CommandError("give --concurrency or --rate, not both")
        idle = _idle_gaps(options["idle"]) if options["idle"] else None
        if idle and (options["scenario"] or options["concurrency"] or options["rate"]):
            raise CommandError("--idle sends one request at a time: not with --scenario, --concurrency or --rate")
        try:
            slo = parse_slo(options["goodput"]) if options["goodput"] else None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["worker"]:
            options = {**options, **_worker_target(str(options["worker"]), options)}
        bench = BenchOptions(
            base_url=server_root(options["base_url"]), api_key=options["api_key"], model=options["model"],
            requests=options["requests"],
            concurrency=_positive_ints(options["concurrency"]) if options["concurrency"] else None,
            rates=_positive_floats(options["rate"]) if options["rate"] else None,
            prompt_tokens=options["prompt_tokens"], output_tokens=options["output_tokens"],
            prefix_tokens=options["prefix_tokens"], warmup=options["warmup"], slo=slo, label=options["label"],
            experiment_id=options["experiment"],
            bandwidth_gbs=options["bandwidth_gbs"], threads=options["threads"],
        )
        try:
            if idle:
                report = idle_levels(bench, gaps_s=idle, out=self.stdout.write)
            elif options["scenario"]:
                report = scenarios.run_scenario(options["scenario"], bench, out=self.stdout.write)
            else:
                if not bench.concurrency and not bench.rates:
                    bench = bench.with_changes(concurrency=[1])
                report = bench_levels(bench, out=self.stdout.write)
        except (RuntimeError, ValueError, OSError) as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            Path(options["json"]).write_text(json.dumps(report, indent=2, default=str) + "\n")
            self.stdout.write(f"wrote {options['json']}")
        for level in report.get("levels", []):
            self.stdout.write(format_level_line(level))
