"""The load generator: a lean HTTP/1.1 client on raw asyncio streams, no Django.

Kept deliberately small so that its own cost per request is low and the same whichever target it
measures: one pre-built request per endpoint, a keep-alive pool, chunked decoding and a substring
test per SSE event. A target may have several endpoints (several gateway processes): new
connections go to them in turn.

Closed loop: N streams, each sending its next request as soon as its last one ended, until the
round's time is up; requests still running then are finished and counted. Each round starts with
one unmeasured request per stream, so every stream measures on a warm connection.

Time to first token (TTFT) runs from writing the request to the first SSE event whose delta has
non-empty content (the role-only first chunk does not count). A request is an error when the
status is not 200, the stream carries an error object, or it ends without `data: [DONE]`.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

CONTENT = re.compile(rb'"content":\s*"[^"]')
IDLE_LIMIT_S = 2.0  # a pooled connection idle longer is closed, not reused: servers expire idle ones (~5 s)
ROUND_GRACE_S = 120.0  # how long a round waits past its duration for its last requests
ERROR_SAMPLES = 5


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        host_port = base_url.removeprefix("http://").rstrip("/")
        host, _, port = host_port.rpartition(":")
        return cls(host, int(port))


@dataclass
class StreamResult:
    ok: bool
    ttft_ms: float | None = None
    content_chunks: int = 0
    error: str = ""
    last_token_ms: float | None = None  # from writing the request to its last content chunk
    end_ms: float | None = None  # from writing the request to the end of the response's body


@dataclass
class RoundResult:
    """What one round measured; durations in seconds, TTFT in milliseconds."""

    duration_s: float
    ttft_ms: list[float] = field(default_factory=list)
    # Per completed request: its last content chunk, and the wait from there to the end of the
    # response (the server's work after the answer, which a closed-loop client waits for too).
    last_token_ms: list[float] = field(default_factory=list)
    after_last_token_ms: list[float] = field(default_factory=list)
    completions: int = 0
    content_chunks: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def add(self, result: StreamResult) -> None:
        if result.ok:
            self.completions += 1
            self.content_chunks += result.content_chunks
            if result.ttft_ms is not None:
                self.ttft_ms.append(result.ttft_ms)
            if result.last_token_ms is not None and result.end_ms is not None:
                self.last_token_ms.append(result.last_token_ms)
                self.after_last_token_ms.append(result.end_ms - result.last_token_ms)
        else:
            self.errors += 1
            if len(self.error_samples) < ERROR_SAMPLES:
                self.error_samples.append(result.error)


class Connection:
    def __init__(self, endpoint: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.endpoint = endpoint
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """Idle keep-alive connections, and a round-robin over the endpoints for new ones."""

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        if not endpoints:
            raise ValueError("a pool needs at least one endpoint")
        self.endpoints = list(endpoints)
        self._idle: list[Connection] = []
        self._next = 0

    async def acquire(self) -> tuple[Connection, bool]:
        """A connection and whether it was reused (a reused one may have been closed by the server)."""
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < IDLE_LIMIT_S:
                return connection, True
            connection.close()
        endpoint = self.endpoints[self._next % len(self.endpoints)]
        self._next += 1
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port, limit=1 << 20)
        return Connection(endpoint, reader, writer), False

    def release(self, connection: Connection) -> None:
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()


class ChatTarget:
    """One thing to measure: streaming chat completions at one or more endpoints."""

    def __init__(self, name: str, endpoints: Sequence[Endpoint], *, body: dict[str, Any],
                 api_key: str | None = None, path: str = "/v1/chat/completions") -> None:
        self.name = name
        self.pool = ConnectionPool(endpoints)
        payload = json.dumps(body, separators=(",", ":")).encode()
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.requests = {
            endpoint: (f"POST {path} HTTP/1.1\r\nHost: {endpoint.host}:{endpoint.port}\r\n"
                       f"Content-Type: application/json\r\nAccept: text/event-stream\r\n{auth}"
                       f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
            for endpoint in self.pool.endpoints
        }

    async def stream(self) -> StreamResult:
        """One streamed request. A reused connection that fails before any byte of an answer is
        dropped and the request sent again (the server closed it while it was idle, as browsers
        assume); on a new connection, that failure is an error."""
        while True:
            connection, reused = await self.pool.acquire()
            started = time.perf_counter()
            try:
                connection.writer.write(self.requests[connection.endpoint])
                head = await connection.reader.readuntil(b"\r\n\r\n")
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                connection.close()
                if reused and not (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                    continue
                return StreamResult(ok=False, error=f"no answer: {type(exc).__name__}")
            try:
                return await _read_answer(self.pool, connection, head, started)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                connection.close()
                return StreamResult(ok=False, error=f"broken answer: {type(exc).__name__}")

    def close(self) -> None:
        self.pool.close()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip().lower()
    return status, headers


async def _body_pieces(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readline()).strip():
                    pass
                return
            yield (await reader.readexactly(size + 2))[:-2]
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while piece := await reader.read(65536):
            yield piece


async def _read_answer(pool: ConnectionPool, connection: Connection, head: bytes, started: float) -> StreamResult:
    status, headers = _parse_head(head)
    framed = headers.get("transfer-encoding") == "chunked" or "content-length" in headers
    reusable = framed and headers.get("connection") != "close"
    result = StreamResult(ok=False)
    done = False
    error = ""
    buffer = b""
    async for piece in _body_pieces(connection.reader, headers):
        if status != 200:
            buffer += piece
            continue
        buffer += piece
        while (end := buffer.find(b"\n\n")) >= 0:
            event, buffer = buffer[:end], buffer[end + 2:]
            if event.startswith(b"data: {"):
                if CONTENT.search(event):
                    result.content_chunks += 1
                    result.last_token_ms = (time.perf_counter() - started) * 1000
                    if result.ttft_ms is None:
                        result.ttft_ms = result.last_token_ms
                elif b'"error"' in event and not error:
                    error = "error event: " + event[6:200].decode(errors="replace")
            elif event.startswith(b"data: [DONE]"):
                done = True
    result.end_ms = (time.perf_counter() - started) * 1000
    if reusable:
        pool.release(connection)
    else:
        connection.close()
    if status != 200:
        result.error = f"status {status}: {buffer[:200].decode(errors='replace')}"
    elif error:
        result.error = error
    elif not done:
        result.error = "stream ended without [DONE]"
    else:
        result.ok = True
    return result


async def warm_up(target: ChatTarget, *, streams: int) -> None:
    """One unmeasured request per stream, at once: every stream then has a warm connection."""
    await asyncio.gather(*(target.stream() for _ in range(streams)))


async def run_round(target: ChatTarget, *, streams: int, duration_s: float, warm: bool = True) -> RoundResult:
    """`streams` closed-loop streams for `duration_s`, after a warm-up unless `warm` is False;
    completions per second are counted over the time until the last request ended."""
    if warm:
        await warm_up(target, streams=streams)
    started = time.perf_counter()
    deadline = started + duration_s
    measured = RoundResult(duration_s=0.0)

    async def closed_loop() -> None:
        while time.perf_counter() < deadline:
            measured.add(await target.stream())

    await _bounded(measured, [closed_loop() for _ in range(streams)], duration_s + ROUND_GRACE_S)
    measured.duration_s = time.perf_counter() - started
    return measured


async def run_requests(target: ChatTarget, *, concurrency: int, requests: int) -> RoundResult:
    """Exactly `requests` requests, `concurrency` at a time (the RSS check)."""
    started = time.perf_counter()
    measured = RoundResult(duration_s=0.0)
    remaining = requests

    async def closed_loop() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            measured.add(await target.stream())

    await _bounded(measured, [closed_loop() for _ in range(concurrency)], max(60.0, requests * 1.0))
    measured.duration_s = time.perf_counter() - started
    return measured


async def _bounded(measured: RoundResult, loops: list[Coroutine[Any, Any, None]], timeout_s: float) -> None:
    """Run the loops; a round the server stalls is cut off, each unfinished stream an error."""
    tasks = [asyncio.ensure_future(loop) for loop in loops]
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
        measured.add(StreamResult(ok=False, error=f"timed out after {timeout_s:.0f} s"))
    if pending:
        await asyncio.wait(pending)
