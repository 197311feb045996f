"""How a stream's request ends when the client closes at the very end, as the OpenAI SDK does:
it stops reading and closes the connection as soon as it has `data: [DONE]`, often before the
gateway's body generator is resumed past its last chunk."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from core.lease import Lease
from inference import pipeline
from inference.admission.line import Slot
from inference.dispatch import OpenStream, relay
from inference.protocols import openai_chat
from inference.request_context import RequestContext
from tests.inference.test_slot_leases import WORKER

CHUNKS = [b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
          b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n',
          b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n',
          b"data: [DONE]\n\n"]


class Answer:
    status_code = 200

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in CHUNKS:
            yield chunk

    async def aclose(self) -> None:
        pass


def _ends(monkeypatch: pytest.MonkeyPatch, *, read: int) -> tuple[int, str]:
    """Read `read` chunks of the body the client gets, then close it as a leaving client does;
    returns the status and error code the request ended with."""
    ended: list[tuple[int, str]] = []

    async def end(request_ctx: RequestContext, *, status: int, error_code: str = "") -> None:
        ended.append((status, error_code))

    monkeypatch.setattr(pipeline, "end", end)

    async def scenario() -> None:
        request_ctx = RequestContext(client="openai", path="/v1/chat/completions")
        answer = Answer()
        chunks = answer.aiter_raw()
        first = await anext(chunks)
        stream = OpenStream(slot=Slot(worker=WORKER, lease=Lease("worker:7", "l1"), reason="test"),
                            response=answer, first_chunk=first, chunks=chunks,  # type: ignore[arg-type]
                            model_id="m", request_ctx=request_ctx, protocol=openai_chat.PROTOCOL,
                            end_marker=b"data: [DONE]")
        body = pipeline._ended_when_done(relay(stream), request_ctx)
        for _ in range(read):
            await anext(body)
        await body.aclose()  # the client closed; the generator is suspended at its last yield

    asyncio.run(scenario())
    assert len(ended) == 1
    return ended[0]


def test_a_client_that_closes_on_done_had_the_whole_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ends(monkeypatch, read=len(CHUNKS)) == (200, "")


def test_a_client_that_leaves_before_the_end_is_client_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ends(monkeypatch, read=2) == (pipeline.CLIENT_CLOSED, "client_closed")
