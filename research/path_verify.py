"""The checks of `manage.py verify_path`, run from the control plane: the public URL (TLS,
/healthz, /readyz, the key), every registered worker over the private network (/health, a
refusal without its key, and a short streamed completion straight to it with its key), one
short streamed completion through the gateway to each worker, Copilot's Ollama discovery routes
and the Anthropic route.

Reaching each worker through the gateway: the gateway has no way for a client to name a worker.
The scheduler puts first the worker that served a conversation before (prompt-cache affinity,
fleet/scheduler.py rule 2), and that affinity lives in the shared live state (Redis). So, when
the key is in this database and live state is Redis, each check request opens a conversation of
its own and its affinity is set to the worker under test before it is sent; the request log row
(found by the check's unique User-Agent) then says which worker served it and the gateway's own
time to the worker's first byte. With in-process live state (one embedded gateway) nothing can
be steered: the row still says where each request went, and unreached workers are a warning.

Keys never appear in the output: targets and error details go through core.redact.
"""
from __future__ import annotations

import asyncio
import secrets
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError

from accounts.models import ApiKey
from core.keys import hash_key, parse_prefix
from core.redact import redact
from fleet.models import Pool, Worker
from fleet.scheduler import conversation_key
from fleet.worker_keys import worker_key_headers
from inference.admission.live import admission_live
from inference.models import RequestLog
from research.path_check import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    CheckResult,
    StreamTiming,
    WorkerTiming,
    certificate_check,
    is_stream_end,
    sse_data,
    stream_error,
)

USER_AGENT = "ocs-verify-path/1"
PROMPT = "Reply with the single word: ok"
MAX_TOKENS = 8
LOG_ROW_WAIT_S = 10.0  # the gateway writes its request log every OCS_REQUEST_LOG_FLUSH_S (1 s)


@dataclass
class WorkerRow:
    id: int
    name: str
    base_url: str
    state: str
    pool_id: int
    pool: str
    model_id: str
    api_key: str = field(default="", repr=False)  # the worker's own (fleet/worker_keys.py)


@dataclass
class KeyOwner:
    user_id: int
    pool_id: int
    pool: str


def _elapsed_ms(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:200]


class PathVerifier:
    def __init__(self, *, base_url: str, api_key: str, ca_file: str | None = None, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.ca_file = ca_file
        self.timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self.public = httpx.Client(base_url=self.base_url, timeout=self.timeout, verify=verify, trust_env=False)
        self.private = httpx.Client(timeout=self.timeout, trust_env=False)  # workers: never through a proxy
        self.results: list[CheckResult] = []
        self.timings: list[WorkerTiming] = []
        self.models: list[str] = []

    def close(self) -> None:
        self.public.close()
        self.private.close()

    def add(self, hop: str, target: str, outcome: str, latency_ms: float | None = None, detail: str = "") -> str:
        one_line = " ".join(detail.split())  # one row per hop, whatever the error text looks like
        self.results.append(CheckResult(hop=hop, target=redact(target), outcome=outcome, latency_ms=latency_ms,
                                        detail=redact(one_line)))
        return outcome

    # --- the public URL ------------------------------------------------------------------------

    def check_tls(self) -> None:
        parts = urlsplit(self.base_url)
        host, port = parts.hostname or "", parts.port or 443
        if parts.scheme != "https":
            self.add("public TLS", f"{host}:{parts.port or 80}", SKIP,
                     detail="plain http: no TLS to check (production uses https)")
            return
        context = ssl.create_default_context(cafile=self.ca_file)
        started = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=self.timeout.connect) as sock:
                with context.wrap_socket(sock, server_hostname=host) as tls:
                    certificate = tls.getpeercert()
                    version = tls.version()
        except (OSError, ssl.SSLError) as exc:
            self.add("public TLS", f"{host}:{port}", FAIL, _elapsed_ms(started), _why(exc))
            return
        latency = _elapsed_ms(started)
        if not certificate:
            self.add("public TLS", f"{host}:{port}", FAIL, latency, "the server sent no certificate")
            return
        not_after = ssl.cert_time_to_seconds(str(certificate["notAfter"]))
        outcome, detail = certificate_check(not_after_s=not_after, now_s=time.time())
        self.add("public TLS", f"{host}:{port}", outcome, latency, f"{version}, {detail}")

    def check_probe(self, path: str) -> None:
        started = time.monotonic()
        try:
            response = self.public.get(path)
        except httpx.HTTPError as exc:
            self.add("public", path, FAIL, _elapsed_ms(started), _why(exc))
            return
        latency = _elapsed_ms(started)
        detail = response.text.strip()[:120]
        self.add("public", path, PASS if response.status_code == 200 else FAIL, latency,
                 f"{response.status_code} {detail}")

    def check_key(self) -> None:
        started = time.monotonic()
        try:
            response = self.public.get("/v1/models", headers={"Authorization": f"Bearer {self.api_key}"})
        except httpx.HTTPError as exc:
            self.add("key", "/v1/models", FAIL, _elapsed_ms(started), _why(exc))
            return
        latency = _elapsed_ms(started)
        if response.status_code != 200:
            self.add("key", "/v1/models", FAIL, latency, f"{response.status_code} {response.text.strip()[:160]}")
            return
        self.models = [m["id"] for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
        self.add("key", "/v1/models", PASS if self.models else FAIL, latency,
                 f"200, models: {', '.join(self.models) or 'none for this key'}")

    # --- workers ---------------------------------------------------------------------------------

    def check_worker_health(self, worker: WorkerRow) -> tuple[bool, float | None]:
        started = time.monotonic()
        try:
            response = self.private.get(worker.base_url + "/health", timeout=min(self.timeout.read or 5.0, 5.0),
                                        headers=worker_key_headers(worker.api_key))
        except httpx.HTTPError as exc:
            self.add("worker /health (private)", worker.name, FAIL, _elapsed_ms(started),
                     f"{worker.base_url}: {_why(exc)}")
            return False, None
        latency = _elapsed_ms(started)
        ok = response.status_code == 200
        self.add("worker /health (private)", worker.name, PASS if ok else FAIL, latency,
                 f"{worker.base_url}: {response.status_code}"
                 + (" (still loading its model)" if response.status_code == 503 else ""))
        return ok, latency

    def check_worker_fenced(self, worker: WorkerRow) -> None:
        """The worker refuses a request without its key (so only the gateway can use it)."""
        started = time.monotonic()
        try:
            response = self.private.get(worker.base_url + "/slots", timeout=min(self.timeout.read or 5.0, 5.0))
        except httpx.HTTPError as exc:
            self.add("worker key (private)", worker.name, FAIL, _elapsed_ms(started), _why(exc))
            return
        latency = _elapsed_ms(started)
        if response.status_code == 401:
            self.add("worker key (private)", worker.name, PASS, latency, "401 without its key")
        elif not worker.api_key:
            self.add("worker key (private)", worker.name, WARN, latency,
                     f"{response.status_code} without a key: registered without one, it answers anyone who "
                     "reaches it (register_worker --api-key-file)")
        else:
            self.add("worker key (private)", worker.name, FAIL, latency,
                     f"{response.status_code} without its key: it was launched without --api-key-file")

    def stream(self, client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str]) -> StreamTiming:
        """POST a streaming request and time it as its client sees it. Raises httpx errors."""
        timing = StreamTiming()
        started = time.monotonic()
        with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                timing.error = f"{response.status_code} {response.text.strip()[:160]}"
                return timing
            buffer = ""
            for piece in response.iter_text():
                buffer += piece
                events, _, buffer = buffer.rpartition("\n\n")
                payloads = sse_data(events)
                if not payloads:
                    continue
                if timing.ttft_ms is None:
                    timing.ttft_ms = _elapsed_ms(started)
                timing.data_events += 1
                for payload in payloads:
                    timing.error = timing.error or stream_error(payload)
                    timing.finished = timing.finished or is_stream_end(payload)
        timing.total_ms = _elapsed_ms(started)
        return timing

    def check_worker_direct(self, worker: WorkerRow) -> float | None:
        body = {"model": worker.model_id, "stream": True, "max_tokens": MAX_TOKENS,
                "messages": [{"role": "user", "content": PROMPT}]}
        try:
            timing = self.stream(self.private, worker.base_url + "/v1/chat/completions", body,
                                 worker_key_headers(worker.api_key))
        except httpx.HTTPError as exc:
            self.add("worker stream (private)", worker.name, FAIL, None, _why(exc))
            return None
        ok = timing.finished and not timing.error and timing.ttft_ms is not None
        self.add("worker stream (private)", worker.name, PASS if ok else FAIL, timing.ttft_ms,
                 f"TTFT {timing.ttft_ms or 0:.0f} ms, {timing.data_events} reads, total {timing.total_ms or 0:.0f} ms"
                 if ok else (timing.error or "the stream ended without [DONE]"))
        return timing.ttft_ms if ok else None

    def check_gateway_to_worker(self, worker: WorkerRow, owner: KeyOwner | None,
                                usable_pools: set[int] | None) -> tuple[float | None, float | None, str, str]:
        """One streamed completion through the public URL meant for `worker`. Returns
        (end-to-end TTFT, gateway->worker TTFT, served by, outcome)."""
        hop = "gateway -> worker stream"
        if worker.state not in {"healthy", "degraded"}:
            self.add(hop, worker.name, SKIP, detail=f"state {worker.state}: the gateway sends it no requests")
            return None, None, "", SKIP
        if usable_pools is not None and worker.pool_id not in usable_pools:
            self.add(hop, worker.name, SKIP,
                     detail=f"pool {worker.pool} is not the key's pool; run again with a key of pool {worker.pool}")
            return None, None, "", SKIP
        nonce = secrets.token_hex(6)
        messages = [{"role": "user", "content": f"{PROMPT} (path check {nonce})"}]
        steered = owner is not None and self.steer(owner, worker, messages)
        user_agent = f"{USER_AGENT} {nonce}"
        body = {"model": worker.model_id, "stream": True, "max_tokens": MAX_TOKENS, "messages": messages}
        headers = {"Authorization": f"Bearer {self.api_key}", "User-Agent": user_agent,
                   # Honoured by a gateway that lets staff pin a worker; ignored otherwise.
                   "X-OCS-Worker": worker.name}
        try:
            timing = self.stream(self.public, "/v1/chat/completions", body, headers)
        except httpx.HTTPError as exc:
            self.add(hop, worker.name, FAIL, None, _why(exc))
            return None, None, "", FAIL
        if timing.error or not timing.finished:
            self.add(hop, worker.name, FAIL, timing.ttft_ms, timing.error or "the stream ended without [DONE]")
            return timing.ttft_ms, None, "", FAIL
        row = self.log_row(user_agent)
        served_by = row["worker_name"] if row else ""
        gateway_ttft = float(row["ttft_ms"]) if row and row["ttft_ms"] is not None else None
        summary = f"end-to-end TTFT {timing.ttft_ms or 0:.0f} ms, {timing.data_events} reads"
        if row is None:
            outcome = self.add(hop, worker.name, WARN, timing.ttft_ms,
                               f"{summary}; which worker served it is unknown: no request-log row in this "
                               "database (run verify_path on the control plane, with its environment)")
        elif served_by == worker.name:
            outcome = self.add(hop, worker.name, PASS, timing.ttft_ms, f"{summary}, served by {served_by}")
        elif row["retries"]:
            outcome = self.add(hop, worker.name, FAIL, timing.ttft_ms,
                               f"the gateway could not use {worker.name} and failed over to {served_by}")
        elif steered:
            outcome = self.add(hop, worker.name, WARN, timing.ttft_ms,
                               f"{summary}, served by {served_by}: {worker.name} was busy or not sound, so the "
                               "scheduler passed it over")
        else:
            outcome = self.add(hop, worker.name, WARN, timing.ttft_ms,
                               f"{summary}, served by {served_by}: the gateway chose (cannot steer with in-process "
                               "live state or an unknown key)")
        return timing.ttft_ms, gateway_ttft, served_by, outcome

    def steer(self, owner: KeyOwner, worker: WorkerRow, messages: list[dict[str, str]]) -> bool:
        """Point the scheduler's conversation affinity for this request at `worker` (shared live
        state only: a separate process cannot reach a gateway's in-process state)."""
        if not settings.REDIS_URL:
            return False
        conversation = conversation_key(user_id=owner.user_id, model_id=worker.model_id, messages=messages)
        try:
            asyncio.run(admission_live().set_affinity(conversation, worker.id, 120.0))
        except (OSError, RedisError) as exc:
            self.add("live state", "REDIS_URL", WARN, detail=f"cannot steer requests onto workers: {_why(exc)}")
            return False
        return True

    def log_row(self, user_agent: str) -> dict[str, Any] | None:
        deadline = time.monotonic() + LOG_ROW_WAIT_S
        while True:
            row = (RequestLog.objects.filter(user_agent=user_agent)
                   .values("worker_name", "ttft_ms", "retries", "status").first())
            if row is not None or time.monotonic() > deadline:
                return dict(row) if row is not None else None
            time.sleep(0.2)

    # --- the client protocols ----------------------------------------------------------------------

    def check_ollama(self) -> None:
        for route in ("api/version", "api/tags"):
            target = f"/ollama/{self.api_key}/{route}"
            started = time.monotonic()
            try:
                response = self.public.get(target)
            except httpx.HTTPError as exc:
                self.add("ollama", target, FAIL, _elapsed_ms(started), _why(exc))
                continue
            latency = _elapsed_ms(started)
            detail = f"{response.status_code}"
            ok = response.status_code == 200
            try:
                data = response.json()
            except ValueError:
                data, ok = None, False
            if ok and route == "api/version":
                ok = isinstance(data, dict) and "version" in data
                detail += f", version {data.get('version') if isinstance(data, dict) else '?'}"
            elif ok:
                names = [m.get("name") for m in (data or {}).get("models", []) if isinstance(m, dict)]
                ok = bool(names)
                detail += f", models: {', '.join(str(n) for n in names) or 'none'}"
            else:
                detail += f" {response.text.strip()[:160]}"
            self.add("ollama", target, PASS if ok else FAIL, latency, detail)

    def check_anthropic(self) -> None:
        if not self.models:
            self.add("anthropic", "/v1/messages", SKIP, detail="no model for this key (see the key check)")
            return
        body = {"model": self.models[0], "max_tokens": MAX_TOKENS, "stream": True,
                "messages": [{"role": "user", "content": PROMPT}]}
        headers = {"x-api-key": self.api_key, "anthropic-version": "2023-06-01", "User-Agent": USER_AGENT}
        try:
            timing = self.stream(self.public, "/v1/messages", body, headers)
        except httpx.HTTPError as exc:
            self.add("anthropic", "/v1/messages", FAIL, None, _why(exc))
            return
        ok = timing.finished and not timing.error
        self.add("anthropic", "/v1/messages", PASS if ok else FAIL, timing.ttft_ms,
                 f"streamed to message_stop, TTFT {timing.ttft_ms or 0:.0f} ms, model {self.models[0]}" if ok
                 else (timing.error or "the stream ended without message_stop"))


def registered_workers() -> list[WorkerRow]:
    return [WorkerRow(id=w.id, name=w.name, base_url=w.base_url.rstrip("/"), state=w.state, pool_id=w.pool_id,
                      pool=w.pool.name, model_id=w.model.public_id, api_key=w.api_key)
            for w in Worker.objects.select_related("pool", "model").order_by("name")]


def key_owner(raw_key: str) -> KeyOwner | None:
    """The key's user and pool, if the key belongs to this control plane's database."""
    prefix = parse_prefix(raw_key)
    if prefix is None:
        return None
    key = ApiKey.objects.select_related("pool").filter(prefix=prefix).first()
    if key is None or not secrets.compare_digest(key.secret_hash, hash_key(raw_key)):
        return None
    return KeyOwner(user_id=key.user_id, pool_id=key.pool_id, pool=key.pool.name)


def lending_pool_ids() -> set[int]:
    return set(Pool.objects.filter(may_lend=True).values_list("id", flat=True))


def pools_for(owner: KeyOwner, model_id: str, workers: list[WorkerRow], lending: set[int]) -> set[int]:
    """Pools whose workers the key's requests for `model_id` can reach now: its own pool, or the
    lending pools when its own has no routable worker for the model (fleet/scheduler.py rule 1)."""
    own = any(w.pool_id == owner.pool_id and w.model_id == model_id and w.state in {"healthy", "degraded"}
              for w in workers)
    return {owner.pool_id} if own else {owner.pool_id} | lending


def verify(*, base_url: str, api_key: str, ca_file: str | None = None, timeout_s: float = 60.0
           ) -> tuple[list[CheckResult], list[WorkerTiming]]:
    """Every check, in path order. Never raises for a broken hop: it becomes a FAIL result."""
    verifier = PathVerifier(base_url=base_url, api_key=api_key, ca_file=ca_file, timeout_s=timeout_s)
    try:
        verifier.check_tls()
        verifier.check_probe("/healthz")
        verifier.check_probe("/readyz")
        verifier.check_key()
        try:
            owner = key_owner(api_key)
            workers = registered_workers()
            lending = lending_pool_ids()
        except DatabaseError as exc:
            verifier.add("fleet database", "DATABASE_URL", FAIL,
                         detail=f"cannot read the registered workers: {_why(exc)} (run verify_path on the control "
                                "plane, with its environment: ocs-manage verify_path …)")
            owner, workers, lending = None, [], set()
        if not workers and not verifier.results[-1].hop == "fleet database":
            verifier.add("workers", "fleet database", FAIL, detail="no worker is registered")
        for worker in workers:
            if worker.state == "disabled":
                verifier.add("worker /health (private)", worker.name, SKIP, detail="disabled by a teacher or its agent")
                continue
            healthy, health_ms = verifier.check_worker_health(worker)
            if healthy:
                verifier.check_worker_fenced(worker)
            direct = verifier.check_worker_direct(worker) if healthy else None
            usable_pools = None if owner is None else pools_for(owner, worker.model_id, workers, lending)
            e2e, gateway_ttft, served_by, outcome = verifier.check_gateway_to_worker(worker, owner, usable_pools)
            if not healthy:
                outcome = FAIL
            verifier.timings.append(WorkerTiming(
                worker=worker.name, state=worker.state, pool=worker.pool, health_ms=health_ms, direct_ttft_ms=direct,
                gateway_to_worker_ttft_ms=gateway_ttft, end_to_end_ttft_ms=e2e, served_by=served_by, outcome=outcome))
        verifier.check_ollama()
        verifier.check_anthropic()
    finally:
        verifier.close()
    return verifier.results, verifier.timings

