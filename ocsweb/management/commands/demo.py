"""`python manage.py demo`: the whole system on one machine, for a newcomer.

It runs the same parts as production: the gateway (uvicorn), the health monitor (fleet_monitor),
the django-q2 cluster for periodic sweeps, and a rig agent that launches and supervises N local
llama-server workers (SmolLM2, CPU) and registers them over the agent API. It creates
demo-teacher and demo-student, issues the student a fresh key and prints how to use it.
Ctrl-C or SIGTERM stops everything it started; children also die if it is killed outright.

`--rehearsal` rehearses rig day (docs/research/rig-baseline.md): instead of the in-process agent,
the real `rig_agent` command runs as a rig would, from a rig-side directory of its own
(`<var>/rehearsal-rig/`: its config, token, logs and `models/`, the one place the model file is
reached from), with `telemetry = "rehearsal"`: 8 GTX 1070s faked at NVML's boundary, the workers
given GPU subsets (2 workers x 4 cards by default). The rig is marked a rehearsal everywhere it
shows, and its runs never count as rig evidence.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Classroom, User
from accounts.services import key_issue, key_revoke, user_ensure
from fleet.agent.config import AgentConfig, WorkerConfig
from fleet.agent.rehearsal import GPU_COUNT as REHEARSAL_GPU_COUNT
from fleet.agent.runner import RigAgentRunner
from fleet.embedded import PER_SLOT_CONTEXT, local_launch_options
from fleet.local_worker import (
    DEFAULT_MODEL_ID,
    MIN_BATCH_SIZE,
    NATIVE_CONTEXT,
    LaunchOptions,
    die_with_parent,
    find_default_model,
    find_llama_server,
    free_port,
    local_threads,
)
from fleet.models import Worker
from fleet.scheduler import LANE_TOKENS
from fleet.rigs import rig_create, rig_workers_reset
from fleet.services import catalog_model_ensure
from portal.site_address import site_url_record

DEMO_RIG = "demo-rig"
DEMO_WORKER_PREFIX = "demo-worker-"
REHEARSAL_RIG = "rehearsal-rig"
REHEARSAL_WORKERS = 2  # x 4 cards: the layout docs/rig.example.toml describes
STOP_WITHIN_S = 30.0  # Ctrl-C to the prompt: what is still running then is killed
CLUSTERS = ("tasks", "runs")  # django-q2 clusters: a process group each, stopped as a whole
# (slots, tokens per slot)
PROFILES = {"default": (4, PER_SLOT_CONTEXT), "agents": (1, 4 * NATIVE_CONTEXT)}


DEMO_CLASS = "Demo class"


def demo_people(*, teacher_password: str, student_password: str) -> tuple[User, User, Classroom]:
    """demo-teacher (an admin, and the teacher of the demo class) and demo-student, in the demo
    class unless a teacher has moved them elsewhere: every class feature (pause, class limits,
    budgets, the near-limit list, the landing page) can be tried at once."""
    teacher, _ = user_ensure(username="demo-teacher", role=User.Role.TEACHER, password=teacher_password)
    if not teacher.is_superuser:
        teacher.is_superuser = True
        teacher.save(update_fields=["is_superuser"])
    student, _ = user_ensure(username="demo-student", role=User.Role.STUDENT, password=student_password)
    room, _ = Classroom.objects.get_or_create(name=DEMO_CLASS)
    room.teachers.add(teacher)
    if student.classroom_id is None:
        student.classroom = room
        student.save(update_fields=["classroom"])
    return teacher, student, room


DEMO_MODEL_DESCRIPTION = "SmolLM2 135M: a tiny model for trying the platform, quick and often wrong"


def demo_model_ensure(context: int) -> None:
    """The demo's catalogue model, with the one line the chat page shows (unless a teacher wrote one)."""
    model = catalog_model_ensure(public_id=DEFAULT_MODEL_ID, context_length=context)
    if not model.description:
        model.description = DEMO_MODEL_DESCRIPTION
        model.save(update_fields=["description"])


class Command(BaseCommand):
    help = "Run the whole platform locally: gateway, monitor, task cluster and N SmolLM2 workers, with demo users."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="Gateway port (default 8000).")
        parser.add_argument("--host", default="127.0.0.1", help="Gateway bind address (default 127.0.0.1).")
        parser.add_argument("--workers", type=int, default=None,
                            help="Local llama-server workers to start (0: none; default 1, with --rehearsal "
                                 f"{REHEARSAL_WORKERS}).")
        parser.add_argument("--slots", type=int, default=None,
                            help="Slots (--parallel) per worker: requests it decodes at once (default 4).")
        parser.add_argument("--context", type=int, default=None,
                            help=f"Tokens one request can use (context per slot; default {PER_SLOT_CONTEXT}). "
                                 f"Above the model's native {NATIVE_CONTEXT}, YaRN stretches it (up to 4x).")
        parser.add_argument("--batch-size", type=int, default=None,
                            help="Prompt tokens per step of each worker's loop (llama-server's --batch-size; "
                                 "default its own, 2048). Smaller lets a short question through sooner beside "
                                 "long prompts (docs/classroom.md).")
        parser.add_argument("--lane-workers", type=int, default=0, metavar="N",
                            help="Keep the last N workers for short prompts (lane workers: a quick question is "
                                 "not queued behind the class's agents; docs/classroom.md).")
        parser.add_argument("--lane-tokens", type=int, default=LANE_TOKENS, metavar="T",
                            help=f"A lane worker takes prompts of at most T tokens (default {LANE_TOKENS}).")
        parser.add_argument("--profile", choices=sorted(PROFILES), default="default",
                            help="default: 4 slots of 4,096 tokens, for chat. agents: 1 slot of 32,768 tokens "
                                 "(YaRN), which holds the 5-20k-token prompts of Claude Code, Copilot and Codex.")
        parser.add_argument("--rehearsal", action="store_true",
                            help="Rehearse rig day: the real rig agent, from a rig-side directory under the var "
                                 f"dir, with NVML faked ({REHEARSAL_GPU_COUNT} GTX 1070s) and the workers given GPU "
                                 "subsets as on a rig (docs/research/rig-baseline.md).")

    def handle(self, *args: Any, **options: Any) -> None:
        port, host = int(options["port"]), str(options["host"])
        profile_slots, profile_context = PROFILES[options["profile"]]
        rehearsal = bool(options["rehearsal"])
        worker_count = int(options["workers"] if options["workers"] is not None
                           else REHEARSAL_WORKERS if rehearsal else 1)
        slots = int(options["slots"] or profile_slots)
        context = int(options["context"] or profile_context)
        batch_size = options["batch_size"]
        lane_workers, lane_tokens = int(options["lane_workers"]), int(options["lane_tokens"])
        if not 0 <= lane_workers < max(1, worker_count) or lane_tokens < 1:
            raise CommandError("--lane-workers must be 0 or more and fewer than --workers (the agents need one), "
                               "--lane-tokens 1 or more")
        lanes = {"count": lane_workers, "tokens": lane_tokens}
        if worker_count < 0 or slots < 1 or context < 512 or (batch_size is not None and batch_size < MIN_BATCH_SIZE):
            raise CommandError("--workers must be 0 or more, --slots 1 or more, --context 512 or more "
                               f"and --batch-size {MIN_BATCH_SIZE} or more")
        if rehearsal and worker_count > REHEARSAL_GPU_COUNT:
            raise CommandError(f"--rehearsal: at most {REHEARSAL_GPU_COUNT} workers, one GPU or more each")
        try:
            launch = local_launch_options(context, batch_size=batch_size)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if worker_count:
            find_llama_server(), find_default_model()  # fail now, with the install hint, not in a thread
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())

        started_at = time.monotonic()
        call_command("migrate", verbosity=0, interactive=False)
        call_command("collectstatic", verbosity=0, interactive=False)  # the portal's and admin's CSS, served by WhiteNoise
        teacher_password, student_password = secrets.token_urlsafe(12), secrets.token_urlsafe(12)
        _teacher, student, _room = demo_people(teacher_password=teacher_password, student_password=student_password)
        for previous in student.api_keys.filter(revoked_at__isnull=True, name__startswith="demo "):
            key_revoke(key=previous)  # the key this command printed at its last start
        _key, raw_key = key_issue(user=student, name=f"demo {time.strftime('%Y-%m-%d %H:%M')}")

        log_dir = Path(settings.VAR_DIR) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        children: list[tuple[str, subprocess.Popen[bytes]]] = []
        agent: RigAgentRunner | None = None
        agent_thread: threading.Thread | None = None
        rig_agent: subprocess.Popen[bytes] | None = None  # --rehearsal: the rig agent as a process of its own
        local = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
        # Runs started from the web call this gateway (settings.OCS_RUNS_BASE_URL): the children inherit it.
        os.environ.setdefault("OCS_RUNS_BASE_URL", f"http://{local}:{port}")
        site_url_record(url=f"http://{local}:{port}")  # the links import_students prints open this demo
        try:
            children.append(("gateway", self._spawn(
                ["-m", "ocsweb.gateway", "-b", host, "-p", str(port), "ocsweb.asgi:application"], log_dir / "gateway.log")))
            self._wait_for_gateway(children[0][1], f"http://{local}:{port}", log_dir)
            children.append(("monitor", self._spawn(["manage.py", "fleet_monitor"], log_dir / "monitor.log")))
            # django-q2 forks its own workers, which do not inherit the die-with-parent signal:
            # it gets a process group of its own, stopped as a whole.
            children.append(("tasks", self._spawn(["manage.py", "qcluster"], log_dir / "qcluster.log")))
            # Runs started from /research/start/: a cluster of their own (ocsweb/settings.py).
            children.append(("runs", self._spawn(["manage.py", "qcluster"], log_dir / "qcluster-runs.log",
                                                 env={"OCS_TASK_CLUSTER": "runs"})))

            if rehearsal:
                rig_dir = Path(settings.VAR_DIR) / REHEARSAL_RIG
                rig_agent = self._rehearsal_agent(control_plane=f"http://{local}:{port}", rig_dir=rig_dir,
                                                  count=worker_count, slots=slots, context=context, launch=launch,
                                                  lanes=lanes)
                self._wait_for_rig_workers(rig_agent, worker_count, stop, rig_dir)
            else:
                agent = self._agent(control_plane=f"http://{local}:{port}", count=worker_count, slots=slots,
                                    context=context, launch=launch, log_dir=log_dir, lanes=lanes)
                agent_thread = threading.Thread(target=self._run_agent, args=(agent, stop), name="demo-rig-agent",
                                                daemon=True)
                agent_thread.start()
                self._wait_for_workers(agent, worker_count, stop, children)
            self._print_ready(host=local, port=port, raw_key=raw_key, teacher_password=teacher_password,
                              student_password=student_password, seconds=time.monotonic() - started_at)
            while not stop.wait(0.5):
                for name, process in children + ([("rig agent", rig_agent)] if rig_agent is not None else []):
                    if process.poll() is not None:
                        logs = Path(settings.VAR_DIR) / REHEARSAL_RIG / "logs" if name == "rig agent" else log_dir
                        raise CommandError(f"the {name} exited with code {process.returncode}; see {logs}")
        finally:
            self._stop_all(stop, agent_thread, rig_agent, children)

    def _stop_all(self, stop: threading.Event, agent_thread: threading.Thread | None,
                  rig_agent: subprocess.Popen[bytes] | None, children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
        """Stops everything within STOP_WITHIN_S: the workers first (the agent reports them stopped
        while the gateway still answers), then the children, signalled together. A part that has not
        stopped by its share of the time is killed, and the last line says which."""
        started = time.monotonic()
        deadline = started + STOP_WITHIN_S

        def left(cap: float) -> float:
            return max(0.0, min(cap, deadline - time.monotonic()))

        self._say("stopping…")
        stop.set()
        killed: list[str] = []
        if agent_thread is not None:
            agent_thread.join(timeout=left(20))  # the agent stops its workers and reports them stopped
            if agent_thread.is_alive():  # its llama-servers die with this process (die_with_parent)
                killed.append("the workers")
        if rig_agent is not None:
            self._signal("rig agent", rig_agent, signal.SIGTERM)
            try:
                rig_agent.wait(timeout=left(20))
            except subprocess.TimeoutExpired:
                self._signal("rig agent", rig_agent, signal.SIGKILL)
                rig_agent.wait()
                killed.append("the rig agent")
        for name, process in reversed(children):
            self._signal(name, process, signal.SIGTERM)
        # All at once: each gets its own bound from now. The task clusters only run idempotent
        # sweeps: after 5 s their slow graceful stop is cut short, as planned, not reported.
        signalled = time.monotonic()
        running = list(children)
        while running:
            for name, process in list(running):
                bound = 5 if name in CLUSTERS else 15
                if process.poll() is not None:
                    running.remove((name, process))
                elif time.monotonic() - signalled > bound or left(bound) == 0:
                    self._signal(name, process, signal.SIGKILL)
                    process.wait()
                    running.remove((name, process))
                    if name not in CLUSTERS:
                        killed.append(f"the {name}")
            time.sleep(0.05)
        self._say(f"stopped in {time.monotonic() - started:.1f} s"
                  + (f" ({', '.join(killed)} killed: not stopped in time)" if killed else ""))

    def _spawn(self, args: list[str], log_path: Path, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.Popen[bytes]:
        # Each child gets a session of its own, away from the terminal's Ctrl-C: this command
        # stops them in order, the gateway last, so the agent can still report its workers
        # stopped. If this command dies outright, the die-with-parent signal stops them.
        return subprocess.Popen([sys.executable, *args], stdout=open(log_path, "ab"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd or settings.BASE_DIR, preexec_fn=die_with_parent,
                                start_new_session=True, env={**os.environ, **(env or {})})

    @staticmethod
    def _signal(name: str, process: subprocess.Popen[bytes], signum: int) -> None:
        try:
            if name in CLUSTERS:
                os.killpg(process.pid, signum)  # the cluster and the workers it forked
            elif process.poll() is None:
                process.send_signal(signum)
        except ProcessLookupError:
            pass

    def _wait_for_gateway(self, gateway: subprocess.Popen[bytes], url: str, log_dir: Path) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if gateway.poll() is not None:
                raise CommandError(f"the gateway did not start (exit {gateway.returncode}); see {log_dir}/gateway.log")
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise CommandError(f"the gateway did not answer at {url} within 60 s; see {log_dir}/gateway.log")

    def _agent(self, *, control_plane: str, count: int, slots: int, context: int, launch: LaunchOptions,
               log_dir: Path, lanes: dict[str, int]) -> RigAgentRunner:
        # The teacher's side (a rig cannot add catalogue models): the demo's model, told to
        # clients with its per-slot context.
        demo_model_ensure(context)
        rig, token = rig_create(name=DEMO_RIG, address="127.0.0.1")
        # Mark on start what the last run could not mark on stop (killed, or its gateway gone
        # before the agent reported the workers stopped): no stale `healthy` row may announce
        # readiness or draw requests while the new llama-servers load.
        rig_workers_reset(rig=rig, reason="demo started: the last run did not report this worker stopped")
        workers = tuple(
            WorkerConfig(name=f"{DEMO_WORKER_PREFIX}{i}", model_id=DEFAULT_MODEL_ID, port=free_port(),
                         context=context * slots, slots=slots, options=launch,
                         lane_tokens=lanes["tokens"] if i > count - lanes["count"] else 0)
            for i in range(1, count + 1)
        )
        config = AgentConfig(control_plane_url=control_plane, token=token, rig_name=DEMO_RIG, address="127.0.0.1",
                             heartbeat_s=1.0, log_dir=str(log_dir), workers=workers)
        return RigAgentRunner(config)

    def _rehearsal_agent(self, *, control_plane: str, rig_dir: Path, count: int, slots: int, context: int,
                         launch: LaunchOptions, lanes: dict[str, int]) -> subprocess.Popen[bytes]:
        """The rehearsal rig: its directory written as a rig's would be (rehearsal_rig_files), then
        the real rig agent started there. The workers' model path is relative to that directory,
        so the control plane cannot open it from its own: as on EC2, it works from what the agent
        reports (the GGUF facts)."""
        demo_model_ensure(context)
        rig, token = rig_create(name=REHEARSAL_RIG, address="127.0.0.1")
        rig_workers_reset(rig=rig, reason="demo started: the last run did not report this worker stopped")
        model = find_default_model()
        threads = max(1, local_threads() // max(1, count))  # the workers share this machine's cores
        config = rehearsal_rig_files(rig_dir=rig_dir, control_plane=control_plane, token=token, model=model,
                                     count=count, slots=slots, context=context, launch=launch, threads=threads,
                                     lanes=lanes)
        self._say(f"REHEARSAL: rig {REHEARSAL_RIG} is a rehearsal rig: {count} CPU llama-server worker(s) on "
                  f"{REHEARSAL_GPU_COUNT} faked GTX 1070s (NVML faked at the agent's boundary; GPU readings follow "
                  f"the workers' CPU use). Its runs are never rig evidence. Rig side: {rig_dir}")
        return self._spawn([str(Path(settings.BASE_DIR) / "manage.py"), "rig_agent", "--config", str(config)],
                           rig_dir / "logs" / "rig-agent.log", cwd=rig_dir)

    def _wait_for_rig_workers(self, rig_agent: subprocess.Popen[bytes], count: int, stop: threading.Event,
                              rig_dir: Path) -> None:
        """Until each of the rig's workers is healthy, as the control plane sees it (the agent is
        another process: its registration, heartbeats and the monitor's probes are all there is)."""
        started, reported = time.monotonic(), set[str]()
        while len(reported) < count:
            if stop.is_set():
                raise CommandError("interrupted while the workers were starting")
            if rig_agent.poll() is not None:
                raise CommandError(f"the rig agent exited with code {rig_agent.returncode}; "
                                   f"see {rig_dir}/logs/rig-agent.log")
            if time.monotonic() - started > 120:
                raise CommandError(f"workers not healthy after 120 s; see {rig_dir}/logs")
            for worker in Worker.objects.filter(rig__name=REHEARSAL_RIG, state=Worker.State.HEALTHY,
                                                process_pid__isnull=False).exclude(name__in=reported):
                reported.add(worker.name)
                gpus = ",".join(str(g) for g in worker.gpu_indices)
                self._say(f"worker {worker.name}: healthy in {time.monotonic() - started:.1f} s "
                          f"(GPUs {gpus}, {worker.slots} slots of {worker.context_per_slot} tokens, "
                          + (f"kept for prompts of at most {worker.lane_tokens} tokens, " if worker.lane_tokens else "")
                          + f"pid {worker.process_pid})")
            time.sleep(0.2)

    @staticmethod
    def _run_agent(agent: RigAgentRunner, stop: threading.Event) -> None:
        # llama-servers are children of this thread: their die-with-parent signal follows it.
        try:
            while True:
                agent.run_round()
                if stop.wait(agent.next_wait_s()):
                    break
        finally:
            agent.stop()

    def _wait_for_workers(self, agent: RigAgentRunner, count: int, stop: threading.Event,
                          children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
        names = [s.worker.name for s in agent.supervisors]
        started, reported = time.monotonic(), set[str]()
        while len(reported) < count:
            if stop.is_set():
                raise CommandError("interrupted while the workers were starting")
            if time.monotonic() - started > 120:
                raise CommandError(f"workers not healthy after 120 s; see {settings.VAR_DIR}/logs")
            healthy = set(Worker.objects.filter(name__in=names, state=Worker.State.HEALTHY).values_list("name", flat=True))
            for supervisor in agent.supervisors:
                name = supervisor.worker.name
                if name in healthy and name not in reported and supervisor.process is not None:
                    reported.add(name)
                    self._say(f"worker {name}: healthy in {time.monotonic() - started:.1f} s "
                              f"({supervisor.worker.slots} slots of {supervisor.worker.context // supervisor.worker.slots}"
                              f" tokens, pid {supervisor.process.pid})"
                              + (f", kept for prompts of at most {supervisor.worker.lane_tokens} tokens"
                                 if supervisor.worker.lane_tokens else ""))
            time.sleep(0.1)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _print_ready(self, *, host: str, port: int, raw_key: str, teacher_password: str, student_password: str,
                     seconds: float) -> None:
        base_url = f"http://{host}:{port}/v1"
        self._say(f"\nOCS Intelligence is up in {seconds:.1f} s. Portal: http://{host}:{port}/ "
                  f"(teacher: http://{host}:{port}/teacher/, admin: http://{host}:{port}/admin/)")
        self._say(f"  demo-teacher password: {teacher_password}")
        self._say(f"  demo-student password: {student_password}")
        self._say(f"  (new passwords and a new key at every start; demo-student is in the class \"{DEMO_CLASS}\")\n")
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
            "\nCtrl-C stops the gateway, the monitor and the workers."
        )


def gpu_blocks(count: int, *, gpus: int = REHEARSAL_GPU_COUNT) -> list[tuple[int, ...]]:
    """`gpus` cards in contiguous blocks, one per worker, as even as they go: 2 -> 0-3 and 4-7."""
    blocks, start = [], 0
    for index in range(count):
        size = gpus // count + (1 if index < gpus % count else 0)
        blocks.append(tuple(range(start, start + size)))
        start += size
    return blocks


def _toml(value: object) -> str:
    return json.dumps(value)  # a JSON string, number or list of them is TOML too


def rehearsal_rig_files(*, rig_dir: Path, control_plane: str, token: str, model: Path, count: int, slots: int,
                        context: int, launch: LaunchOptions, threads: int,
                        lanes: dict[str, int] | None = None) -> Path:
    """Writes the rehearsal rig's side: `rig.token` (0600), `models/` (a link to the model file:
    the rig's disk), `logs/` and `rig.toml`, a rig config like docs/rig.example.toml with
    `telemetry = "rehearsal"`. Returns the config's path."""
    (rig_dir / "logs").mkdir(parents=True, exist_ok=True)
    models = rig_dir / "models"
    models.mkdir(exist_ok=True)
    link = models / model.name
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(model.resolve())
    token_file = rig_dir / "rig.token"
    token_file.touch(mode=0o600, exist_ok=True)
    token_file.chmod(0o600)
    token_file.write_text(token + "\n")
    lines = [
        "# Written by `manage.py demo --rehearsal`: a rehearsal rig (docs/research/rig-baseline.md).",
        "[control_plane]",
        f"url = {_toml(control_plane)}",
        'token_file = "rig.token"',
        "",
        "[rig]",
        f"name = {_toml(REHEARSAL_RIG)}",
        'address = "127.0.0.1"',
        "heartbeat_s = 1",
        'telemetry = "rehearsal"  # NVML faked: 8 GTX 1070s whose readings follow the CPU workers',
        "",
        "[llama_server]",
        f"log_dir = {_toml(str(rig_dir / 'logs'))}",
    ]
    for index, gpus in enumerate(gpu_blocks(count)):
        name = f"{REHEARSAL_RIG}-{'abcdefgh'[index]}"  # rig1-a, rig1-b … as on a rig
        lines += [
            "",
            "[[workers]]",
            f"name = {_toml(name)}",
            f"model_id = {_toml(DEFAULT_MODEL_ID)}",
            # Relative: llama-server opens it from the rig's directory, the control plane cannot.
            f"model_path = {_toml(f'models/{model.name}')}",
            f"port = {free_port()}",
            f"gpus = {_toml(list(gpus))}",
            f"context = {context * slots}",
            f"slots = {slots}",
            f"threads = {threads}",
            'split_mode = "layer"',
        ]
        if lanes and index >= count - lanes["count"]:
            lines.append(f"lane_tokens = {lanes['tokens']}  # kept for short prompts")
        if launch.batch_size:
            lines.append(f"batch_size = {launch.batch_size}")
        if launch.rope_scaling:
            lines += [f"rope_scaling = {_toml(launch.rope_scaling)}", f"rope_scale = {launch.rope_scale:g}",
                      f"yarn_orig_ctx = {launch.yarn_orig_ctx}"]
    config = rig_dir / "rig.toml"
    config.write_text("\n".join(lines) + "\n")
    return config
