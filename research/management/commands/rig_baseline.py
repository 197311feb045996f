"""`manage.py rig_baseline --worker NAME`: the whole baseline of docs/research/rig-baseline.md as
one command (research/rig_baseline.py), from the control plane; the rig's agent does the
engine-only and cold steps. Ctrl-C stops it and the worker is restored.

    manage.py rig_baseline --worker rig1-a
    manage.py rig_baseline --worker rig1-a --steps cold,warm --idle 60 --requests 10
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Worker
from fleet.rig_jobs import JobRefused
from research.metrics import parse_slo
from research.rig_baseline import STEPS, BaselineOptions, BaselineRefused, BaselineRunner, refuse_last_healthy


def _numbers(text: str, flag: str, kind: type = int) -> tuple[Any, ...]:
    try:
        values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise CommandError(f"{flag} {text!r}: expected numbers separated by commas") from None
    if any(value < (0 if kind is float else 1) for value in values):
        raise CommandError(f"{flag} {text!r}: too small a value")
    return values


class Command(BaseCommand):
    help = ("Take a rig worker's whole baseline (docs/research/rig-baseline.md): engine-only llama-bench through the "
            "rig agent, cold (--no-warmup), cold after idle, warm, concurrency, prompt-size and context sweeps, "
            "speculative on/off; stored as one baseline, with a Markdown report.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--worker", required=True, help="The rig worker's name as registered.")
        parser.add_argument("--force", action="store_true",
                            help="Take the pool's last healthy worker out of service for the baseline.")
        parser.add_argument("--steps", default=",".join(STEPS), help=f"A subset of {','.join(STEPS)}.")
        parser.add_argument("--requests", type=int, default=20, help="Warm run's measured requests (and per level).")
        parser.add_argument("--warmup", type=int, default=2)
        parser.add_argument("--prompt-tokens", type=int, default=20, help="Cold, idle and warm prompts.")
        parser.add_argument("--output-tokens", type=int, default=128)
        parser.add_argument("--concurrency", default="1,2,4,8")
        parser.add_argument("--concurrency-prompt-tokens", type=int, default=256)
        parser.add_argument("--prompt-sizes", default="1,8,16,20,32,64,512")
        parser.add_argument("--contexts", default="", help="Context sweep prompt sizes; default 8192, 16384, … "
                                                           "as far as the worker's context per slot allows.")
        parser.add_argument("--sweep-requests", type=int, default=5, help="Measured requests per sweep level.")
        parser.add_argument("--idle", default="60,300,900", help="Seconds of nothing before each idle request.")
        parser.add_argument("--engine-prompt", default="20,512", help="llama-bench -p.")
        parser.add_argument("--engine-repetitions", type=int, default=5, help="llama-bench -r.")
        parser.add_argument("--goodput", default="ttft:2000,tpot:100", help="SLOs for goodput (ms).")
        parser.add_argument("--job-timeout", type=float, default=1800.0, help="Seconds an agent job may take.")
        parser.add_argument("--report-dir", type=Path, default=Path(settings.BASE_DIR) / "docs" / "research")

    def handle(self, *args: Any, **options: Any) -> None:
        steps = tuple(step.strip() for step in options["steps"].split(",") if step.strip())
        unknown = [step for step in steps if step not in STEPS]
        if unknown or not steps:
            raise CommandError(f"--steps: unknown {', '.join(unknown) or 'none given'} (one of {', '.join(STEPS)})")
        for flag in ("requests", "prompt_tokens", "output_tokens", "sweep_requests", "engine_repetitions"):
            if options[flag] < 1:
                raise CommandError(f"--{flag.replace('_', '-')} must be at least 1")
        try:
            slo = parse_slo(options["goodput"]) if options["goodput"] else None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        worker = Worker.objects.select_related("model", "pool", "rig").filter(name=options["worker"]).first()
        if worker is None:
            raise CommandError(f"--worker {options['worker']!r}: no such worker")
        baseline_options = BaselineOptions(
            requests=options["requests"], warmup=options["warmup"], prompt_tokens=options["prompt_tokens"],
            output_tokens=options["output_tokens"], concurrency=_numbers(options["concurrency"], "--concurrency"),
            concurrency_prompt_tokens=options["concurrency_prompt_tokens"],
            prompt_sizes=_numbers(options["prompt_sizes"], "--prompt-sizes"),
            contexts=_numbers(options["contexts"], "--contexts"),
            idle_s=_numbers(options["idle"], "--idle", float),
            engine_prompt=_numbers(options["engine_prompt"], "--engine-prompt"),
            engine_repetitions=options["engine_repetitions"], sweep_requests=options["sweep_requests"],
            job_timeout_s=options["job_timeout"], steps=steps, slo=slo)
        runner = BaselineRunner(worker=worker, options=baseline_options, out=self.stdout.write,
                                report_dir=options["report_dir"])
        try:
            refuse_last_healthy(worker, force=options["force"])
            baseline = runner.run()
        except KeyboardInterrupt:
            raise CommandError("stopped with Ctrl-C; the worker was restored") from None
        except (BaselineRefused, JobRefused, RuntimeError, ValueError, OSError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"baseline {baseline.pk}")
