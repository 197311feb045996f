"""The quiet student: what a chat student's quick questions wait for while the class's agents keep
every ordinary slot busy (docs/classroom.md, "A card for questions").

Against a running gateway, in one run:

1. `alone`: the chat student asks short questions one after another (the class replay's chat
   persona, research/class_personas.py, with CHAT_THINK_S between them), nobody else busy: their
   time to first token alone.
2. `load`: the same student, while AGENT_STUDENTS agent students (the Copilot CLI persona, two
   conversations each, prompts of 1,100-2,300 tokens at SCALE) and a burst student (the burst
   persona, two requests at a time, back to back) keep the slots busy.
3. `lane_alone` (when the fleet has lane workers): the agents only, no burst student: the
   question alone on its lane worker while the others compute. The reference for what the
   machine itself gives: on one CPU the workers share its cores (on a rig each has its cards), so
   this is the best a lane can do here.
4. `without_lanes` (when the fleet has lane workers and `compare`): the load of 2 again with the
   lane workers made ordinary for the phase (restored afterwards), so the cost of keeping a card
   for questions is read from the agents' turns and waits in the same run.

Load only: the caller brings the keys and switches the lanes (research/management/commands/share_probe.py).
"""
from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from research.class_personas import PERSONA_SHAPES, Conversation

AGENT_STUDENTS = 3
AGENT_STREAMS = 2  # each agent student runs two conversations at once (two terminals, or a sub-agent)
BURST_STREAMS = 2  # the burst student's loop, two requests at a time
SCALE = 0.1  # the class replay's demo scale: agent prompts of 1,100-2,300 tokens
CHAT_THINK_S = 2.0  # shorter than a chat persona's (10-25 s), so that a p95 has enough questions under it


def conversation(persona: str, index: int, seed: int, *, context_tokens: int) -> Conversation:
    return Conversation(PERSONA_SHAPES[persona], index, random.Random(f"quiet:{seed}:{persona}:{index}"),
                        scale=SCALE, context_tokens=context_tokens)


def answer_text(chunk: bytes) -> str:
    """The content an OpenAI chat stream's piece carries."""
    text = []
    for line in chunk.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        try:
            choices = json.loads(line[6:]).get("choices") or []
        except ValueError:
            continue
        for choice in choices:
            text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text)


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


async def _turn(client: httpx.AsyncClient, url: str, key: str, phase: Phase, started: float, *,
                student: str, talk: Conversation) -> None:
    """One turn of `talk`: its time to first token (to the end, for an answer with no text: its
    prompt was computed), and the answer appended as the client would."""
    route, body = talk.request()
    turn = Turn(student=student, sent_s=time.monotonic() - started)
    phase.turns.append(turn)
    sent, answer = time.monotonic(), []
    try:
        async with client.stream("POST", url + route, json=body, headers={"Authorization": f"Bearer {key}"}) as reply:
            turn.status = reply.status_code
            if reply.status_code != 200:
                await reply.aread()
                return
            async for chunk in reply.aiter_raw():
                text = answer_text(chunk)
                if text and turn.ttft_s is None:
                    turn.ttft_s = time.monotonic() - sent
                answer.append(text)
        if turn.ttft_s is None:
            turn.ttft_s = time.monotonic() - sent
    except httpx.HTTPError:
        turn.status = turn.status or 599
    talk.grow("".join(answer))


async def run_phase(*, url: str, keys: dict[str, str], duration_s: float, loaded: bool, seed: int,
                    model: str, context_tokens: int, burst: bool = True) -> Phase:
    """One phase: the chat student's questions for `duration_s`, with the agents and (`burst`) the
    burst student beside them when `loaded`. Turns in flight at the end finish (they are counted)."""
    phase = Phase()
    started = time.monotonic()
    until = started + duration_s

    def talk(persona: str, index: int) -> Conversation:
        made = conversation(persona, index, seed, context_tokens=context_tokens)
        made.model = model
        made.new_task()
        return made

    async def loop(client: httpx.AsyncClient, student: str, made: Conversation, think_s: float | None) -> None:
        while time.monotonic() < until:
            await _turn(client, url, keys[student], phase, started, student=student, talk=made)
            pause = made.think_s() if think_s is None else think_s
            await asyncio.sleep(min(pause, max(0.0, until - time.monotonic())))

    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        tasks = [loop(client, "chat", talk("chat", 0), CHAT_THINK_S)]
        if loaded:
            for number in range(1, AGENT_STUDENTS + 1):
                tasks += [loop(client, f"agent-{number}", talk("agent", 10 * number + stream), None)
                          for stream in range(AGENT_STREAMS)]
            if burst:
                tasks += [loop(client, "burst", talk("burst", 90 + stream), 0.0) for stream in range(BURST_STREAMS)]
        await asyncio.gather(*tasks)
    return phase


def phase_report(phase: Phase) -> dict[str, Any]:
    return {"chat": summary(phase.of("chat")), "agents": summary(phase.of("agent")),
            "burst": summary(phase.of("burst"))}


def verdict(report: dict[str, Any], *, bound: float) -> dict[str, Any]:
    """The chat student's p95 under load over its p95 alone, against `bound` (no chat refused);
    and, with a `lane_alone` phase, over the p95 of its questions alone on the lane beside the
    agents (what the machine gives a lane)."""
    alone = report["alone"]["chat"]["ttft_p95_s"]
    loaded = report["load"]["chat"]["ttft_p95_s"]
    ratio = loaded / alone if alone and loaded is not None else None
    result = {"chat_p95_ratio": ratio, "bound": bound,
              "holds": ratio is not None and ratio <= bound and report["load"]["chat"]["refused"] == 0}
    reference = (report.get("lane_alone") or {}).get("chat", {}).get("ttft_p95_s")
    if reference and alone and loaded is not None:
        result["lane_alone_over_alone"] = reference / alone
        result["load_over_lane_alone"] = loaded / reference
    without = (report.get("without_lanes") or {}).get("chat", {}).get("ttft_p95_s")
    if without and alone:
        result["without_lanes_ratio"] = without / alone
    return result
