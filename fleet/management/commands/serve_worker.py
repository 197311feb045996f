from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fleet.embedded import local_worker_start, local_worker_stop
from fleet.local_worker import free_port


class Command(BaseCommand):
    help = "Start one local llama-server (SmolLM2) on loopback and register it as a worker, until Ctrl-C/SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=0, help="Default: a free port.")
        parser.add_argument("--pool", default="production")
        parser.add_argument("--name", default=None, help="Default: local-<port>.")
        parser.add_argument("--slots", type=int, default=4, help="llama-server --parallel.")

    def handle(self, *args: Any, **options: Any) -> None:
        port = int(options["port"]) or free_port()
        name = str(options["name"] or f"local-{port}")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        process, worker, seconds = local_worker_start(
            name=name, port=port, pool=str(options["pool"]), slots=int(options["slots"])
        )
        self.stdout.write(f"worker {name} healthy in {seconds:.1f} s at {worker.base_url} (pid {process.pid})")
        self.stdout.flush()
        try:
            while not stop.wait(1.0):
                if not process.alive():
                    code = process.process.returncode if process.process else None
                    self.stderr.write(f"llama-server exited with code {code}")
                    break
        finally:
            local_worker_stop(process=process, worker=worker, reason="serve_worker stopped")
