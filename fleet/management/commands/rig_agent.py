from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.agent.config import AgentConfigError, load_agent_config
from fleet.agent.runner import RigAgentRunner

LAUNCHED = {"starting", "running"}


class Command(BaseCommand):
    help = ("Run on a rig: register with the control plane, launch and supervise one llama-server per "
            "logical worker in the config, and send heartbeats with GPU telemetry. See docs/rig.example.toml.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", required=True, type=Path, help="Path of the rig's TOML config.")
        parser.add_argument("--once", action="store_true", help="One round, print it, stop the workers, exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = load_agent_config(options["config"])
        except AgentConfigError as exc:
            raise CommandError(f"{options['config']}: {exc}") from None
        agent = RigAgentRunner(config)
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"rig {config.rig_name}: {len(config.workers)} worker(s), control plane "
                          f"{config.control_plane_url}"
                          + ("; a REHEARSAL: NVML faked, 8 made-up GTX 1070s (fleet/agent/rehearsal.py)"
                             if config.rehearsal else ""))
        try:
            while True:
                result = agent.run_round()
                states = ", ".join(f"{w['name']}={w['process_state']}" for w in result.workers)
                self.stdout.write(f"{result.gpu_status}; {states or 'no workers'}"
                                  + (f"; errors: {'; '.join(result.errors)}" if result.errors else ""))
                self.stdout.flush()
                if options["once"] or stop.wait(agent.next_wait_s()):
                    break
        finally:
            agent.stop()
        if options["once"]:
            # The installation check: it passes only if the control plane took the report and
            # every worker's llama-server was launched.
            idle = [w["name"] for w in result.workers if w["process_state"] not in LAUNCHED]
            if result.errors or idle or not result.registered:
                raise CommandError("the round failed: " + "; ".join(
                    result.errors + ([f"not launched: {', '.join(idle)}"] if idle else [])
                    + ([] if result.registered else ["not registered with the control plane"])))
