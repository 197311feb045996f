"""`python manage.py demo`: the whole system on one machine, for a newcomer.

Migrates, creates demo-teacher and demo-student, issues the student a fresh key, starts local
llama-server workers, serves the gateway with daphne, and prints how to use it. Ctrl-C or SIGTERM
stops everything it started (children also die with it if it is killed outright).
"""
from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import User
from accounts.services import key_issue, user_ensure
from fleet.embedded import local_worker_start, local_worker_stop
from fleet.local_worker import LlamaServerProcess, WorkerRuntimeMissing, _die_with_parent, free_port
from fleet.models import Worker
from fleet.services import worker_set_state

DEMO_WORKER_PREFIX = "demo-worker-"


class Command(BaseCommand):
    help = "Run the whole platform locally: gateway + N SmolLM2 workers, with demo users and a key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="Gateway port (default 8000).")
        parser.add_argument("--host", default="127.0.0.1", help="Gateway bind address (default 127.0.0.1).")
        parser.add_argument("--workers", type=int, default=1, help="Local llama-server workers to start (0: none).")
        parser.add_argument("--slots", type=int, default=4, help="Slots (--parallel) per worker.")

    def handle(self, *args: object, **options: object) -> None:
        port, host = int(options["port"]), str(options["host"])
        worker_count, slots = int(options["workers"]), int(options["slots"])
        if worker_count < 0:
            raise CommandError("--workers must be 0 or more")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())

        started_at = time.monotonic()
        call_command("migrate", verbosity=0, interactive=False)
        teacher_password, student_password = secrets.token_urlsafe(12), secrets.token_urlsafe(12)
        teacher, _ = user_ensure(username="demo-teacher", role=User.Role.TEACHER, password=teacher_password)
        if not teacher.is_superuser:
            teacher.is_superuser = True
            teacher.save(update_fields=["is_superuser"])
        student, _ = user_ensure(username="demo-student", role=User.Role.STUDENT, password=student_password)
        _key, raw_key = key_issue(user=student, name=f"demo {time.strftime('%Y-%m-%d %H:%M')}")

        for stale in Worker.objects.filter(name__startswith=DEMO_WORKER_PREFIX).exclude(state=Worker.State.DOWN):
            worker_set_state(worker=stale, state=Worker.State.DOWN, reason="demo restarted")

        log_dir = Path(settings.VAR_DIR) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        workers: list[tuple[LlamaServerProcess, Worker]] = []
        gateway: subprocess.Popen[bytes] | None = None
        try:
            for index in range(1, worker_count + 1):
                process, worker, seconds = local_worker_start(
                    name=f"{DEMO_WORKER_PREFIX}{index}", port=free_port(), pool="production", slots=slots,
                    log_dir=log_dir,
                )
                workers.append((process, worker))
                self._say(f"worker {worker.name}: healthy in {seconds:.1f} s ({worker.slots} slots, pid {process.pid})")
            gateway = self._start_gateway(host=host, port=port, log_path=log_dir / "gateway.log")
            self._print_ready(host=host, port=port, raw_key=raw_key, teacher_password=teacher_password,
                              student_password=student_password, seconds=time.monotonic() - started_at)
            while not stop.wait(0.5):
                if gateway.poll() is not None:
                    raise CommandError(f"the gateway exited with code {gateway.returncode}; see {log_dir / 'gateway.log'}")
        finally:
            self._say("stopping…")
            if gateway is not None and gateway.poll() is None:
                gateway.terminate()
                try:
                    gateway.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    gateway.kill()
            for process, worker in workers:
                local_worker_stop(process=process, worker=worker, reason="demo stopped")
            self._say("stopped")

    def _start_gateway(self, *, host: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "ocsweb.asgi:application"]
        log = open(log_path, "ab")
        gateway = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=_die_with_parent)
        probe_host = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if gateway.poll() is not None:
                raise CommandError(f"the gateway did not start (exit {gateway.returncode}); see {log_path}")
            try:
                if httpx.get(f"http://{probe_host}:{port}/healthz", timeout=1).status_code == 200:
                    return gateway
            except httpx.HTTPError:
                time.sleep(0.1)
        gateway.kill()
        raise CommandError(f"the gateway did not answer on port {port} within 60 s; see {log_path}")

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _print_ready(self, *, host: str, port: int, raw_key: str, teacher_password: str, student_password: str,
                     seconds: float) -> None:
        shown_host = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
        base_url = f"http://{shown_host}:{port}/v1"
        self._say(f"\nOCS Intelligence is up in {seconds:.1f} s. Admin: http://{shown_host}:{port}/admin/")
        self._say(f"  demo-teacher password: {teacher_password}")
        self._say(f"  demo-student password: {student_password}\n")
        self._say(f"OCS_BASE_URL={base_url}")
        self._say(f"OCS_API_KEY={raw_key}")
        self._say(
            "\nTry it with curl:\n"
            f"  curl -N {base_url}/chat/completions -H \"Authorization: Bearer {raw_key}\" \\\n"
            "    -H 'Content-Type: application/json' \\\n"
            "    -d '{\"model\": \"smollm2-135m-instruct\", \"stream\": true, "
            "\"messages\": [{\"role\": \"user\", \"content\": \"Say hello to the class\"}]}'\n"
            "\nor with the openai package:\n"
            "  from openai import OpenAI\n"
            f"  client = OpenAI(base_url=\"{base_url}\", api_key=\"{raw_key}\")\n"
            "  for chunk in client.chat.completions.create(model=\"smollm2-135m-instruct\", stream=True,\n"
            "          messages=[{\"role\": \"user\", \"content\": \"Say hello to the class\"}]):\n"
            "      print(chunk.choices[0].delta.content or \"\", end=\"\", flush=True) if chunk.choices else None\n"
            "\nCtrl-C stops the gateway and the workers."
        )
