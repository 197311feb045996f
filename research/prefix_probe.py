"""What a client's public constant prefix (inference/admission/shared_prefix.py) saves a further
student's first turn, through a running gateway: `manage.py prefix_probe`.

The gateway's rule makes a prefix public to a student once k students other than them sent it. The
probe sends one client's first request (research/class_personas.py: the Copilot CLI's or Claude
Code's captured body) from fresh students of its own:

1. k students send it (they find nothing public: 0 .. k - 1 others had sent it), then one more
   (the first to whom it is public: the worker computes the public part alone and saves it); these
   are the warm-up;
2. then `repeats` pairs, in alternating order, each a further student's first turn on the worker:
   `shared`, the same request (its own task), and `unshared`, the same request with a few
   characters of its own put before the system prompt, so that nothing of it can be public: the
   same turn without sharing, measured in the same run on the same gateway and workers.

Stored as two runs of one group in the research app (`/research/groups/<group>/`), each with its
samples: TTFT measured on the client from the stream, prompt and cached tokens from the gateway's
request log (the worker's counts). The students are fresh for every probe (named after the run's
group), so each measured turn is a first turn on its worker, with no slot file of its own.
"""
from __future__ import annotations

import asyncio
import copy
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from django.utils import timezone

from research.class_personas import PERSONA_SHAPES
from research.class_replay import ReplayPlan, SentTurn, Student, send_turn, student_conversation
from research.metrics import percentile
from research.models import BenchmarkRun, RequestSample
from research.replay_services import (
    DEFAULT_LIMITS,
    fleet_config,
    join_request_log,
    model_and_pool,
    replay_keys_revoke,
    replay_students_ensure,
)
from research.services import new_group

PERSONAS = ("agent", "claude")


def unshared(body: dict[str, Any], dialect: str, nonce: str) -> dict[str, Any]:
    """The same request with `nonce` before its system prompt: the same turn, nothing of it public."""
    body = copy.deepcopy(body)
    if dialect == "anthropic":
        system = body.get("system")
        blocks = system if isinstance(system, list) else [{"type": "text", "text": str(system or "")}]
        body["system"] = [{"type": "text", "text": f"Session {nonce}. "}, *blocks]
    else:
        first = body["messages"][0]
        first["content"] = f"Session {nonce}. " + str(first["content"])
    return body


@dataclass(frozen=True)
class ProbeOptions:
    base_url: str
    persona: str = "agent"
    k: int = 5
    repeats: int = 5
    scale: float = 0.2
    seed: int = 1
    label: str = ""
    request_log_wait_s: float = 10.0


def ms_stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    return {"p50": statistics.median(values), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "mean": statistics.fmean(values)}


async def _send_all(plan: ReplayPlan, steps: list[tuple[str, Student, dict[str, Any]]]) -> list[tuple[str, SentTurn]]:
    sent = []
    origin = time.perf_counter()
    async with httpx.AsyncClient() as client:
        for kind, student, body in steps:
            path = PERSONA_SHAPES[student.persona].path
            sent.append((kind, await send_turn(client, plan, student, path=path, body=body, origin=origin)))
    return sent


def prefix_probe_run(options: ProbeOptions, *, say: Callable[[str], Any] = lambda _: None) -> dict[str, Any]:
    """Runs the probe; returns the figures and the two stored runs' ids."""
    if options.persona not in PERSONAS:
        raise ValueError(f"--persona must be one of {', '.join(PERSONAS)}")
    pool, model = model_and_pool()
    fleet = fleet_config(pool=pool, model=model)
    group = new_group()
    dialect = PERSONA_SHAPES[options.persona].dialect
    count = options.k + 1 + 2 * options.repeats
    roster = [(f"replay-prefix-{group}-{n:02d}", options.persona) for n in range(count)]
    issued = replay_students_ensure(roster=roster, limits=DEFAULT_LIMITS, pool=pool)
    plan = ReplayPlan(base_url=options.base_url, students=[], duration_s=0, scale=options.scale,
                      model=model.public_id, context_tokens=int(fleet["context"] or model.context_length))
    students = [Student(name=user.username, persona=options.persona, key=raw, index=n)
                for n, (user, _key, raw) in enumerate(issued)]

    def first_request(student: Student) -> dict[str, Any]:
        conversation = student_conversation(seed=options.seed, name=student.name, persona=options.persona,
                                            index=student.index, scale=options.scale, tools_inline=True,
                                            context_tokens=plan.context_tokens, model=model.public_id)
        return conversation.request()[1]

    steps: list[tuple[str, Student, dict[str, Any]]] = [("warmup", s, first_request(s))
                                                        for s in students[:options.k + 1]]
    measured = students[options.k + 1:]
    for r in range(options.repeats):
        a, b = measured[2 * r], measured[2 * r + 1]
        pair = [("shared", a, first_request(a)), ("unshared", b, unshared(first_request(b), dialect, uuid.uuid4().hex))]
        steps += pair if r % 2 == 0 else pair[::-1]
    say(f"{len(steps)} turns of {options.persona} against {plan.root} (k = {options.k}, {fleet['workers']} workers x "
        f"{fleet['slots']} slots, context {fleet['context']})")
    try:
        sent = asyncio.run(_send_all(plan, steps))
    finally:
        replay_keys_revoke([key for _user, key, _raw in issued])
    turns = join_request_log([turn for _kind, turn in sent], wait_s=options.request_log_wait_s)
    config = {**fleet, "persona": options.persona, "k": options.k, "repeats": options.repeats, "scale": options.scale,
              "seed": options.seed, "model": model.public_id, "base_url": plan.root}
    result: dict[str, Any] = {"group": group, "config": config}
    triples = [(kind, turn, joined) for (kind, turn), joined in zip(sent, turns)]
    for kind in ("shared", "unshared"):
        # The warm-up turns are kept with the shared run, as its warm-up samples.
        rows = [t for t in triples if t[0] == kind or (kind == "shared" and t[0] == "warmup")]
        kept = [(turn, joined) for k, turn, joined in rows if k == kind and turn.completed]
        ttft = [1000 * (turn.first_token_s - turn.sent_s) for turn, _ in kept if turn.first_token_s is not None]
        computed = [joined.prompt_tokens - joined.reused_prompt_tokens for _, joined in kept]
        prompt_p50 = statistics.median([j.prompt_tokens for _, j in kept]) if kept else 0
        figures: dict[str, Any] = {
                   "ttft_ms": ms_stats(ttft), "computed_tokens_p50": statistics.median(computed) if computed else None,
                   "prompt_tokens_p50": prompt_p50,
                   "cached_tokens": [j.reused_prompt_tokens for _, j in kept], "completed": len(kept),
                   "requests": options.repeats}
        run = BenchmarkRun.objects.create(
            group=group, scenario="shared-prefix", target=BenchmarkRun.Target.GATEWAY, base_url=plan.root,
            model=model.public_id, launch=config, label=options.label or f"{options.persona} first turn, {kind}",
            prompt_tokens=int(prompt_p50),
            output_tokens=PERSONA_SHAPES[options.persona].output_tokens, requests=len(rows),
            warmup=len(rows) - options.repeats, summary={**figures, "kind": kind},
            status=BenchmarkRun.Status.DONE if len(ttft) == options.repeats else BenchmarkRun.Status.FAILED,
            ended_at=timezone.now())
        RequestSample.objects.bulk_create([
            RequestSample(run=run, index=n, warmup=k == "warmup", ok=turn.completed, error=turn.refused_reason[:300],
                          sent_ms=1000 * turn.sent_s,
                          ttft_ms=None if turn.first_token_s is None else 1000 * (turn.first_token_s - turn.sent_s),
                          e2e_ms=1000 * (turn.end_s - turn.sent_s), prompt_tokens=joined.prompt_tokens,
                          output_tokens=joined.output_tokens, cached_tokens=joined.reused_prompt_tokens)
            for n, (k, turn, joined) in enumerate(rows)])
        result[kind] = {**figures, "run_id": run.pk}
    shared, alone = result["shared"]["ttft_ms"]["p50"], result["unshared"]["ttft_ms"]["p50"]
    result["ttft_ratio_p50"] = shared / alone if shared is not None and alone else None
    return result
