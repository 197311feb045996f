"""When a stream's relayed output is charged to the fair share while it streams
(inference/dispatch.py OpenStream): every STREAM_CHARGE_TOKENS once the answer goes on past
them, never at its last token, which the request's end settles in its own round trip."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from core.lease import Lease
from inference import dispatch
from inference.admission.line import Slot, Want
from inference.admission.rules import STREAM_CHARGE_TOKENS
from inference.dispatch import OpenStream, relay
from inference.protocols import openai_chat
from inference.request_context import RequestContext
from tests.inference.test_slot_leases import WORKER

ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
TOKEN = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
DONE = b"data: [DONE]\n\n"


class Answer:
    status_code = 200

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        pass


def _charged(monkeypatch: pytest.MonkeyPatch, chunks: list[bytes], *, read: int | None = None) -> list[int]:
    """The output tokens charged while the stream ran, charge by charge, for a client that reads
    `read` chunks (all if None)."""
    charges: list[int] = []

    async def charge_streamed(want: Want, *, output_tokens: int) -> None:
        charges.append(output_tokens)

    monkeypatch.setattr(dispatch, "charge_streamed", charge_streamed)

    async def scenario() -> None:
        request_ctx = RequestContext(client="openai", path="/v1/chat/completions")
        request_ctx.want = Want(user_id=1, pool_id=1, model_id="m")
        answer = Answer(chunks)
        source = answer.aiter_raw()
        stream = OpenStream(slot=Slot(worker=WORKER, lease=Lease("worker:7", "l1"), reason="test"),
                            response=answer, first_chunk=await anext(source), chunks=source,  # type: ignore[arg-type]
                            model_id="m", request_ctx=request_ctx, protocol=openai_chat.PROTOCOL,
                            end_marker=b"data: [DONE]")
        body = relay(stream)
        received = 0
        async for _ in body:
            received += 1
            if read is not None and received >= read:
                break
        await body.aclose()

    asyncio.run(scenario())
    return charges


def _answer(tokens: int) -> list[bytes]:
    return [ROLE, *[TOKEN] * tokens, USAGE % tokens, DONE]


def test_an_answer_of_two_charges_worth_is_charged_once_while_it_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    assert STREAM_CHARGE_TOKENS == 32  # the numbers below
    assert _charged(monkeypatch, _answer(64)) == [33]  # not again at its last token: its end settles it


def test_a_long_answer_is_charged_as_it_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _charged(monkeypatch, _answer(100)) == [33, 33, 33]


def test_a_client_that_leaves_mid_answer_was_charged_for_what_went_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _charged(monkeypatch, _answer(64), read=40) == [33]
