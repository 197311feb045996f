"""The live state's own Redis client (core/lean_redis.py): many callers on one connection each
get their own replies, in redis-py's shapes, and a caller that gives up, an error reply, a Redis
that stops answering or goes away never hands one caller another's reply. Against a redis-server
of the test's own, so it runs once (the client does not depend on the back end)."""
from __future__ import annotations

import asyncio
import gc
import shutil
import socket
import time

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.lean_redis import LeanRedis
from tests.own_redis import own_redis  # noqa: F401 - the fixture

pytestmark = [pytest.mark.backend_neutral,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")]


def lean(url: str, timeout_s: float = 5.0) -> LeanRedis:
    return LeanRedis(url, connect_timeout_s=2.0, socket_timeout_s=timeout_s)


def test_a_class_of_callers_on_one_connection_each_gets_its_own_replies(own_redis) -> None:  # noqa: ANN001
    client = lean(own_redis.url)

    async def student(n: int) -> None:
        for turn in range(20):
            pipe = client.pipeline()
            pipe.incrby(f"count:{n}", n)
            pipe.get(f"count:{n}")
            pipe.eval("return ARGV[1] .. ':' .. ARGV[2]", 0, n, turn)
            added, value, echoed = await pipe.execute()
            assert (added, value, echoed) == (n * (turn + 1), str(n * (turn + 1)).encode(), f"{n}:{turn}".encode())
            if turn % 5 == 0:  # await points that differ between callers shuffle the line
                await asyncio.sleep(0)

    async def scenario() -> None:
        await asyncio.gather(*(student(n) for n in range(1, 201)))
        assert client._protocol is not None  # one connection carried all of it

    asyncio.run(scenario())


def test_replies_have_redis_py_shapes(own_redis) -> None:  # noqa: ANN001
    """The same commands through both clients give equal results, so the live state reads them alike."""

    async def run(client) -> list:  # noqa: ANN001
        pipe = client.pipeline(transaction=False)
        pipe.delete("h", "z", "s", "t")
        pipe.hincrbyfloat("h", "ada", 1.5)
        pipe.hset("h", mapping={"bob": "2"})
        pipe.hgetall("h")
        pipe.pexpire("h", 60_000)
        pipe.pexpire("missing", 60_000)
        pipe.zadd("z", {"a": 1, "b": 5})
        pipe.zadd("z", {"a": 9, "c": 2}, xx=True)  # only updates a
        pipe.zcount("z", 2, "+inf")
        pipe.zrangebyscore("z", 2, "+inf")
        pipe.zrem("z", "b")
        pipe.sadd("s", "x", "y")
        pipe.scard("s")
        pipe.hdel("h", "bob")
        pipe.get("never-set")
        out = await pipe.execute()
        out.append(await client.set("t", "1", px=60_000))
        out.append(await client.get("t"))
        out.append(await client.zadd("z", {"d": 3}))
        out.append(await client.zrem("z", "d"))
        out.append(await client.eval("return {1, 'two', {3}}", 0))
        out.append(await client.ping())
        transaction = client.pipeline(transaction=True)
        transaction.delete("h")
        transaction.hset("h", mapping={"k": "v"})
        transaction.pexpire("h", 1000)
        out.append(await transaction.execute())
        return out

    async def both() -> tuple[list, list]:
        theirs = aioredis.Redis.from_url(own_redis.url)
        try:
            expected = await run(theirs)
        finally:
            await theirs.aclose()
        return expected, await run(lean(f"redis://127.0.0.1:{own_redis.port}/1"))  # a database of its own

    expected, got = asyncio.run(both())
    assert got == expected
    assert got[3] == {b"ada": b"1.5", b"bob": b"2"} and got[1] == 1.5 and got[4] is True and got[5] is False


def test_an_error_reply_fails_its_caller_only(own_redis) -> None:  # noqa: ANN001
    client = lean(own_redis.url)

    async def scenario() -> None:
        bad = client.pipeline()
        bad.get("k")
        bad.eval("return redis.call('NOSUCHCOMMAND')", 0)
        results = await asyncio.gather(client.set("k", "v"), bad.execute(), client.get("k"),
                                       return_exceptions=True)
        assert results[0] is True
        assert isinstance(results[1], ResponseError)
        assert results[2] == b"v"
        queued = client.pipeline(transaction=True)  # refused while queuing: the whole transaction fails
        queued.get("k")
        queued._add("NOSUCHCOMMAND")
        with pytest.raises(ResponseError):
            await queued.execute()
        assert await client.get("k") == b"v"  # the line is still in step

    asyncio.run(scenario())


def test_a_caller_that_gives_up_leaves_the_line_in_step(own_redis) -> None:  # noqa: ANN001
    """A student who closes the tab cancels the request mid round trip: its reply is dropped,
    the next caller's is not taken for it."""
    client = lean(own_redis.url)

    async def scenario() -> None:
        await client.set("mine", "classmate")
        # A script that holds Redis for a moment, so the cancel lands before its reply.
        slow = asyncio.create_task(client.eval(
            "local t = redis.call('TIME'); local e = t[1] * 1e6 + t[2] + 50000; "
            "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= e; return 'slow'", 0))
        await asyncio.sleep(0.01)
        after = asyncio.create_task(client.get("mine"))
        await asyncio.sleep(0)
        slow.cancel()
        assert await after == b"classmate"
        assert slow.cancelled()

    asyncio.run(scenario())


def test_a_redis_that_stops_answering_fails_every_waiting_caller_then_connects_again(own_redis) -> None:  # noqa: ANN001
    """A Redis that accepts and never answers (hung, or a dead peer the kernel still holds)
    fails its callers within the socket timeout, all of them; the next call connects afresh."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    client = lean(f"redis://127.0.0.1:{port}/0", timeout_s=0.3)

    async def scenario() -> None:
        results = await asyncio.gather(*(client.get(f"k{n}") for n in range(5)), return_exceptions=True)
        assert all(isinstance(r, RedisTimeoutError) for r in results), results
        assert client._protocol is None
        silent.close()
        with pytest.raises(RedisConnectionError):  # nothing listens now: refused, at once
            await client.get("k")
        client._options["port"] = own_redis.port  # Redis is back (here: on another port)
        assert await client.ping() is True

    try:
        asyncio.run(scenario())
    finally:
        silent.close()


def test_the_url_picks_the_database_and_authenticates(own_redis) -> None:  # noqa: ANN001
    admin = redis.Redis.from_url(own_redis.url)
    admin.config_set("requirepass", "s3cret")
    try:
        async def scenario() -> None:
            with pytest.raises(ResponseError):
                await lean(own_redis.url).get("k")  # no password
            await lean(f"redis://:s3cret@127.0.0.1:{own_redis.port}/3").set("k", "in db 3")

        asyncio.run(scenario())
        checker = redis.Redis(port=own_redis.port, password="s3cret", db=3)
        assert checker.get("k") == b"in db 3"
        assert redis.Redis(port=own_redis.port, password="s3cret", db=0).get("k") is None
    finally:
        redis.Redis(port=own_redis.port, password="s3cret").config_set("requirepass", "")


def test_a_new_event_loop_gets_a_connection_of_its_own(own_redis) -> None:  # noqa: ANN001
    """Tests and sync callers run the same client under one asyncio.run after another: a
    connection made on a loop that has ended is not waited on."""
    client = lean(own_redis.url, timeout_s=1.0)
    asyncio.run(client.set("k", "v"))
    first = client._protocol
    assert asyncio.run(client.get("k")) == b"v"
    assert client._protocol is not first


def test_an_argument_it_cannot_send_fails_its_caller_only(own_redis) -> None:  # noqa: ANN001
    """A slip in the code (None as an argument) is a DataError, a RedisError as redis-py raises,
    and leaves no place in the line that would take the next caller's reply."""
    client = lean(own_redis.url, timeout_s=1.0)

    async def scenario() -> None:
        await client.set("a", "ada")
        await client.set("b", "bob")
        with pytest.raises(DataError):
            await client.get(None)  # type: ignore[arg-type]
        assert await asyncio.gather(client.get("a"), client.get("b")) == [b"ada", b"bob"]

    asyncio.run(scenario())


def test_a_caller_that_gives_up_while_connecting_does_not_fail_the_others(own_redis) -> None:  # noqa: ANN001
    client = lean(own_redis.url)

    async def scenario() -> None:
        first = asyncio.create_task(client.ping())
        others = [asyncio.create_task(client.ping()) for _ in range(3)]
        await asyncio.sleep(0)  # the first has started connecting, the others wait for it
        first.cancel()
        assert await asyncio.gather(*others) == [True, True, True]

    asyncio.run(scenario())


def test_the_url_is_read_as_redis_py_reads_it(own_redis) -> None:  # noqa: ANN001
    url = f"redis://127.0.0.1:{own_redis.port}/1?db=4"  # the query's db wins, in both clients
    asyncio.run(lean(url).set("where", "here"))
    assert redis.Redis.from_url(url).get("where") == b"here"
    assert redis.Redis(port=own_redis.port, db=4).get("where") == b"here"


def test_one_live_state_keeps_one_connection_across_event_loops(own_redis) -> None:  # noqa: ANN001
    """Sync callers (pages, commands) run the live state under one asyncio.run after another:
    the connection of an ended loop is dropped, not kept per loop."""
    from ocsweb.live import SiteRedisLiveState

    live = SiteRedisLiveState(own_redis.url, namespace="loops")
    admin = redis.Redis.from_url(own_redis.url)
    before = len(admin.client_list())
    for _ in range(10):
        asyncio.run(live.check())
    gc.collect()
    assert len(admin.client_list()) - before <= 2


class _Wire(asyncio.Transport):
    """A connection that keeps what is written, so a test says when Redis's reply arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += data

    def is_closing(self) -> bool:
        return False


def _trip_totals(op: str) -> dict[str, tuple[float, float]]:
    """(seconds, trips) so far of `op`'s round trips, by part (core/live.py ROUND_TRIP_SECONDS)."""
    from core.live import ROUND_TRIP_SECONDS
    sums, counts = {}, {}
    for metric in ROUND_TRIP_SECONDS.collect():
        for sample in metric.samples:
            if sample.labels["op"] == op and sample.name.endswith("_sum"):
                sums[sample.labels["part"]] = sample.value
            elif sample.labels["op"] == op and sample.name.endswith("_count"):
                counts[sample.labels["part"]] = sample.value
    return {part: (sums[part], counts[part]) for part in sums}


def test_a_round_trip_is_timed_apart_waiting_for_redis_and_for_the_event_loop() -> None:
    """Where a live-state round trip's time went, for docs/performance.md: a slow Redis shows in
    `reply`, a busy gateway (its loop running other work after the reply came) in `resume`, each
    under the live state's operation that made the trip."""
    from core.lean_redis import _Protocol
    from core.live import round_trip

    class Live:
        _url = "redis://127.0.0.1:1/0"

        def __init__(self, protocol: _Protocol) -> None:
            self.client, self.protocol = lean(self._url), protocol

        @round_trip
        async def timed_ping(self) -> list[object]:
            return await self.client._send(self.protocol, [("PING",)])

    async def trip(*, redis_s: float, busy_s: float) -> None:
        protocol = _Protocol(lambda _: None)
        protocol.connection_made(_Wire())
        pending = asyncio.ensure_future(Live(protocol).timed_ping())
        await asyncio.sleep(0)  # written; waiting for the reply
        await asyncio.sleep(redis_s)
        protocol.data_received(b"+PONG\r\n")
        time.sleep(busy_s)  # the loop is busy with other requests before it resumes this one
        assert await pending == [b"PONG"]

    def added(after: dict[str, tuple[float, float]], start: dict[str, tuple[float, float]], part: str) -> float:
        assert after[part][1] == start.get(part, (0.0, 0.0))[1] + 1  # one trip observed in each part
        return after[part][0] - start.get(part, (0.0, 0.0))[0]

    before = _trip_totals("timed_ping")
    asyncio.run(trip(redis_s=0.05, busy_s=0.0))
    slow_redis = _trip_totals("timed_ping")
    asyncio.run(trip(redis_s=0.0, busy_s=0.05))
    busy_loop = _trip_totals("timed_ping")

    assert added(slow_redis, before, "reply") >= 0.05 > added(slow_redis, before, "resume")
    assert added(busy_loop, slow_redis, "resume") >= 0.05 > added(busy_loop, slow_redis, "reply")
    assert added(busy_loop, slow_redis, "all") >= 0.05
