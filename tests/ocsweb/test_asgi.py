"""The bare ASGI handler of the hot paths: a stream cut off mid-send is closed before the handler
returns, not left for garbage collection (whose clean-up a stopping server never runs)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from django.http import HttpRequest, StreamingHttpResponse

from ocsweb.asgi import BareASGIHandler

SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
         "path": "/v1/models", "raw_path": b"/v1/models", "root_path": "", "query_string": b"", "headers": [],
         "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}


class Body:
    """A stream's body that never ends by itself; `finished` says whether its clean-up ran."""

    def __init__(self) -> None:
        self.finished = False

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"data: {}\n\n"
        finally:
            self.finished = True


@pytest.mark.parametrize("ending", ["client disconnects", "server stops"])
def test_a_stream_cut_off_mid_send_runs_its_clean_up_before_the_handler_returns(ending: str) -> None:
    body = Body()
    generator = body.chunks()  # held here, so garbage collection cannot be what closes it

    async def scenario() -> bool:
        handler = BareASGIHandler()

        async def respond(request: HttpRequest) -> StreamingHttpResponse:
            return StreamingHttpResponse(generator, content_type="text/event-stream")

        handler.run_get_response = respond  # type: ignore[method-assign]
        sent: list[dict] = []
        reader_gone = asyncio.Event()
        requested = False

        async def receive() -> dict:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await reader_gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)
            if len(sent) >= 3:
                await asyncio.Event().wait()  # the client stops reading: this send never completes

        task = asyncio.create_task(handler(dict(SCOPE), receive, send))
        while len(sent) < 3:
            await asyncio.sleep(0)
        if ending == "client disconnects":
            reader_gone.set()
            await task
        else:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return body.finished

    assert asyncio.run(scenario()), "the stream's finally (slot release, request log row) did not run"
    assert generator.ag_frame is None  # closed, not merely suspended at a yield
