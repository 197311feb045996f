"""The client towards the workers: a pooled connection the worker closed meanwhile is retried on
a connection opened for the retry, never on another pooled one that may be just as stale."""
from __future__ import annotations

import asyncio

import pytest

from inference import upstream


async def one_answer_per_connection() -> tuple[asyncio.Server, list[int]]:
    """A worker that answers the first request on each connection (keeping it alive) and drops
    the connection, unanswered, when a second request comes on it: every pooled connection is
    stale by the time it is reused."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                if answered:
                    return  # the stale connection: closed with the request unanswered
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
                await writer.drain()
                answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, connections


async def read(response: upstream.UpstreamResponse) -> bytes:
    body = b"".join([chunk async for chunk in response.aiter_raw()])
    await response.aclose()
    return body


@pytest.mark.parametrize("pooled", [1, 3])
def test_a_request_on_a_stale_pooled_connection_is_retried_on_a_new_one(pooled: int) -> None:
    async def scenario() -> tuple[bytes, int]:
        server, connections = await one_answer_per_connection()
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/completion"
        try:
            # `pooled` requests at once: that many keep-alive connections back in the pool, all stale.
            opened = await asyncio.gather(*(upstream.post(url, {"n": i}) for i in range(pooled)))
            assert [await read(response) for response in opened] == [b"ok"] * pooled
            answer = await read(await upstream.post(url, {"n": "after"}))
            return answer, len(connections)
        finally:
            await upstream.close_sessions()
            server.close()
            await server.wait_closed()

    answer, connections = asyncio.run(scenario())
    assert answer == b"ok"
    assert connections == pooled + 1  # the retry opened exactly one connection of its own
