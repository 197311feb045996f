"""The gateway benchmark's run: start the upstreams and the gateway processes, measure direct
and gateway rounds alternately, check RSS, and hand back a Report. No Django imported: every
database step runs in a `manage.py` subprocess with the bench's own environment, so the bench
never touches the database of whoever runs it.

Back ends: the embedded default (a temporary OCS_VAR_DIR with SQLite, live state in process)
unless DATABASE_URL / REDIS_URL are set (and --embedded is not given). With PostgreSQL the bench
creates a database of its own and drops it at the end; with Redis it uses a live-state namespace
of its own and deletes its keys at the end. Several gateway processes need both. With
`beside_embedded` (PostgreSQL + Redis only), one embedded gateway per server runs too, on a
temporary SQLite and live state in its process, and is measured in the same rounds: the two back
ends compared side by side, against the same direct and reference-hop rounds.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import math
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from prometheus_client.parser import text_string_to_metric_families

from fleet.local_worker import (
    LaunchOptions,
    LlamaServerProcess,
    LlamaServerSpec,
    die_with_parent,
    find_default_model,
    free_port,
    local_threads,
)
from research.gateway_bench.client import ChatTarget, Endpoint, run_requests, run_round, warm_up
from research.gateway_bench.replay import DEFAULT_MODEL as REPLAY_MODEL
from research.gateway_bench.replay import new_event_loop
from research.gateway_bench.summary import (
    CONSUMER_HOP,
    DIRECT,
    REFERENCE,
    LevelStats,
    Report,
    RoundStats,
    RssGrowth,
    answer_lines,
    check_goals,
    goal_lines,
    level_table,
    step_lines,
    ratio_lines,
    rss_lines,
)

ROOT = Path(__file__).resolve().parents[2]
LLAMA_MODEL = "smollm2-135m-instruct"
PROMPT = [{"role": "user", "content": "Write a short poem about rivers."}]
DEFAULT_STREAMS = {"replay": (1, 8, 32, 128), "llama": (1, 4)}
SERVERS = ("daphne", "uvicorn", "granian", "hypercorn")
SERVER_MODULES = {"daphne": "daphne", "uvicorn": "uvicorn", "granian": "granian", "hypercorn": "hypercorn"}
VERSIONED = ("django", "daphne", "twisted", "uvicorn", "uvloop", "httptools", "granian", "hypercorn", "httpx")
RSS_CONCURRENCY = 32
RSS_WARM_UP_REQUESTS = 500
START_TIMEOUT_S = 60.0
EMBEDDED_SUFFIX = " embedded"  # the name's end of an embedded gateway measured beside PostgreSQL + Redis
Say = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    upstreams: tuple[str, ...] = ("replay",)
    streams: tuple[int, ...] | None = None  # None: DEFAULT_STREAMS per upstream
    rounds: int = 3
    duration_s: float = 4.0
    tokens: int = 64
    token_ms: float = 5.0
    servers: tuple[str, ...] = ("daphne", "uvicorn")
    processes: tuple[int, ...] = (1,)
    rss_requests: int = 0
    embedded: bool = False
    reference: bool = True  # measure the reference hop in the same rounds
    consumer_hop: bool = False  # and the same hop as a Channels AsyncHttpConsumer (consumer_hop.py)
    beside_embedded: bool = False  # also one embedded gateway per server, in the same rounds

    def levels(self, upstream: str) -> tuple[int, ...]:
        return self.streams or DEFAULT_STREAMS[upstream]


@dataclass
class GatewayGroup:
    """k processes of one ASGI server on k ports, sharing the bench's database and live state."""

    server: str
    processes: list[subprocess.Popen[bytes]]
    ports: list[int]
    logs: list[Path]
    server_header: str = ""
    key: str = ""  # the bench student's API key in this group's database
    embedded: bool = False  # the embedded gateway measured beside the bench's back end
    live_redis: bool = False  # its live state is on Redis (its round trips are counted)

    @property
    def name(self) -> str:
        return f"gateway {self.server} x{len(self.ports)}{EMBEDDED_SUFFIX if self.embedded else ''}"

    @property
    def endpoints(self) -> list[Endpoint]:
        return [Endpoint("127.0.0.1", port) for port in self.ports]


@dataclass
class Upstream:
    name: str
    base_url: str
    model: str
    slots: int
    extra_body: dict[str, object] = field(default_factory=dict)
    hop: subprocess.Popen[bytes] | None = None  # its reference hop's process
    hop_port: int = 0
    consumer_hop: subprocess.Popen[bytes] | None = None  # the same hop as a Channels consumer
    consumer_hop_port: int = 0


# --- processes ---------------------------------------------------------------------------------


def _get(url: str, timeout_s: float = 1.0) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, {}


TRIP_PREFIX = "trip "  # step_ms's keys for the round trips' times: "trip <op> <part>" (core/live.py round_trip)


@dataclass(frozen=True)
class GatewayCounters:
    """What the gateway processes' /metrics said at one moment, summed over processes: round
    trips to Redis, and per request step (inference/request_context.py STEPS) the seconds spent
    reaching it and how many requests did; per operation and part of the Redis round trips, the
    seconds and how many trips."""

    round_trips: float
    step_seconds: dict[str, float]
    step_counts: dict[str, float]
    # per (operation, part) of the live state's round trips (core/live.py ROUND_TRIP_SECONDS)
    trip_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    trip_counts: dict[tuple[str, str], float] = field(default_factory=dict)

    def step_ms_since(self, before: GatewayCounters) -> dict[str, float]:
        """Mean milliseconds per request spent reaching each step between `before` and now; then,
        as "trip <operation> <part>", the mean milliseconds of each operation's Redis round trips
        (part "all", and with the lean client "reply" and "resume")."""
        means: dict[str, float] = {}
        for step, count in self.step_counts.items():
            requests = count - before.step_counts.get(step, 0.0)
            if requests > 0:
                means[step] = 1000 * (self.step_seconds[step] - before.step_seconds.get(step, 0.0)) / requests
        for (op, part), count in self.trip_counts.items():
            trips = count - before.trip_counts.get((op, part), 0.0)
            if trips > 0:
                seconds = self.trip_seconds[(op, part)] - before.trip_seconds.get((op, part), 0.0)
                means[f"{TRIP_PREFIX}{op} {part}"] = 1000 * seconds / trips
        return means


def counters_of(texts: Iterable[str]) -> GatewayCounters:
    """The counters of the gateway processes whose /metrics texts these are, summed."""
    trips = 0.0
    seconds: defaultdict[str, float] = defaultdict(float)
    counts: defaultdict[str, float] = defaultdict(float)
    trip_seconds: defaultdict[tuple[str, str], float] = defaultdict(float)
    trip_counts: defaultdict[tuple[str, str], float] = defaultdict(float)
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, labels = sample.name, sample.labels
                if name == "ocs_live_state_round_trips_total":
                    trips += sample.value
                elif name == "ocs_request_step_seconds_sum":
                    seconds[labels["step"]] += sample.value
                elif name == "ocs_request_step_seconds_count":
                    counts[labels["step"]] += sample.value
                elif name == "ocs_live_state_round_trip_seconds_sum":
                    trip_seconds[(labels["op"], labels["part"])] += sample.value
                elif name == "ocs_live_state_round_trip_seconds_count":
                    trip_counts[(labels["op"], labels["part"])] += sample.value
    return GatewayCounters(round_trips=trips, step_seconds=dict(seconds), step_counts=dict(counts),
                           trip_seconds=dict(trip_seconds), trip_counts=dict(trip_counts))


def gateway_counters(ports: list[int]) -> GatewayCounters | None:
    """The gateway processes' counters so far (their /metrics); None if one cannot be read."""
    texts = []
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                texts.append(response.read().decode())
        except (OSError, urllib.error.URLError):
            return None
    return counters_of(texts)


def wait_answering(url: str, process: subprocess.Popen[bytes], log: Path | None,
                   timeout_s: float = START_TIMEOUT_S) -> dict[str, str]:
    """Block until `url` answers 200; returns the answer's headers. Raises with the log's tail
    if the process exits first or never answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise RuntimeError(f"{url}: the process exited with code {process.returncode}\n{tail}")
        try:
            status, headers = _get(url)
            if status == 200:
                return headers
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer 200 within {timeout_s:.0f} s")


def stop(process: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


GATEWAY_SERVERS = ("daphne", "uvicorn")  # what ocsweb.gateway runs (OCS_GATEWAY_SERVER)


def server_command(server: str, port: int) -> list[str]:
    """How each ASGI server is started on the gateway's application. daphne and uvicorn go
    through ocsweb.gateway (OCS_GATEWAY_SERVER picks one); granian and hypercorn are measured
    with their own CLIs, without the gateway's start-up guard and shutdown flush."""
    if server in GATEWAY_SERVERS:
        return [sys.executable, "-m", "ocsweb.gateway", "-b", "127.0.0.1", "-p", str(port),
                "--access-log", os.devnull, "ocsweb.asgi:application"]
    if server == "granian":
        loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
        return [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
                "--loop", loop, "--no-ws", "ocsweb.asgi:application"]
    if server == "hypercorn":
        return [sys.executable, "-m", "hypercorn", "-b", f"127.0.0.1:{port}", "ocsweb.asgi:application"]
    raise ValueError(f"unknown server {server!r}")


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (granian serves from child processes)."""
    found = [pid]
    index = 0
    while index < len(found):
        for task in Path(f"/proc/{found[index]}/task").glob("*"):
            with contextlib.suppress(OSError):
                found += [int(child) for child in (task / "children").read_text().split()]
        index += 1
    return found


def cpu_split(pids: list[int]) -> tuple[float, float]:
    """(user, system): the CPU seconds the processes have used so far (those still alive) running
    their own code, and in the kernel on their behalf (system calls: sockets, epoll)."""
    user = system = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user, system = user + int(fields[11]), system + int(fields[12])  # utime, stime (fields 14, 15 of stat(5))
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes have used so far (those still alive)."""
    return sum(cpu_split(pids))


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, stolen): CPU seconds all of this machine's cores have spent so far on anything but
    idling and waiting for I/O, and those its hypervisor gave to other machines (steal), from
    /proc/stat; (NaN, NaN) where there is none."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return math.nan, math.nan
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


SERVICES = ("redis-server", "postgres")  # the back end's processes (their name in /proc/<pid>/comm)


def service_pids() -> dict[str, list[int]]:
    """Every redis-server and postgres process on this machine now (PostgreSQL's backends too), by name."""
    found: dict[str, list[int]] = {name: [] for name in SERVICES}
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError, ValueError):
            name = comm.read_text().strip()
            if name in found:
                found[name].append(int(comm.parent.name))
    return found


def service_cpu_seconds() -> dict[str, float]:
    """The CPU seconds each service's processes alive now have used so far."""
    return {name: cpu_seconds(pids) for name, pids in service_pids().items()}


def rss_mb(pid: int) -> float:
    """VmRSS of a live process, in MB (2**20 bytes); NaN if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# --- the back end ------------------------------------------------------------------------------


class Backend:
    """The environment the bench's gateways and setup steps run with, and its clean-up."""

    def __init__(self, *, embedded: bool, var_dir: Path, say: Say) -> None:
        self.say = say
        self.var_dir = var_dir
        self.database_url = "" if embedded else os.environ.get("DATABASE_URL", "")
        self.redis_url = "" if embedded else os.environ.get("REDIS_URL", "")
        self.namespace = f"bench-{os.getpid()}-{secrets.token_hex(3)}"
        self.created_database = ""
        self._admin_url = ""

    @property
    def postgres(self) -> bool:
        return self.database_url.startswith(("postgres://", "postgresql://"))

    @property
    def multi_process(self) -> bool:
        return bool(self.redis_url) and self.postgres

    def describe(self) -> str:
        if not self.database_url and not self.redis_url:
            return "embedded default (SQLite in a temporary OCS_VAR_DIR, live state in process)"
        database = (f"PostgreSQL, database {self.created_database} made for this run" if self.created_database
                    else "DATABASE_URL" if self.database_url else "SQLite in a temporary OCS_VAR_DIR")
        live = f"Redis, namespace {self.namespace}" if self.redis_url else "live state in process"
        return f"{database}; {live}"

    def open(self) -> None:
        if self.postgres:
            import psycopg

            parts = urlsplit(self.database_url)
            self._admin_url = urlunsplit(parts._replace(path="/postgres"))
            name = f"ocs_bench_{os.getpid()}_{secrets.token_hex(3)}"
            with psycopg.connect(self._admin_url, autocommit=True) as connection:
                connection.execute(f'CREATE DATABASE "{name}"')
            self.created_database = name
            self.database_url = urlunsplit(parts._replace(path=f"/{name}"))

    def close(self) -> None:
        if self.created_database:
            import psycopg

            try:
                with psycopg.connect(self._admin_url, autocommit=True) as connection:
                    connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                       "WHERE datname = %s AND pid <> pg_backend_pid()", [self.created_database])
                    connection.execute(f'DROP DATABASE IF EXISTS "{self.created_database}"')
            except Exception as exc:  # clean-up must not hide the run's own outcome
                self.say(f"note: could not drop database {self.created_database}: {exc}")
        if self.redis_url:
            try:
                import redis

                client = redis.Redis.from_url(self.redis_url)
                for key in client.scan_iter(f"{self.namespace}:*"):
                    client.delete(key)
            except Exception as exc:
                self.say(f"note: could not delete Redis keys {self.namespace}:*: {exc}")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "OCS_ENV"}}
        env.update(DJANGO_SETTINGS_MODULE="ocsweb.settings", OCS_VAR_DIR=str(self.var_dir), OCS_ENV="development",
                   OCS_LIVE_NAMESPACE=self.namespace)
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        env.update(extra)
        return env


def gateway_limits(max_streams: int) -> dict[str, str]:
    """Limits on (every request takes its quota step) but never binding."""
    return {"OCS_DEFAULT_REQUESTS_PER_MINUTE": "100000000", "OCS_DEFAULT_TOKENS_PER_DAY": "100000000000",
            "OCS_DEFAULT_CONCURRENCY": str(max(256, 2 * max_streams))}


SETUP_SCRIPT = """
from django.core.management import call_command
from accounts.services import key_issue, key_revoke, user_ensure
call_command("migrate", verbosity=0)
user, _ = user_ensure(username="bench", role="student")
for name, url, model, slots in WORKERS:
    call_command("register_worker", "--name", name, "--url", url, "--model", model, "--slots", str(slots))
for old in user.api_keys.filter(revoked_at__isnull=True, name="bench_gateway"):
    key_revoke(key=old)
_, raw = key_issue(user=user, name="bench_gateway")
print("KEY=" + raw)
"""


def prepare_database(env: dict[str, str], upstreams: list[Upstream]) -> str:
    """Migrate, create the student `bench` and the workers (both idempotent), issue a key."""
    workers = [(f"bench-{u.name}", u.base_url, u.model, u.slots) for u in upstreams]
    script = f"WORKERS = {workers!r}\n" + SETUP_SCRIPT
    done = subprocess.run([sys.executable, "manage.py", "shell", "--no-imports", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"setting up the bench's database failed:\n{done.stderr[-3000:]}")
    for line in done.stdout.splitlines():
        if line.startswith("KEY="):
            return line[4:]
    raise RuntimeError(f"no key printed by the setup step:\n{done.stdout[-2000:]}")


# --- the run -----------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in VERSIONED:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


class BenchRun:
    def __init__(self, options: BenchOptions, say: Say) -> None:
        self.options = options
        self.say = say
        self.report = Report()
        self.stack = contextlib.ExitStack()
        self.var_dir = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="ocs-bench-")))
        self.backend = Backend(embedded=options.embedded, var_dir=self.var_dir, say=say)
        self.beside: Backend | None = None  # the embedded back end measured beside it
        self.upstreams: list[Upstream] = []
        self.gateways: list[GatewayGroup] = []

    def note(self, text: str) -> None:
        self.report.notes.append(text)
        self.say(f"note: {text}")

    def run(self) -> Report:
        try:
            self._run()
        finally:
            self.stack.close()
        return self.report

    def _run(self) -> None:
        options = self.options
        found = versions()
        self.report.machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "versions": found}
        self.say(f"machine: {os.cpu_count()} CPUs, {platform.platform()}")
        self.say("versions: " + ", ".join(f"{name} {version}" for name, version in found.items()))
        if options.beside_embedded and not self.backend.multi_process:
            raise RuntimeError("--beside-embedded needs REDIS_URL and a PostgreSQL DATABASE_URL: the embedded "
                               "gateway is measured beside that back end")
        self.backend.open()
        self.stack.callback(self.backend.close)
        max_streams = max(max(options.levels(u)) for u in options.upstreams)
        self._start_upstreams()
        if options.reference:
            self._start_reference_hops()
        env = self.backend.env(**gateway_limits(max_streams))
        key = prepare_database(env, self.upstreams)
        self._start_gateways(env, key=key, live_redis=bool(self.backend.redis_url))
        if options.beside_embedded:
            self._start_beside(max_streams)
        self.report.setup = {
            "backend": self.backend.describe(),
            **({"beside": self.beside.describe()} if self.beside is not None else {}),
            "upstreams": [{"name": u.name, "url": u.base_url, "model": u.model, "slots": u.slots,
                           "reference_hop_port": u.hop_port or None,
                           "consumer_hop_port": u.consumer_hop_port or None} for u in self.upstreams],
            "gateways": [{"name": g.name, "server": g.server, "ports": g.ports, "server_header": g.server_header}
                         for g in self.gateways],
            "tokens": options.tokens, "token_ms": options.token_ms, "rounds": options.rounds,
            "duration_s": options.duration_s, "streams": {u: list(options.levels(u)) for u in options.upstreams},
            "client": "raw asyncio HTTP/1.1, " + ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio loop"),
        }
        self.say(f"back end: {self.backend.describe()}")
        if self.beside is not None:
            self.say(f"beside it, in the same rounds: {self.beside.describe()}")
        for upstream in self.upstreams:
            self.say(f"upstream {upstream.name}: {upstream.base_url} ({upstream.slots} slots, model {upstream.model})"
                     + (f"; its reference hop on port {upstream.hop_port}" if upstream.hop_port else ""))
        for group in self.gateways:
            self.say(f"{group.name}: ports {', '.join(map(str, group.ports))}, answers as "
                     f"'{group.server_header or '?'}'")
        self.say(f"workload: streaming chat completions, {options.tokens} tokens each (replay: {options.token_ms:g} ms "
                 f"apart); closed loop; {options.rounds} rounds of {options.duration_s:g} s per target and level, "
                 f"a direct round{' and a reference-hop round' if options.reference else ''} before each gateway "
                 f"round; limits on, not binding")
        if not self.gateways:
            self.note("no gateway could be started: nothing to compare")
            return
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(self._measure())
        measured = self.report.ratios()
        self.say("")
        for line in ratio_lines(measured):
            self.say(line)
        self.say("")
        for line in goal_lines(check_goals(measured)):
            self.say(line)
        if self.report.rss:
            self.say("")
            for line in rss_lines(self.report.rss):
                self.say(line)

    def _start_upstreams(self) -> None:
        options = self.options
        if "replay" in options.upstreams or options.rss_requests:
            slots = max(options.levels("replay") if "replay" in options.upstreams else (1,))
            slots = max(slots, RSS_CONCURRENCY if options.rss_requests else 1)
            port = free_port()
            log = self.var_dir / "replay.log"
            process = subprocess.Popen(
                [sys.executable, "-m", "research.gateway_bench.replay", "--port", str(port), "--tokens",
                 str(options.tokens), "--token-ms", str(options.token_ms), "--slots", str(slots)],
                cwd=ROOT, stdout=self.stack.enter_context(open(log, "ab")), stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
            self.stack.callback(stop, process)
            base_url = f"http://127.0.0.1:{port}"
            wait_answering(base_url + "/health", process, log, timeout_s=20)
            self.upstreams.append(Upstream("replay", base_url, REPLAY_MODEL, slots))
        if "llama" in options.upstreams:
            slots = max(options.levels("llama"))
            spec = LlamaServerSpec(model_path=find_default_model(), port=free_port(), slots=slots,
                                   context=max(512, options.tokens + 256) * slots,
                                   options=LaunchOptions(threads=local_threads()))
            worker = LlamaServerProcess(spec, log_path=self.var_dir / "llama.log").start()
            self.stack.callback(worker.stop)
            worker.wait_healthy(120)
            self.upstreams.append(Upstream("llama", spec.base_url, LLAMA_MODEL, slots, {"ignore_eos": True}))

    def _start_reference_hops(self) -> None:
        """One bare pass-through (research/gateway_bench/reference_hop.py) in front of each
        upstream; with --consumer-hop, the same as a Channels consumer (consumer_hop.py) too."""
        for upstream in self.upstreams:
            started = self._start_hop("reference_hop", upstream)
            if started is not None:
                upstream.hop, upstream.hop_port = started
            if self.options.consumer_hop:
                started = self._start_hop("consumer_hop", upstream)
                if started is not None:
                    upstream.consumer_hop, upstream.consumer_hop_port = started

    def _start_hop(self, module: str, upstream: Upstream) -> tuple[subprocess.Popen[bytes], int] | None:
        port = free_port()
        log = self.var_dir / f"{module}-{upstream.name}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", f"research.gateway_bench.{module}", "--port", str(port),
             "--upstream", upstream.base_url],
            cwd=ROOT, stdout=self.stack.enter_context(open(log, "ab")), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.stack.callback(stop, process)
        try:
            wait_answering(f"http://127.0.0.1:{port}/healthz", process, log, timeout_s=20)
        except RuntimeError as exc:
            self.note(f"the {module.replace('_', ' ')} for {upstream.name} did not start: {exc}")
            return None
        return process, port

    def _start_beside(self, max_streams: int) -> None:
        """The embedded back end, one gateway process per server, measured in the same rounds."""
        var_dir = self.var_dir / "embedded"
        var_dir.mkdir()
        self.beside = Backend(embedded=True, var_dir=var_dir, say=self.say)
        env = self.beside.env(**gateway_limits(max_streams))
        self._start_gateways(env, key=prepare_database(env, self.upstreams), live_redis=False, embedded=True)

    def _start_gateways(self, env: dict[str, str], *, key: str, live_redis: bool, embedded: bool = False) -> None:
        for server in self.options.servers:
            if importlib.util.find_spec(SERVER_MODULES[server]) is None:
                if not embedded:
                    self.note(f"{server} is not installed: skipped")
                continue
            for count in (1,) if embedded else self.options.processes:
                if count > 1 and not self.backend.multi_process:
                    self.note(f"{server} x{count} skipped: several gateway processes need REDIS_URL and a "
                              "PostgreSQL DATABASE_URL (the embedded default runs one)")
                    continue
                group = GatewayGroup(server=server, processes=[], ports=[], logs=[], key=key, embedded=embedded,
                                     live_redis=live_redis)
                try:
                    for index in range(count):
                        port = free_port()
                        log = self.var_dir / f"gateway-{server}-x{count}{'-embedded' if embedded else ''}-{index}.log"
                        process = subprocess.Popen(
                            server_command(server, port), cwd=ROOT, stdin=subprocess.DEVNULL,
                            env={**env, "OCS_GATEWAY_PROCESSES": str(count),
                                 **({"OCS_GATEWAY_SERVER": server} if server in GATEWAY_SERVERS else {})},
                            stdout=self.stack.enter_context(open(log, "ab")), stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent)
                        self.stack.callback(stop, process)
                        group.processes.append(process)
                        group.ports.append(port)
                        group.logs.append(log)
                    for process, port, log in zip(group.processes, group.ports, group.logs):
                        headers = wait_answering(f"http://127.0.0.1:{port}/healthz", process, log)
                        group.server_header = headers.get("server", "")
                except RuntimeError as exc:
                    self.note(f"{group.name} did not start: {exc}")
                    continue
                if server not in group.server_header.lower():
                    self.note(f"{group.name} answers as '{group.server_header}', not {server}")
                self.gateways.append(group)

    def _body(self, upstream: Upstream) -> dict[str, object]:
        return {"model": upstream.model, "messages": PROMPT, "stream": True, "max_tokens": self.options.tokens,
                **upstream.extra_body}

    def _targets(self, upstream: Upstream) -> tuple[ChatTarget, list[ChatTarget]]:
        body = self._body(upstream)
        direct = ChatTarget(DIRECT, [Endpoint.parse(upstream.base_url)], body=body)
        gateways = [ChatTarget(group.name, group.endpoints, body=body, api_key=group.key) for group in self.gateways]
        return direct, gateways

    def _hops(self, upstream: Upstream) -> list[tuple[ChatTarget, list[int]]]:
        """The hops measured beside each gateway round (the reference hop first), with their pids."""
        hops = [(REFERENCE, upstream.hop, upstream.hop_port), (CONSUMER_HOP, upstream.consumer_hop,
                                                                upstream.consumer_hop_port)]
        return [(ChatTarget(name, [Endpoint("127.0.0.1", port)], body=self._body(upstream)), process_tree(process.pid))
                for name, process, port in hops if process is not None]

    async def _measured_round(self, target: ChatTarget, streams: int, pids: list[int] | None,
                              group: GatewayGroup | None = None) -> RoundStats:
        """Warm up, then one round; with `pids`, the CPU those processes used during it; with
        `group` (its gateway processes), the round trips to Redis they made during it and the mean
        time its requests spent reaching each step."""
        ports = group.ports if group is not None else None
        await warm_up(target, streams=streams)
        cpu_before = cpu_split(pids) if pids else (0.0, 0.0)
        machine_before = machine_cpu_seconds()
        services_before = service_cpu_seconds()
        counters_before = gateway_counters(ports) if ports else None
        measured = await run_round(target, streams=streams, duration_s=self.options.duration_s, warm=False)
        user, system = (after - before for after, before in zip(cpu_split(pids), cpu_before)) if pids else (0.0, 0.0)
        machine = [after - before for after, before in zip(machine_cpu_seconds(), machine_before)]
        # A process that ended meanwhile (a PostgreSQL backend) is left out: never below zero.
        services = {name: max(0.0, seconds - services_before[name]) for name, seconds in service_cpu_seconds().items()}
        counters_after = gateway_counters(ports) if counters_before is not None and ports else None
        trips, step_ms = None, {}
        if counters_before is not None and counters_after is not None:
            if group is not None and group.live_redis:
                trips = counters_after.round_trips - counters_before.round_trips
            step_ms = counters_after.step_ms_since(counters_before)
        return RoundStats.of(measured, server_cpu_s=user + system if pids else None,
                             server_system_s=system if pids else None, live_round_trips=trips, step_ms=step_ms,
                             machine_cpu_s=(machine[0], machine[1], os.cpu_count() or 1),
                             redis_cpu_s=services["redis-server"], postgres_cpu_s=services["postgres"])

    async def _measure(self) -> None:
        options = self.options
        for upstream in self.upstreams:
            if upstream.name not in options.upstreams:
                continue
            direct, gateways = self._targets(upstream)
            hops = self._hops(upstream)
            try:
                for streams in options.levels(upstream.name):
                    results: dict[str, list[RoundStats]] = {
                        t.name: [] for t in [direct, *(hop for hop, _ in hops), *gateways]}
                    for _ in range(options.rounds):
                        for gateway, group in zip(gateways, self.gateways):
                            # Side by side: direct, the reference hop(s), then the gateway, every round.
                            results[direct.name].append(await self._measured_round(direct, streams, None))
                            for hop, hop_pids in hops:
                                results[hop.name].append(await self._measured_round(hop, streams, hop_pids))
                            pids = [pid for process in group.processes for pid in process_tree(process.pid)]
                            results[gateway.name].append(await self._measured_round(gateway, streams, pids, group))
                    levels = [LevelStats(upstream.name, streams, name, tuple(rounds))
                              for name, rounds in results.items()]
                    self.report.levels += levels
                    self.say("")
                    for line in level_table(levels, heading=(
                            f"{upstream.name} upstream, {streams} concurrent stream{'s' if streams > 1 else ''} "
                            f"(median of {options.rounds} rounds of {options.duration_s:g} s)")):
                        self.say(line)
                    for line in answer_lines(levels) + step_lines(levels):
                        self.say(line)
                    for level in levels:
                        for stats in level.rounds:
                            for sample in stats.error_samples:
                                self.say(f"  error ({level.target}): {sample}")
            finally:
                for target in (direct, *(hop for hop, _ in hops), *gateways):
                    target.close()
        if options.rss_requests:
            await self._measure_rss()

    async def _measure_rss(self) -> None:
        replay = next(u for u in self.upstreams if u.name == "replay")
        _, gateways = self._targets(replay)
        for group, target in zip(self.gateways, gateways):
            warm = await run_requests(target, concurrency=RSS_CONCURRENCY, requests=RSS_WARM_UP_REQUESTS)
            pids = [pid for process in group.processes for pid in process_tree(process.pid)]
            before = {pid: rss_mb(pid) for pid in pids}
            measured = await run_requests(target, concurrency=RSS_CONCURRENCY, requests=self.options.rss_requests)
            for pid in pids:
                self.report.rss.append(RssGrowth(group.name, pid, self.options.rss_requests, before[pid], rss_mb(pid),
                                                 warm.errors + measured.errors))
            target.close()


def run_bench(options: BenchOptions, say: Say) -> Report:
    return BenchRun(options, say).run()
