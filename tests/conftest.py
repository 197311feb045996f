"""Shared fixtures: personas, the back end in use, and the real processes of integration tests.

One llama-server (SmolLM2) and one gateway (uvicorn, the default server) are started per test session and shared by
every integration test; each test registers its own worker rows and keys.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings

from fleet.local_worker import free_port
from fleet.worker_keys import worker_key_new, worker_key_write

ROOT = Path(__file__).resolve().parent.parent
MODEL_ID = "smollm2-135m-instruct"
# The key every llama-server the fixtures start is launched with (--api-key-file), as the rig
# agent launches its own: register them with api_key=FIXTURE_WORKER_KEY, or they refuse the gateway.
FIXTURE_WORKER_KEY = worker_key_new()


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def pytest_sessionstart(session: pytest.Session) -> None:
    """With OCS_REQUIRE_SERVICES=1 (the PostgreSQL + Redis run) a missing service fails the run."""
    if os.environ.get("OCS_REQUIRE_SERVICES") != "1":
        return
    missing = []
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        missing.append("DATABASE_URL (postgres://…) is not set")
    if not os.environ.get("REDIS_URL"):
        missing.append("REDIS_URL is not set")
    if not _answers("127.0.0.1", 5432):
        missing.append("PostgreSQL does not answer on 127.0.0.1:5432")
    if not _answers("127.0.0.1", 6379):
        missing.append("Redis does not answer on 127.0.0.1:6379")
    if missing:
        pytest.exit("required services missing: " + "; ".join(missing), returncode=3)


@pytest.fixture(scope="session", autouse=True)
def _clean_live_namespace() -> Iterator[None]:
    """Redis keys of an earlier, killed run must not leak slot leases into this one; and the run
    leaves the shared Redis as it found it (its keys, and its tests' own `NAMESPACE-xxxx` ones,
    would otherwise sit there for up to a week of TTL)."""

    def clean() -> None:
        if settings.REDIS_URL:
            import redis

            client = redis.Redis.from_url(settings.REDIS_URL)
            for pattern in (f"{settings.OCS_LIVE_NAMESPACE}:*", f"{settings.OCS_LIVE_NAMESPACE}-*"):
                for key in client.scan_iter(pattern, count=1000):
                    client.delete(key)

    clean()
    yield
    clean()


@pytest.fixture(scope="session", autouse=True)
def _end_stray_database_sessions(django_db_setup, django_db_blocker) -> Iterator[None]:  # noqa: ANN001
    """Async code under test reads the database from executor threads (sync_to_async with
    thread_sensitive=False), whose connections outlive the test. On PostgreSQL they would keep
    the test database from being dropped at the end; end them first (torn down before
    django_db_setup, after every process fixture). Request-log rows still buffered in this process
    belong to tests whose data is gone: dropped, not written into a database about to be dropped
    (at exit they failed there and logged a traceback into a closed stream)."""
    yield
    from django.db import connection

    from inference import request_log

    if request_log._writer is not None:
        request_log._writer._rows.clear()

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture(autouse=True)
def _no_fleet_snapshot_from_an_earlier_test() -> None:
    """The in-process fleet snapshot lives FLEET_CACHE_TTL_S (1 s): one taken by the test before,
    on a busy machine less than a second ago, would hide this test's workers (seen once in CI:
    /readyz said "no healthy worker" right after a worker was registered)."""
    from fleet import selectors

    selectors._snapshot = None


@pytest.fixture(autouse=True)
def _drop_a_finished_tests_request_log_rows() -> Iterator[None]:
    """Rows this process buffered during a test belong to its data, rolled back at its end: the
    writer's thread must not write them during the next test, which may have no database."""
    yield
    from inference import request_log

    if request_log._writer is not None:
        request_log._writer._rows.clear()


# --- personas ----------------------------------------------------------------------------------


@pytest.fixture
def teacher(django_user_model):  # noqa: ANN001, ANN201
    from accounts.services import user_ensure

    return user_ensure(username="teacher", role="teacher", password="pw-teacher-1")[0]


@pytest.fixture
def student(django_user_model):  # noqa: ANN001, ANN201
    from accounts.services import user_ensure

    return user_ensure(username="alice", role="student", password="pw-alice-1")[0]


@pytest.fixture
def other_student(django_user_model):  # noqa: ANN001, ANN201
    from accounts.services import user_ensure

    return user_ensure(username="bob", role="student", password="pw-bob-1")[0]


@pytest.fixture
def taught_class(teacher, student, other_student):  # noqa: ANN001, ANN201
    """Class 7A, taught by `teacher`, with alice and bob in it: a teacher acts only on the
    students of their classes."""
    from accounts.models import Classroom, User

    room = Classroom.objects.create(name="7A")
    room.teachers.add(teacher)
    User.objects.filter(id__in=[student.id, other_student.id]).update(classroom=room)
    student.refresh_from_db()
    other_student.refresh_from_db()
    return room


# --- real processes ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fixture_key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FIXTURE_WORKER_KEY in a 0600 file, for llama-server's --api-key-file."""
    return worker_key_write(tmp_path_factory.mktemp("worker-keys") / "fixture.key", FIXTURE_WORKER_KEY)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory, fixture_key_file: Path) -> Iterator[str]:
    """One real llama-server with SmolLM2, shared by the session, launched with FIXTURE_WORKER_KEY.
    Yields its base URL."""
    from dataclasses import replace

    from fleet.embedded import local_worker_spec
    from fleet.local_worker import LlamaServerProcess

    spec = replace(local_worker_spec(port=free_port(), slots=4), api_key_file=fixture_key_file)
    log_path = tmp_path_factory.mktemp("llama") / "llama-server.log"
    process = LlamaServerProcess(spec, log_path=log_path).start()
    try:
        process.wait_healthy(120)
        yield spec.base_url
    finally:
        process.stop()


def database_url_for_subprocess() -> str:
    """The test database (as pytest-django set it up) as a DATABASE_URL for the gateway process."""
    from django.db import connection

    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{conf['NAME']}"
    auth = quote(conf["USER"] or "")
    if conf.get("PASSWORD"):
        auth += ":" + quote(conf["PASSWORD"])
    return f"postgres://{auth}@{conf['HOST'] or '127.0.0.1'}:{conf['PORT'] or 5432}/{conf['NAME']}"


def gateway_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        DATABASE_URL=database_url_for_subprocess(),
        DJANGO_SETTINGS_MODULE="ocsweb.settings",
        OCS_VAR_DIR=str(settings.VAR_DIR),
        OCS_LIVE_NAMESPACE=settings.OCS_LIVE_NAMESPACE,
        # The queue limit is shorter than a slot's lease, so a leaked slot fails the test with a
        # 429 instead of quietly expiring; both are long enough for a slow, shared CI machine.
        OCS_QUEUE_MAX_WAIT_S="60",
        OCS_SLOT_LEASE_S="120",
        OCS_DEFAULT_CONCURRENCY="20",
        OCS_DEFAULT_REQUESTS_PER_MINUTE="0",  # no cap unless a test sets one
        OCS_DEFAULT_TOKENS_PER_DAY="0",
        OCS_REQUEST_LOG_FLUSH_S="0.2",
        OCS_KEEPALIVE_S="0.5",
        PYTHONUNBUFFERED="1",
    )
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    env.update(overrides)
    return env


class Gateway:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.process, self.port, self.log_path = process, port, log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it has not stopped in `timeout_s` (a gateway drains its streams
    for up to 10 s first; a loaded CI machine needs more)."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_gateway(log_path: Path, port: int | None = None, **env_overrides: str) -> Gateway:
    port = port or free_port()
    env_overrides.setdefault("OCS_RUNS_BASE_URL", f"http://127.0.0.1:{port}")  # runs from its pages come back here
    log = open(log_path, "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "ocsweb.gateway", "-b", "127.0.0.1", "-p", str(port), "ocsweb.asgi:application"],
        cwd=ROOT, env=gateway_env(**env_overrides), stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gateway exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return Gateway(process, port, log_path)
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("gateway did not start within 60 s")


@pytest.fixture(scope="session")
def gateway(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Gateway]:  # noqa: ANN001
    """The gateway (uvicorn) serving ocsweb.asgi against the test database, for the whole session."""
    with django_db_blocker.unblock():
        running = start_gateway(tmp_path_factory.mktemp("gateway") / "gateway.log")
    try:
        yield running
    finally:
        stop_process(running.process)


@pytest.fixture
def worker(transactional_db, llama_server):  # noqa: ANN001, ANN201
    """The session's llama-server registered as a healthy production worker."""
    from fleet.services import worker_register

    return worker_register(
        name="it-worker", base_url=llama_server, model_id=MODEL_ID, pool_name="production", slots=4,
        context_length=4096, state="healthy", api_key=FIXTURE_WORKER_KEY,
    )


@pytest.fixture
def request_log_written():  # noqa: ANN201
    """The API logs each request in batches, from a thread: write this test's rows before its
    database goes (else a later test's thread meets a database it may not use)."""
    yield
    from inference import request_log

    if request_log._writer is not None:
        request_log._writer.flush()


@pytest.fixture
def student_key(transactional_db, student):  # noqa: ANN001, ANN201
    """(ApiKey row, raw key) for alice, in the production pool."""
    from accounts.services import key_issue

    return key_issue(user=student, name="laptop")


@pytest.fixture
def monitor(gateway, tmp_path):  # noqa: ANN001, ANN201
    """The real `fleet_monitor` against the test database, probing every 0.5 s."""
    log_path = tmp_path / "monitor.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "fleet_monitor", "--interval", "0.5"],
        cwd=ROOT, env=gateway_env(), stdout=open(log_path, "ab"), stderr=subprocess.STDOUT,
    )
    yield log_path
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def spare_llama_servers(tmp_path, fixture_key_file):  # noqa: ANN001, ANN201
    """Starts extra real llama-servers for one test (to kill or restart), launched with
    FIXTURE_WORKER_KEY; stops them after."""
    from dataclasses import replace

    from fleet.embedded import local_worker_spec
    from fleet.local_worker import LlamaServerProcess

    started: list[LlamaServerProcess] = []

    def start(port: int | None = None, slots: int = 4, context_per_slot: int = 4096,
              model_id: str = MODEL_ID) -> LlamaServerProcess:
        spec = replace(local_worker_spec(port=port or free_port(), slots=slots, context_per_slot=context_per_slot,
                                         model_id=model_id), api_key_file=fixture_key_file)
        process = LlamaServerProcess(spec, log_path=tmp_path / f"llama-{spec.port}.log").start()
        process.wait_healthy(120)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def wait_for(predicate, timeout_s: float, interval_s: float = 0.1):  # noqa: ANN001, ANN201
    """Poll until predicate() is truthy; returns its value, or None after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    return None


@pytest.fixture
def runs_cluster(gateway, tmp_path: Path):  # noqa: ANN001, ANN201
    """The real runs task cluster against the test database (and Redis, when the pass has it)."""
    log_path = tmp_path / "qcluster-runs.log"
    process = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT,
                               env=gateway_env(OCS_TASK_CLUSTER="runs"), stdout=open(log_path, "ab"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    yield log_path
    os.killpg(process.pid, signal.SIGTERM)  # the cluster and the workers it forked
    try:
        process.wait(timeout=1)
    except subprocess.TimeoutExpired:  # its sentinel waits on idle workers: nothing is left to finish
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
