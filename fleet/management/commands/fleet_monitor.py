from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandParser

from core.live import live_state
from fleet.health import probe_round
from fleet.hysteresis import HealthTracker


class Command(BaseCommand):
    help = "Probe every worker's /health and /slots every few seconds and keep their states current."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=1.0, help="Seconds between rounds (default 1).")
        parser.add_argument("--once", action="store_true", help="Run one round, print it, exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        asyncio.run(self._run(float(options["interval"]), bool(options["once"])))

    async def _run(self, interval_s: float, once: bool) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)  # finish the round in progress, then exit
        tracker, suspects = HealthTracker(), set[int]()
        async with httpx.AsyncClient(trust_env=False) as client:
            while True:
                report, suspects = await probe_round(tracker, client, suspects)
                for name, old, new, reason in report.transitions:
                    self.stdout.write(f"{name}: {old} -> {new} ({reason})")
                if once:
                    for name, observation in report.observations.items():
                        busy = report.busy_slots.get(name)
                        self.stdout.write(f"{name}: {'ok' if observation.ok else 'FAIL'} {observation.detail}"
                                          + (f", {busy} slot(s) processing" if busy is not None else ""))
                    waiting = live_state().queue_depths_sync()
                    self.stdout.write("waiting for a slot (pool:model): "
                                      + (", ".join(f"{line}={n}" for line, n in sorted(waiting.items())) or "none"))
                    return
                self.stdout.flush()
                try:
                    await asyncio.wait_for(stop.wait(), timeout=interval_s)
                    return
                except asyncio.TimeoutError:
                    continue
