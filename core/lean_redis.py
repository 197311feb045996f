"""A lean asyncio Redis client for the gateway's live state: one connection per event loop,
every caller's commands written on it at once (pipelined) and their replies handed back in order.

Why not redis.asyncio: each of its round trips takes a connection from a pool (locks, a
connection per concurrent caller), wraps the read in timeouts and packs commands in Python; in
the gateway that was 0.3-0.5 ms of CPU per round trip and four of them per request
(docs/performance.md, "A connection of its own"). Redis answers the commands of one connection
in the order they were sent, so a single connection serves any number of concurrent callers:
each call appends its commands to the socket's buffer and waits on a future, and the protocol
hands each reply (parsed by hiredis, in C) to the oldest waiting call.

It speaks the subset the live state uses, with redis-py's return shapes for those commands
(HGETALL a dict, HINCRBYFLOAT a float, PEXPIRE a bool, SET True or None) and its errors
(redis.exceptions.ConnectionError, TimeoutError, ResponseError), so the code above it and its
error handling are the same for both clients. `OCS_LIVE_REDIS_CLIENT=redis-py` puts redis-py
back (core/live.py).

Failure: a connection that breaks, or a call that gets no reply within the socket timeout,
fails every call waiting on that connection (their replies can no longer be told apart) and the
next call connects again. A caller cancelled while waiting leaves its place in the line; its
reply, when it comes, is dropped.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import hiredis
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.live import LAST_TRIP


def _pairs_to_dict(reply: Any) -> Any:
    if not isinstance(reply, list):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def _to_float(reply: Any) -> Any:
    return float(reply) if reply is not None else None


# redis-py's response callbacks for the commands whose raw reply differs from what it returns.
_CALLBACKS: dict[str, Callable[[Any], Any]] = {
    "HGETALL": _pairs_to_dict,
    "HINCRBYFLOAT": _to_float,
    "PEXPIRE": bool,
    "SET": lambda r: True if r == b"OK" else None,
    "PING": lambda r: r == b"PONG",
}


class _Call:
    """One caller's place in the connection's line: how many replies it waits for."""

    __slots__ = ("future", "expected", "replies", "answered")

    def __init__(self, future: asyncio.Future[list[Any]], expected: int) -> None:
        self.future = future
        self.expected = expected
        self.replies: list[Any] = []
        self.answered = 0.0  # when its last reply arrived (time.perf_counter)


class _Protocol(asyncio.Protocol):
    def __init__(self, on_lost: Callable[[_Protocol], None]) -> None:
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.calls: deque[_Call] = deque()
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.lost: BaseException | None = None
        self._on_lost = on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        calls = self.calls
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                self.fail(RedisConnectionError(f"Redis protocol error: {exc}"))
                return
            if reply is False:
                return
            if not calls:  # a reply nobody asked for: the line is out of step
                self.fail(RedisConnectionError("Redis sent a reply nobody was waiting for"))
                return
            call = calls[0]
            call.replies.append(reply)
            if len(call.replies) == call.expected:
                calls.popleft()
                call.answered = time.perf_counter()
                if not call.future.done():
                    call.future.set_result(call.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"Redis closed the connection ({exc or 'end of stream'})"))

    def fail(self, exc: BaseException) -> None:
        """Fails every waiting call and closes the connection; the client connects again."""
        if self.lost is None:
            self.lost = exc
            self._on_lost(self)
        while self.calls:
            call = self.calls.popleft()
            if not call.future.done():
                call.future.set_exception(_fresh(exc))
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def _pack(commands: Iterable[tuple[Any, ...]]) -> bytes:
    return b"".join(hiredis.pack_command(command) for command in commands)


class LeanRedis:
    """The asyncio client the live state talks to (see the module's docstring). Its connection
    belongs to the event loop that made it; on another loop it connects again."""

    def __init__(self, url: str, *, connect_timeout_s: float, socket_timeout_s: float) -> None:
        # The URL read as redis-py reads it (its sync client shares it): host, port, db, username,
        # password, a unix socket's path, rediss:// and its ssl_cert_reqs / ssl_ca_certs.
        self._options = parse_url(url)
        self._tls = url.startswith("rediss://")
        self._connect_timeout_s = connect_timeout_s
        self._socket_timeout_s = socket_timeout_s
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[_Protocol] | None = None

    def _lost(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not self._tls:
            return None
        options = self._options
        context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
        if str(options.get("ssl_cert_reqs", "required")).lower() in ("none", "cert_none"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        options = self._options
        protocol = _Protocol(self._lost)
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                if "path" in options:
                    await loop.create_unix_connection(lambda: protocol, options["path"])
                else:
                    await loop.create_connection(lambda: protocol, options.get("host", "localhost"),
                                                 options.get("port", 6379), ssl=self._ssl_context())
        except TimeoutError as exc:
            raise RedisTimeoutError("Timeout connecting to Redis") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
        hello: list[tuple[Any, ...]] = []
        if options.get("password") is not None:
            user = options.get("username")
            hello.append(("AUTH", user, options["password"]) if user else ("AUTH", options["password"]))
        if options.get("db"):
            hello.append(("SELECT", int(options["db"])))
        if hello:
            try:
                replies = await self._send(protocol, hello)
            except BaseException:
                protocol.fail(RedisConnectionError("Redis did not answer AUTH / SELECT"))
                raise
            refused = [reply for reply in replies if isinstance(reply, ResponseError)]
            if refused:
                protocol.fail(RedisConnectionError(f"Redis refused AUTH / SELECT: {refused[0]}"))
                raise _fresh(protocol.lost)  # type: ignore[arg-type]
        return protocol

    async def _connection(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if protocol is not None:
            if protocol.loop is loop:
                return protocol
            self._protocol = None  # made on an event loop that has ended: connect on this one
        connecting = self._connecting
        if connecting is None or connecting.get_loop() is not loop:
            # A task of its own, not the first caller's: a caller that gives up (a student who
            # closes the tab) does not fail the others waiting for the same connection.
            connecting = self._connecting = loop.create_task(self._connect())
            connecting.add_done_callback(self._connected)
        return await asyncio.shield(connecting)

    def _connected(self, task: asyncio.Task[_Protocol]) -> None:
        if self._connecting is task:
            self._connecting = None
        if not task.cancelled() and task.exception() is None and task.result().lost is None:
            self._protocol = task.result()

    async def _send(self, protocol: _Protocol, commands: list[tuple[Any, ...]]) -> list[Any]:
        if protocol.lost is not None:
            raise _fresh(protocol.lost)
        try:  # packed before the call takes its place in the line: a bad argument must not leave one there
            data = _pack(commands)
        except TypeError as exc:
            raise DataError(f"cannot send {exc}") from exc
        loop = asyncio.get_running_loop()
        call = _Call(loop.create_future(), len(commands))
        protocol.calls.append(call)
        assert protocol.transport is not None
        sent = time.perf_counter()
        protocol.transport.write(data)
        timer = loop.call_later(self._socket_timeout_s, _expire, protocol, call)
        try:
            replies = await call.future
        finally:
            timer.cancel()
        LAST_TRIP.set((call.answered - sent, time.perf_counter() - call.answered))  # core/live.py round_trip
        return replies

    async def execute_raw(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Sends the commands in one write and returns Redis's replies as they came (an error
        reply as a ResponseError object)."""
        return await self._send(await self._connection(), commands)

    async def execute(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Sends the commands in one write, returns their replies with redis-py's shapes; raises
        the first error reply, as redis-py's pipeline does."""
        return _shaped(commands, await self.execute_raw(commands))

    async def _one(self, *command: Any) -> Any:
        return (await self.execute([command]))[0]

    def pipeline(self, transaction: bool = False) -> LeanPipeline:
        return LeanPipeline(self, transaction)

    # The single commands the live state sends, named and shaped as redis-py's.
    async def ping(self) -> bool:
        return await self._one("PING")

    async def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> Any:
        return await self._one("EVAL", script, numkeys, *keys_and_args)

    async def get(self, name: str) -> bytes | None:
        return await self._one("GET", name)

    async def set(self, name: str, value: Any, px: int | None = None) -> bool | None:
        return await self._one("SET", name, value, *(("PX", px) if px is not None else ()))

    async def zadd(self, name: str, mapping: dict[str, float], xx: bool = False) -> int:
        return await self._one("ZADD", name, *(("XX",) if xx else ()), *_score_pairs(mapping))

    async def zrem(self, name: str, *members: str) -> int:
        return await self._one("ZREM", name, *members)


def _expire(protocol: _Protocol, call: _Call) -> None:
    if not call.future.done():
        protocol.fail(RedisTimeoutError("Timeout reading from Redis"))


def _shaped(commands: list[tuple[Any, ...]], replies: list[Any]) -> list[Any]:
    """The replies as redis-py returns them for these commands; the first error reply raised."""
    out = []
    for command, reply in zip(commands, replies):
        if isinstance(reply, ResponseError):
            raise reply
        callback = _CALLBACKS.get(command[0])  # this module names every command in capitals
        out.append(callback(reply) if callback is not None else reply)
    return out


def _fresh(exc: BaseException) -> BaseException:
    """A new exception like `exc` for each caller, so no traceback grows on a shared object."""
    try:
        return type(exc)(*exc.args)
    except Exception:  # noqa: BLE001 - an exception class with another signature: share it
        return exc


def _score_pairs(mapping: dict[str, float]) -> list[Any]:
    return [item for member, score in mapping.items() for item in (score, member)]


class LeanPipeline:
    """Commands queued, then sent in one write by `execute()` (redis-py's pipeline, the methods
    the live state uses). With transaction=True they run inside MULTI ... EXEC."""

    def __init__(self, client: LeanRedis, transaction: bool) -> None:
        self._client = client
        self._transaction = transaction
        self._commands: list[tuple[Any, ...]] = []

    def _add(self, *command: Any) -> LeanPipeline:
        self._commands.append(command)
        return self

    async def execute(self) -> list[Any]:
        commands, self._commands = self._commands, []
        if not commands:
            return []
        if not self._transaction:
            return await self._client.execute(commands)
        replies = await self._client.execute_raw([("MULTI",), *commands, ("EXEC",)])
        for reply in replies[:-1]:  # an error while queuing (a wrong command) aborts the EXEC
            if isinstance(reply, ResponseError):
                raise reply
        results = replies[-1]
        if results is None:
            raise ResponseError("the transaction was aborted")
        if isinstance(results, ResponseError):
            raise results
        return _shaped(commands, results)

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> LeanPipeline:
        return self._add("EVAL", script, numkeys, *keys_and_args)

    def get(self, name: str) -> LeanPipeline:
        return self._add("GET", name)

    def delete(self, *names: str) -> LeanPipeline:
        return self._add("DEL", *names)

    def zcount(self, name: str, low: Any, high: Any) -> LeanPipeline:
        return self._add("ZCOUNT", name, low, high)

    def zrangebyscore(self, name: str, low: Any, high: Any) -> LeanPipeline:
        return self._add("ZRANGEBYSCORE", name, low, high)

    def zrem(self, name: str, *members: str) -> LeanPipeline:
        return self._add("ZREM", name, *members)

    def zadd(self, name: str, mapping: dict[str, float], xx: bool = False) -> LeanPipeline:
        return self._add("ZADD", name, *(("XX",) if xx else ()), *_score_pairs(mapping))

    def hset(self, name: str, mapping: dict[str, Any]) -> LeanPipeline:
        return self._add("HSET", name, *(item for pair in mapping.items() for item in pair))

    def hdel(self, name: str, *keys: str) -> LeanPipeline:
        return self._add("HDEL", name, *keys)

    def hgetall(self, name: str) -> LeanPipeline:
        return self._add("HGETALL", name)

    def hincrbyfloat(self, name: str, key: str, amount: float) -> LeanPipeline:
        return self._add("HINCRBYFLOAT", name, key, repr(float(amount)))

    def incrby(self, name: str, amount: int) -> LeanPipeline:
        return self._add("INCRBY", name, amount)

    def pexpire(self, name: str, time_ms: int) -> LeanPipeline:
        return self._add("PEXPIRE", name, time_ms)

    def sadd(self, name: str, *values: Any) -> LeanPipeline:
        return self._add("SADD", name, *values)

    def scard(self, name: str) -> LeanPipeline:
        return self._add("SCARD", name)
