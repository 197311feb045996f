"""The class replay's load: every student a coroutine sending its persona's turns through the
gateway, in its client's own dialect, and timing them from the stream. No Django here.

Each student arrives at a random time in the first part of the run, then loops: send a turn,
read its stream to the end, think, grow the conversation, until the run's duration is over (a
turn in flight then is waited for). A refused turn (429, 503, an error event) is not grown into
the conversation; the student waits at least its `retry-after` (at most 30 s) and goes on.

The stream is read per dialect (research.class_personas.Persona.dialect): OpenAI chat chunks
(`choices[].delta`, `data: [DONE]`), Anthropic events (`content_block_delta`, `message_stop`) and
Responses events (`response.output_text.delta`, `response.completed`). The first content is the
first delta carrying text, tool-call arguments or reasoning. A turn that ends normally without
any content has its end as its first token. The gateway's `X-Request-Id` is kept so the control
plane can join each turn to its request-log row (prompt and cached token counts).
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from research.class_personas import FIXTURES, PERSONA_SHAPES, Conversation

END_EVENTS = {"message_stop", "response.completed", "response.incomplete"}  # incomplete: the output cap
MAX_RETRY_WAIT_S = 30.0


@dataclass(frozen=True)
class Student:
    name: str
    persona: str
    key: str
    index: int


@dataclass
class SentTurn:
    """What the client saw of one turn; times in seconds from the run's start."""

    student: str
    persona: str
    sent_s: float
    end_s: float = 0.0
    first_token_s: float | None = None
    completed: bool = False
    refused_reason: str = ""
    status: int = 0
    request_id: str = ""
    answer: str = ""
    output_chunks: int = 0
    retry_after_s: float = 0.0


@dataclass
class ReplayPlan:
    base_url: str  # the gateway's root (a trailing /v1 is taken off)
    students: list[Student]
    duration_s: float
    seed: int = 0
    scale: float = 1.0
    model: str = "smollm2-135m-instruct"
    context_tokens: int = 4096
    tools_inline: bool = True
    arrivals_s: float | None = None  # students arrive over [0, arrivals_s]; default 30 % of the run
    request_timeout_s: float = 300.0
    fixtures_dir: Path = FIXTURES
    conversations: dict[str, Conversation] = field(default_factory=dict)

    @property
    def root(self) -> str:
        return gateway_root(self.base_url)


def gateway_root(base_url: str) -> str:
    """`http://host/v1/` and `http://host` -> `http://host`."""
    root = base_url.strip().rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def refusal_reason(status: int, text: str) -> str:
    """Why the gateway refused a turn, from its status and the error's message or code (the
    reason of a 429 is in its message: the OpenAI code is `rate_limit_exceeded` for several)."""
    lowered = text.lower()
    for needle, reason in (("stayed busy", "queue_timeout"), ("too many requests at once", "concurrency"),
                           ("rate limit reached", "requests_per_minute"), ("daily token budget", "tokens_per_day"),
                           ("context", "context_length_exceeded"), ("still loading", "model_loading"),
                           ("no worker can serve", "no_worker_available"), ("worker failed", "upstream_error")):
        if needle in lowered:
            return reason
    return f"http_{status}" if status and status != 200 else "stream_error"


def error_message(data: Any) -> str | None:
    """The error a stream event or error body carries, in any of the three envelopes; None if none."""
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if kind == "response.failed":
        error = (data.get("response") or {}).get("error") or {}
        return str(error.get("message") or error.get("code") or "response failed")
    if kind == "error" or ("error" in data and not data.get("choices")):
        error = data.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or error.get("code") or error.get("type") or "error")
        return str(error or data.get("message") or "error")
    return None


def content_of(data: Any) -> tuple[bool, str]:
    """(carries content, its text) for one stream event of any of the three dialects."""
    if not isinstance(data, dict):
        return False, ""
    for choice in data.get("choices") or []:
        delta = choice.get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning_text") or ""
        if text or delta.get("tool_calls"):
            return True, str(text)
    kind = data.get("type")
    if kind == "content_block_delta":
        delta = data.get("delta") or {}
        return True, str(delta.get("text") or "")
    if kind == "response.output_text.delta":
        return True, str(data.get("delta") or "")
    if isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta"):
        return True, ""  # function-call arguments, reasoning
    return False, ""


def _headers(student: Student, dialect: str) -> dict[str, str]:
    if dialect == "anthropic":
        return {"x-api-key": student.key, "anthropic-version": "2023-06-01"}
    return {"Authorization": f"Bearer {student.key}"}


async def send_turn(client: httpx.AsyncClient, plan: ReplayPlan, student: Student, *, path: str,
                    body: dict[str, Any], origin: float) -> SentTurn:
    dialect = PERSONA_SHAPES[student.persona].dialect
    turn = SentTurn(student=student.name, persona=student.persona, sent_s=time.perf_counter() - origin)
    parts: list[str] = []
    ended = False
    try:
        async with client.stream("POST", plan.root + path, json=body, headers=_headers(student, dialect),
                                 timeout=plan.request_timeout_s) as response:
            turn.status = response.status_code
            turn.request_id = response.headers.get("x-request-id", "")
            if response.status_code != 200:
                raw = (await response.aread()).decode(errors="replace")
                try:
                    message = error_message(json.loads(raw)) or raw
                except ValueError:
                    message = raw
                turn.refused_reason = refusal_reason(response.status_code, message)
                try:
                    turn.retry_after_s = float(response.headers.get("retry-after", "0"))
                except ValueError:
                    turn.retry_after_s = 0.0
            else:
                event = ""
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                        continue
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        ended = True
                        continue
                    try:
                        data = json.loads(payload)
                    except ValueError:
                        continue
                    kind = data.get("type") if isinstance(data, dict) else None
                    if event in END_EVENTS or kind in END_EVENTS:
                        ended = True
                    failure = error_message(data)
                    if failure is not None:
                        turn.refused_reason = refusal_reason(200, failure)
                        continue
                    has_content, text = content_of(data)
                    if has_content:
                        if turn.first_token_s is None:
                            turn.first_token_s = time.perf_counter() - origin
                        turn.output_chunks += 1
                        parts.append(text)
    except httpx.TimeoutException:
        turn.refused_reason = "client_timeout"
    except httpx.HTTPError as exc:
        turn.refused_reason = f"transport:{type(exc).__name__}"
    turn.end_s = time.perf_counter() - origin
    if not turn.refused_reason and turn.status == 200 and not ended:
        turn.refused_reason = "stream_cut"
    turn.completed = turn.status == 200 and not turn.refused_reason
    if turn.completed and turn.first_token_s is None:
        turn.first_token_s = turn.end_s
    turn.answer = "".join(parts)
    return turn


def student_conversation(*, seed: int, name: str, persona: str, index: int, scale: float, tools_inline: bool,
                         context_tokens: int, model: str, fixtures_dir: Path = FIXTURES) -> Conversation:
    """A student's conversation, its random source seeded by the run's seed and the student's name
    (same seed, same tasks, tool results and think times)."""
    return Conversation(PERSONA_SHAPES[persona], index, random.Random(f"{seed}:{name}"), scale=scale,
                        tools_inline=tools_inline, context_tokens=context_tokens, model=model,
                        fixtures_dir=fixtures_dir)


def pause_after_turn(conversation: Conversation, *, completed: bool, answer: str, retry_after_s: float) -> float:
    """What a student does after a turn, in seconds of pause before the next: an answered turn is
    grown into the conversation, then they think; a refused one is sent again after at least its
    `retry-after` (at most MAX_RETRY_WAIT_S) and half a second."""
    if completed:
        conversation.grow(answer)
        return conversation.think_s()
    conversation.turn -= 1  # the client sends the same turn again
    return max(conversation.think_s(), min(retry_after_s, MAX_RETRY_WAIT_S), 0.5)


def arrival_offsets(*, seed: int, students: int, spread_s: float) -> list[float]:
    """When each student (in roster order) arrives, seconds from the start, uniform over [0, spread_s]."""
    arrivals = random.Random(f"{seed}:arrivals")
    return [arrivals.uniform(0, max(spread_s, 0.0)) for _ in range(students)]


def arrival_spread_s(duration_s: float, arrivals_s: float | None = None) -> float:
    """Students arrive over the first 30 % of the run unless told otherwise."""
    return arrivals_s if arrivals_s is not None else duration_s * 0.3


async def _student_loop(client: httpx.AsyncClient, plan: ReplayPlan, student: Student, *, origin: float,
                        deadline: float, arrival_s: float, turns: list[SentTurn],
                        progress: Callable[[SentTurn], None] | None) -> None:
    conversation = student_conversation(seed=plan.seed, name=student.name, persona=student.persona,
                                        index=student.index, scale=plan.scale, tools_inline=plan.tools_inline,
                                        context_tokens=plan.context_tokens, model=plan.model,
                                        fixtures_dir=plan.fixtures_dir)
    plan.conversations[student.name] = conversation
    await asyncio.sleep(arrival_s)
    while time.perf_counter() < deadline:
        path, body = conversation.request()
        turn = await send_turn(client, plan, student, path=path, body=body, origin=origin)
        turns.append(turn)
        if progress is not None:
            progress(turn)
        pause = pause_after_turn(conversation, completed=turn.completed, answer=turn.answer,
                                 retry_after_s=turn.retry_after_s)
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        await asyncio.sleep(min(pause, remaining))


async def run_class(plan: ReplayPlan, progress: Callable[[SentTurn], None] | None = None
                    ) -> tuple[list[SentTurn], float]:
    """Runs the class; returns its turns (in the order they ended) and the wall time in seconds
    from the start to the last turn's end."""
    offsets = arrival_offsets(seed=plan.seed, students=len(plan.students),
                              spread_s=arrival_spread_s(plan.duration_s, plan.arrivals_s))
    turns: list[SentTurn] = []
    limits = httpx.Limits(max_connections=len(plan.students) + 8, max_keepalive_connections=len(plan.students) + 8,
                          keepalive_expiry=2.0)
    async with httpx.AsyncClient(limits=limits, timeout=plan.request_timeout_s) as client:
        origin = time.perf_counter()
        deadline = origin + plan.duration_s
        await asyncio.gather(*(
            _student_loop(client, plan, student, origin=origin, deadline=deadline,
                          arrival_s=offset, turns=turns, progress=progress)
            for student, offset in zip(plan.students, offsets)))
        wall_s = time.perf_counter() - origin
    return turns, max(wall_s, max((t.end_s for t in turns), default=0.0))
