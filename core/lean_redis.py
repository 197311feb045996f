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
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError


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

    __slots__ = ("future", "expected", "replies")

    def __init__(self, future: asyncio.Future[list[Any]], expected: int) -> None:
        self.future = future
        self.expected = expected
        self.replies: list[Any] = []


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
                call.future.set_exception(exc)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def _pack(commands: Iterable[tuple[Any, ...]]) -> bytes:
    return b"".join(hiredis.pack_command(command) for command in commands)


class LeanRedis:
    """The asyncio client the live state talks to (see the module's docstring). Its connection
    belongs to the event loop that made it; on another loop it connects again."""

    def __init__(self, url: str, *, connect_timeout_s: float, socket_timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"unsupported Redis URL scheme {parts.scheme!r}")
        self._parts = parts
        self._connect_timeout_s = connect_timeout_s
        self._socket_timeout_s = socket_timeout_s
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    def _lost(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        parts = self._parts
        protocol = _Protocol(self._lost)
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                if parts.scheme == "unix":
                    await loop.create_unix_connection(lambda: protocol, parts.path)
                else:
                    context = ssl.create_default_context() if parts.scheme == "rediss" else None
                    await loop.create_connection(lambda: protocol, parts.hostname or "localhost",
                                                 parts.port or 6379, ssl=context)
        except TimeoutError as exc:
            raise RedisTimeoutError("Timeout connecting to Redis") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
        hello: list[tuple[Any, ...]] = []
        if parts.password is not None:
            user = unquote(parts.username) if parts.username else None
            hello.append(("AUTH", user, unquote(parts.password)) if user else ("AUTH", unquote(parts.password)))
        db = _database(parts)
        if db:
            hello.append(("SELECT", db))
        if hello:
            try:
                replies = await self._send(protocol, hello)
            except BaseException:
                protocol.fail(RedisConnectionError("Redis did not answer AUTH / SELECT"))
                raise
            refused = [reply for reply in replies if isinstance(reply, ResponseError)]
            if refused:
                protocol.fail(RedisConnectionError(f"Redis refused AUTH / SELECT: {refused[0]}"))
                raise protocol.lost  # type: ignore[misc]
        return protocol

    async def _connection(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None:
            if protocol.loop is asyncio.get_running_loop():
                return protocol
            self._protocol = None  # made on an event loop that has ended: connect on this one
        if self._connecting is None:  # the first caller connects; the others wait for it
            self._connecting = asyncio.get_running_loop().create_future()
            connecting = self._connecting
            try:
                protocol = await self._connect()
            except BaseException as exc:
                connecting.set_exception(exc if isinstance(exc, Exception) else RedisConnectionError("cancelled"))
                connecting.exception()  # retrieved: no "never retrieved" warning when nobody else waited
                raise
            finally:
                self._connecting = None
            self._protocol = protocol
            connecting.set_result(protocol)
            return protocol
        return await asyncio.shield(self._connecting)

    async def _send(self, protocol: _Protocol, commands: list[tuple[Any, ...]]) -> list[Any]:
        if protocol.lost is not None:
            raise protocol.lost
        loop = asyncio.get_running_loop()
        call = _Call(loop.create_future(), len(commands))
        protocol.calls.append(call)
        assert protocol.transport is not None
        protocol.transport.write(_pack(commands))
        timer = loop.call_later(self._socket_timeout_s, _expire, protocol, call)
        try:
            return await call.future
        finally:
            timer.cancel()

    async def execute_raw(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Sends the commands in one write and returns Redis's replies as they came (an error
        reply as a ResponseError object)."""
        return await self._send(await self._connection(), commands)

    async def execute(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Sends the commands in one write, returns their replies with redis-py's shapes; raises
        the first error reply, as redis-py's pipeline does."""
        replies = await self.execute_raw(commands)
        out = []
        for command, reply in zip(commands, replies):
            if isinstance(reply, ResponseError):
                raise reply
            callback = _CALLBACKS.get(str(command[0]).upper())
            out.append(callback(reply) if callback is not None else reply)
        return out

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

    async def aclose(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()


def _expire(protocol: _Protocol, call: _Call) -> None:
    if not call.future.done():
        protocol.fail(RedisTimeoutError("Timeout reading from Redis"))


def _score_pairs(mapping: dict[str, float]) -> list[Any]:
    return [item for member, score in mapping.items() for item in (score, member)]


def _database(parts: Any) -> int:
    path = parts.path.strip("/") if parts.scheme != "unix" else ""
    if path.isdigit():
        return int(path)
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if key == "db" and value.isdigit():
            return int(value)
    return 0


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
        out = []
        for command, reply in zip(commands, results):
            if isinstance(reply, ResponseError):
                raise reply
            callback = _CALLBACKS.get(str(command[0]).upper())
            out.append(callback(reply) if callback is not None else reply)
        return out

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
