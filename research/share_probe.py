"""Two students against a running gateway, to check what the fair share and the gateway's bounds
promise (docs/usage-and-limits.md, "What a request is charged"):

- `cancel`: student A asks for long answers and disconnects after CUT_AFTER content events, as a
  coding agent's Esc does, in `loops` loops; student B reads whole answers in as many loops. The
  tokens each received in the window, and A's over B's: token-fair means about 1.
- `count-tokens`: B streams whole answers alone for half the window, then while A floods
  `/v1/messages/count_tokens` with `loops` concurrent 4 MB bodies; B's tokens per second in each
  half, and the second over the first: the flood should cost B little.

Load only: the caller brings the keys (research/management/commands/share_probe.py makes them).
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

CUT_AFTER = 40
STORY = "Explain recursion to a new programmer, with an example in Python."
FLOOD_BYTES = 4_000_000


def content_events(chunk: bytes) -> int:
    """Content events in a piece of an OpenAI chat stream (one token each)."""
    return sum(1 for line in chunk.split(b"\n")
               if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line)


@dataclass
class Tally:
    """Tokens one student received, with when each arrived (seconds from the start)."""

    arrivals: list[float]

    def within(self, start_s: float, end_s: float) -> int:
        return sum(1 for t in self.arrivals if start_s <= t < end_s)


async def _stream(client: httpx.AsyncClient, url: str, key: str, model: str, tally: Tally, started: float, *,
                  max_tokens: int, cut_after: int | None) -> None:
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": STORY}]}
    received = 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {key}"}) as answer:
        if answer.status_code != 200:
            await answer.aread()
            await asyncio.sleep(1.0)
            return
        async for chunk in answer.aiter_raw():
            events = content_events(chunk)
            tally.arrivals.extend([time.monotonic() - started] * events)
            received += events
            if cut_after is not None and received >= cut_after:
                return  # leaving the block closes the connection: the student pressed Esc


async def _loop(until: float, step: object) -> None:
    while time.monotonic() < until:
        try:
            await step()  # type: ignore[operator]
        except httpx.HTTPError:
            await asyncio.sleep(0.5)


async def cancel_probe(*, url: str, model: str, cutter_key: str, reader_key: str, loops: int,
                       duration_s: float) -> dict[str, float]:
    """Tokens the cutter (A) and the reader (B) received over `duration_s`, and A / B."""
    cutter, reader = Tally([]), Tally([])
    started = time.monotonic()
    until = started + duration_s
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0)) as client:
        tasks = [_loop(until, lambda: _stream(client, url, cutter_key, model, cutter, started, max_tokens=2048,
                                               cut_after=CUT_AFTER)) for _ in range(loops)]
        tasks += [_loop(until, lambda: _stream(client, url, reader_key, model, reader, started, max_tokens=2048,
                                                cut_after=None)) for _ in range(loops)]
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=duration_s + 300)
    a, b = cutter.within(0, duration_s), reader.within(0, duration_s)
    return {"cutter_tokens": a, "reader_tokens": b, "cutter_over_reader": a / b if b else float("inf")}


async def count_tokens_probe(*, url: str, model: str, flooder_key: str, reader_key: str, loops: int,
                             duration_s: float) -> dict[str, float]:
    """The reader's tokens per second alone (first half) and under the flood (second half)."""
    reader = Tally([])
    started = time.monotonic()
    half = duration_s / 2
    flood_body = json.dumps({"model": model, "messages": [{"role": "user", "content": "word " * (FLOOD_BYTES // 5)}]})
    refusals: list[int] = []

    async def flood_once(client: httpx.AsyncClient) -> None:
        answer = await client.post(url + "/v1/messages/count_tokens", content=flood_body,
                                   headers={"x-api-key": flooder_key, "content-type": "application/json"})
        refusals.append(answer.status_code)

    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0)) as client:
        until = started + duration_s
        reading = asyncio.ensure_future(_loop(until, lambda: _stream(client, url, reader_key, model, reader, started,
                                                                      max_tokens=2048, cut_after=None)))
        await asyncio.sleep(max(0.0, started + half - time.monotonic()))
        await asyncio.gather(*(_loop(until, lambda: flood_once(client)) for _ in range(loops)))
        await asyncio.wait_for(reading, timeout=300)
    alone, flooded = reader.within(0, half) / half, reader.within(half, duration_s) / half
    return {"alone_tokens_per_s": alone, "flooded_tokens_per_s": flooded,
            "flooded_over_alone": flooded / alone if alone else float("inf"),
            "flood_requests": len(refusals), "flood_refused_400": sum(1 for s in refusals if s == 400)}
