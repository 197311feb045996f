"""The quiet student: what a chat student's quick questions wait for while the class's agents keep
every ordinary slot busy (docs/classroom.md, "A card for questions").

Against a running gateway, in one run:

1. `alone`: the chat student asks short questions one after another (a ~40-token question, a
   short answer, a second's thought), nobody else busy: their time to first token alone.
2. `load`: the same student, while AGENT_STUDENTS agents (two streams each, prompts of about
   AGENT_PROMPT_TOKENS tokens: each student's own context, then a new part every turn) and a
   burst student (BURST_SIZE medium prompts at once, every BURST_EVERY_S) keep the slots busy.
3. `without_lanes` (when the fleet has lane workers and `compare`): the same load again with the
   lane workers made ordinary for the phase (restored afterwards), so the cost of keeping a card
   for questions is read from the agents' turns and waits in the same run.

Load only: the caller brings the keys and switches the lanes (research/management/commands/share_probe.py).
"""
from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from research.share_probe import content_events

AGENT_STUDENTS = 3
AGENT_STREAMS = 2
AGENT_PROMPT_TOKENS = 1350  # the demo's agents at the class replay's scale 0.1 (1,100-2,300 tokens)
AGENT_OUTPUT_TOKENS = 96
BURST_SIZE = 4
BURST_EVERY_S = 10.0
BURST_PROMPT_TOKENS = 300
CHAT_OUTPUT_TOKENS = 24
CHAT_THINK_S = 1.0
QUESTIONS = ("What does a Python list comprehension do?", "Why is my for loop off by one?",
             "What is the difference between == and is?", "How do I read a file line by line?",
             "What does git rebase do?", "Explain a dictionary in one sentence.",
             "What is a null pointer?", "Why use a virtual environment?")
WORDS = ("function", "variable", "return", "import", "class", "method", "test", "value", "loop", "index",
         "string", "parser", "token", "module", "error", "branch", "commit", "request", "worker", "slot")


def filler(rng: random.Random, tokens: int) -> str:
    """About `tokens` tokens of code-like text (one word and a space: about one token)."""
    return " ".join(rng.choice(WORDS) for _ in range(tokens))


@dataclass
class Turn:
    student: str
    sent_s: float
    ttft_s: float | None = None
    status: int = 0


@dataclass
class Phase:
    turns: list[Turn] = field(default_factory=list)

    def of(self, prefix: str) -> list[Turn]:
        return [t for t in self.turns if t.student.startswith(prefix)]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(turns: list[Turn]) -> dict[str, Any]:
    answered = [t.ttft_s for t in turns if t.status == 200 and t.ttft_s is not None]
    return {"turns": len(turns), "answered": len(answered),
            "refused": sum(1 for t in turns if t.status != 200),
            "refusals": sorted({t.status for t in turns if t.status != 200}),
            "ttft_p50_s": statistics.median(answered) if answered else None,
            "ttft_p95_s": percentile(answered, 0.95)}


async def _ask(client: httpx.AsyncClient, url: str, key: str, model: str, phase: Phase, started: float, *,
               student: str, content: str, max_tokens: int) -> None:
    turn = Turn(student=student, sent_s=time.monotonic() - started)
    phase.turns.append(turn)
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": content}]}
    sent = time.monotonic()
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body,
                                 headers={"Authorization": f"Bearer {key}"}) as answer:
            turn.status = answer.status_code
            if answer.status_code != 200:
                await answer.aread()
                return
            async for chunk in answer.aiter_raw():
                if turn.ttft_s is None and content_events(chunk):
                    turn.ttft_s = time.monotonic() - sent
    except httpx.HTTPError:
        turn.status = turn.status or 599


async def _until(until: float, step: Callable[[], Awaitable[None]], *, pause_s: float = 0.0) -> None:
    while time.monotonic() < until:
        await step()
        if pause_s:
            await asyncio.sleep(pause_s)


async def run_phase(*, url: str, model: str, keys: dict[str, str], duration_s: float, loaded: bool,
                    seed: int) -> Phase:
    """One phase: the chat student's questions for `duration_s`, with the agents and the burst
    student beside them when `loaded`. Turns in flight at the end finish (they are counted)."""
    phase, rng = Phase(), random.Random(seed)
    started = time.monotonic()
    until = started + duration_s
    contexts = {name: filler(random.Random(f"{seed}-{name}"), AGENT_PROMPT_TOKENS - 150)
                for name in keys if name.startswith("agent")}

    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0)) as client:
        async def question() -> None:
            await _ask(client, url, keys["chat"], model, phase, started, student="chat",
                       content=rng.choice(QUESTIONS), max_tokens=CHAT_OUTPUT_TOKENS)

        def agent_turn(name: str) -> Callable[[], Awaitable[None]]:
            async def step() -> None:
                await _ask(client, url, keys[name], model, phase, started, student=name,
                           content=contexts[name] + "\n\nNext step: " + filler(rng, 150), max_tokens=AGENT_OUTPUT_TOKENS)
            return step

        async def burst() -> None:
            await asyncio.gather(*(_ask(client, url, keys["burst"], model, phase, started, student="burst",
                                        content=filler(rng, BURST_PROMPT_TOKENS), max_tokens=64)
                                   for _ in range(BURST_SIZE)))
            await asyncio.sleep(max(0.0, BURST_EVERY_S - 1.0))

        tasks = [_until(until, question, pause_s=CHAT_THINK_S)]
        if loaded:
            tasks += [_until(until, agent_turn(name)) for name in contexts for _ in range(AGENT_STREAMS)]
            tasks.append(_until(until, burst, pause_s=1.0))
        await asyncio.gather(*tasks)
    return phase


def phase_report(phase: Phase) -> dict[str, Any]:
    return {"chat": summary(phase.of("chat")), "agents": summary(phase.of("agent")),
            "burst": summary(phase.of("burst"))}


def verdict(report: dict[str, Any], *, bound: float) -> dict[str, Any]:
    """The chat student's p95 under load over its p95 alone, against `bound` (no chat refused)."""
    alone = report["alone"]["chat"]["ttft_p95_s"]
    loaded = report["load"]["chat"]["ttft_p95_s"]
    ratio = loaded / alone if alone and loaded is not None else None
    return {"chat_p95_ratio": ratio, "bound": bound,
            "holds": ratio is not None and ratio <= bound and report["load"]["chat"]["refused"] == 0}
