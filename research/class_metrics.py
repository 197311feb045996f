"""What a class felt during a replay: pure maths over the turns' records, no Django, no I/O.

Times are seconds from the run's start in, milliseconds out where a name says `_ms`.
Percentiles are research.metrics.percentile's (linear between closest ranks).

- TTFT: first streamed content (text, tool-call arguments or reasoning) minus request sent; E2E:
  sent to last byte (docs/research/class-replay.md).
- A turn is `completed` when it streamed an answer to its end; every other turn is `refused`, with
  its reason (queue_timeout, concurrency, requests_per_minute, tokens_per_day,
  context_length_exceeded, upstream_error, client_timeout, ...).
- Prompt tokens are the worker's count; `reused_prompt_tokens` those it found in its cache
  (the request log's `cached_tokens`); `computed_prompt_tokens` the rest.
- `cache_hit_rate` = reused ÷ prompt tokens of completed turns (0-1).
- `agents`: the agent personas' (AGENT_PERSONAS) turns pooled, the per-persona fields over all of
  them together (TTFT percentiles over their completed turns, as per persona): the figure the
  planner's answer and its validation are about.
- Weighted service of a turn = computed prompt tokens × weight.prompt_token + output tokens ×
  weight.output_token, divided by the student's weight. The prompt part is received evenly from
  the end of its queue wait to its first token, the output part from the first token to the end.
- Jain's index, per 10-second window: over the students who had a turn waiting or running at
  some time in the window (sent, not yet ended), on the weighted service each received in the
  window: (Σx)² / (n·Σx²). 1 is perfectly even, 1/n is one student taking everything. The run's
  `jain_index` is the mean over windows with at least two such students and some service.
- `jain_index_per_backlogged_s`: the same, on each student's service divided by the seconds of
  the window they had a turn waiting or running (at least 0.1 s). The plain index counts a chat
  student whose 40-token question was answered at once as "served less" than an agent whose
  2,000-token turn ran all window; the rate does not, and a question left waiting still scores low.
- `jain_ideal`: both indexes again over the same completed turns served by the ideal fair server
  (`processor_sharing`: every student with a turn in hand served at once, all of them at rates in
  proportion to their weights, at the run's own throughput), so a measured index reads against what
  fair sharing itself gives this class: the ideal's plain index is below 1 too, because students
  are in hand for different parts of a window (a question, then thinking), not because anyone waits.
  It is a reference, not a ceiling: processor sharing equalises rates, not a window's totals, so a
  schedule that stretches turns across windows can score a little above it (a short demo replay:
  0.690 against the ideal's 0.654), and holding busy students back, leaving workers idle, would
  raise the plain index further without being fairer.
- `jain_vs_ideal`: how fairness is judged: the index per second in hand, the ideal's on the same
  turns, and their ratio (1: as fair as the ideal fair server; no absolute target, since the
  ideal itself stays below 1 on a class like this). With it, what holds a gap: `held_share`, the
  index of each student's share of their time in hand during which a turn of theirs held a slot
  (the line's order and the number of slots decide it; the ideal serves everyone in hand at once:
  1), and `per_held_s`, the index of the service a student got per second of holding one (prefill
  and decode differ by 100 x per second, a shared CPU slows some workers more than others).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from inference.admission.fair_share import OUTPUT_TOKEN_COST, PROMPT_TOKEN_COST
from research.metrics import percentile

WINDOW_S = 10.0
MIN_BACKLOG_S = 0.1
AGENT_PERSONAS = frozenset({"agent", "claude", "codex"})
DONE = 1e-9  # service left below which processor_sharing takes a part as done (float remainders)


@dataclass(frozen=True)
class Turn:
    """One request of one student, as the replay saw it, joined with the request log's counts."""

    student: str
    persona: str
    sent_s: float
    end_s: float
    first_token_s: float | None = None
    completed: bool = False
    refused_reason: str = ""
    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0
    output_tokens: int = 0
    queue_wait_s: float = 0.0
    worker: str = ""
    request_id: str = ""

    @property
    def computed_prompt_tokens(self) -> int:
        return max(self.prompt_tokens - self.reused_prompt_tokens, 0)

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_token_s is None else (self.first_token_s - self.sent_s) * 1000

    @property
    def e2e_ms(self) -> float:
        return (self.end_s - self.sent_s) * 1000


@dataclass(frozen=True)
class Weights:
    """What a token costs the worker, and a student's share (1 unless a teacher set another)."""

    prompt_token: float = PROMPT_TOKEN_COST
    output_token: float = OUTPUT_TOKEN_COST
    students: Mapping[str, float] = field(default_factory=dict)

    def of(self, student: str) -> float:
        return self.students.get(student, 1.0) or 1.0

    def as_dict(self) -> dict[str, Any]:
        return {"prompt_token": self.prompt_token, "output_token": self.output_token,
                "students": dict(self.students)}


def parse_weights(text: str) -> Weights:
    """`prompt:1,output:2` -> Weights(1, 2); a weight left out is the fair-sharing rule's own
    (inference/admission/fair_share.py: what a token costs the worker). Raises ValueError with a plain message."""
    values = {"prompt": PROMPT_TOKEN_COST, "output": OUTPUT_TOKEN_COST}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, number = part.partition(":")
        if not sep or name.strip() not in values:
            raise ValueError(f"--weights {part!r}: expected prompt:W or output:W")
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"--weights {part!r}: {number!r} is not a number") from None
        if value < 0:
            raise ValueError(f"--weights {part!r}: a weight cannot be negative")
        values[name.strip()] = value
    return Weights(prompt_token=values["prompt"], output_token=values["output"])


def p50_p95(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    return {"p50": percentile(values, 50), "p95": percentile(values, 95)}


def service_parts(turn: Turn, weights: Weights) -> list[tuple[float, float, float]]:
    """(start, end, weighted service) pieces of a turn, received evenly over [start, end]."""
    if turn.first_token_s is None:
        return []
    share = weights.of(turn.student)
    prefill_start = min(turn.sent_s + turn.queue_wait_s, turn.first_token_s)
    return [
        (prefill_start, turn.first_token_s, turn.computed_prompt_tokens * weights.prompt_token / share),
        (turn.first_token_s, max(turn.end_s, turn.first_token_s), turn.output_tokens * weights.output_token / share),
    ]


def _overlap(start: float, end: float, low: float, high: float) -> float:
    """The fraction of [start, end] inside [low, high); a point counts whole where it falls."""
    if end <= start:
        return 1.0 if low <= start < high else 0.0
    return max(0.0, min(end, high) - max(start, low)) / (end - start)


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index of `values` (None when all are zero or there are none)."""
    total, squares = sum(values), sum(v * v for v in values)
    if not values or squares <= 0:
        return None
    return total * total / (len(values) * squares)


def jain_windows(turns: Sequence[Turn], weights: Weights, *, window_s: float = WINDOW_S,
                 duration_s: float | None = None) -> list[dict[str, Any]]:
    """Per window: its start, the students waiting in it and their weighted service, and Jain's index."""
    if not turns:
        return []
    end = duration_s if duration_s is not None else max(t.end_s for t in turns)
    windows = []
    start = 0.0
    while start < end:
        stop = start + window_s
        waiting = sorted({t.student for t in turns if t.sent_s < stop and t.end_s >= start})
        service = {student: 0.0 for student in waiting}
        backlogged_s = {student: 0.0 for student in waiting}
        held_s = {student: 0.0 for student in waiting}
        for turn in turns:
            if turn.student not in service:
                continue
            backlogged_s[turn.student] += max(0.0, min(turn.end_s, stop) - max(turn.sent_s, start))
            if turn.first_token_s is not None:  # it held a slot from the end of its wait to its end
                held_s[turn.student] += max(0.0, min(turn.end_s, stop) - max(turn.sent_s + turn.queue_wait_s, start))
            for piece_start, piece_end, amount in service_parts(turn, weights):
                service[turn.student] += amount * _overlap(piece_start, piece_end, start, stop)
        in_hand = {s: max(min(backlogged_s[s], window_s), MIN_BACKLOG_S) for s in waiting}
        rates = [service[s] / in_hand[s] for s in waiting]
        holding = [min(held_s[s], in_hand[s]) / in_hand[s] for s in waiting]
        per_held = [service[s] / max(held_s[s], MIN_BACKLOG_S) for s in waiting if held_s[s] > 0]
        several = len(waiting) >= 2
        windows.append({"start_s": start, "students": len(waiting),
                        "jain": jain(list(service.values())) if several else None,
                        "jain_rate": jain(rates) if several else None,
                        "jain_held": jain(holding) if several else None,
                        "jain_per_held_s": jain(per_held) if len(per_held) >= 2 else None,
                        "service": service})
        start = stop
    return windows


def jain_index(windows: Iterable[dict[str, Any]], key: str = "jain") -> float | None:
    found = [w[key] for w in windows if w["students"] >= 2 and w[key] is not None]
    return sum(found) / len(found) if found else None


def busy_seconds(turns: Sequence[Turn]) -> float:
    """Seconds during which at least one of `turns` was in flight (sent, not yet ended)."""
    total, reach = 0.0, -math.inf
    for turn in sorted(turns, key=lambda t: t.sent_s):
        start = max(turn.sent_s, reach)
        if turn.end_s > start:
            total += turn.end_s - start
        reach = max(reach, turn.end_s)
    return total


def processor_sharing(turns: Sequence[Turn], weights: Weights) -> tuple[list[Turn], float]:
    """The completed `turns` as the ideal fair server would have served them, and its rate.

    Weighted processor sharing (a fluid server; the limit the virtual token counter approaches):
    each student's turns in the order sent, a student's next one started when the last ends; at
    every instant each student with a turn in hand receives service at `rate` x their weight /
    the weights of all in hand; a turn's prompt part (computed tokens x weights.prompt_token) is
    received first and its first token is the instant that part is done, then its output part.
    `rate`: the run's own throughput, the service of these turns over the seconds any was in
    flight. Nobody waits in a line and nothing is refused (refused turns are left out: what they
    would have cost is not known)."""
    done = sorted((t for t in turns if t.completed), key=lambda t: (t.sent_s, t.request_id))
    work = [(t.computed_prompt_tokens * weights.prompt_token, t.output_tokens * weights.output_token) for t in done]
    busy = busy_seconds(done)
    rate = sum(p + o for p, o in work) / busy if busy > 0 else 0.0
    if rate <= 0:  # nothing to serve: every turn is answered as it is sent
        return [replace(t, queue_wait_s=0.0, first_token_s=t.sent_s, end_s=t.sent_s, worker="") for t in done], 0.0
    left = [[p, o] for p, o in work]
    start: dict[int, float] = {}
    first: dict[int, float] = {}
    end: dict[int, float] = {}
    queues: dict[str, list[int]] = defaultdict(list)
    now, arrived = (done[0].sent_s if done else 0.0), 0

    def settle() -> None:
        """Heads whose part is done: first token, end, the student's next turn started."""
        for queue in queues.values():
            while queue:
                head = queue[0]
                start.setdefault(head, now)
                if left[head][0] > DONE:
                    break
                first.setdefault(head, now)
                if left[head][1] > DONE:
                    break
                end[head] = now
                queue.pop(0)

    while arrived < len(done) or any(queues.values()):
        while arrived < len(done) and done[arrived].sent_s <= now:
            queues[done[arrived].student].append(arrived)
            arrived += 1
        settle()
        heads = [queue[0] for queue in queues.values() if queue]
        if not heads:  # idle until the next turn is sent, or every turn served
            if arrived == len(done):
                break
            now = done[arrived].sent_s
            continue
        next_arrival = done[arrived].sent_s - now if arrived < len(done) else math.inf
        in_hand = sum(weights.of(done[index].student) for index in heads)
        rates = {index: rate * weights.of(done[index].student) / in_hand for index in heads}
        parts = {index: 0 if left[index][0] > DONE else 1 for index in heads}  # prompt first, then output
        step = min(next_arrival, *(left[i][parts[i]] / rates[i] for i in heads))
        for index, part in parts.items():
            left[index][part] = max(0.0, left[index][part] - rates[index] * step)
            if left[index][part] <= DONE * (1 + work[index][part]):
                left[index][part] = 0.0
        now += step
    ideal = [replace(turn, queue_wait_s=start[i] - turn.sent_s, first_token_s=first[i], end_s=end[i], worker="")
             for i, turn in enumerate(done)]
    return ideal, rate


def aggregate(turns: Sequence[Turn], weights: Weights) -> dict[str, Any]:
    """The per-student fields over `turns` (one student's, or a persona's)."""
    done = [t for t in turns if t.completed]
    prompt = sum(t.prompt_tokens for t in done)
    reused = sum(t.reused_prompt_tokens for t in done)
    return {
        "ttft_ms": p50_p95([t.ttft_ms for t in done if t.ttft_ms is not None]),
        "e2e_ms": p50_p95([t.e2e_ms for t in done]),
        "completed": len(done),
        "refused": len(turns) - len(done),
        "refused_reasons": dict(Counter(t.refused_reason or "unknown" for t in turns if not t.completed)),
        "prompt_tokens": prompt,
        "computed_prompt_tokens": sum(t.computed_prompt_tokens for t in done),
        "reused_prompt_tokens": reused,
        "output_tokens": sum(t.output_tokens for t in done),
        "cache_hit_rate": reused / prompt if prompt else None,
        "service": sum(amount for t in turns for _, _, amount in service_parts(t, weights)),
    }


def under_load(turns: Sequence[Turn], *, persona: str = "chat", agents: int = 3, bursts: int = 1) -> list[Turn]:
    """`persona`'s turns sent while at least `agents` agent students and `bursts` burst students
    had a turn waiting or running (the issue's comparison: a chat student among agents)."""
    chosen = []
    for turn in turns:
        if turn.persona != persona:
            continue
        busy = {(t.student, t.persona) for t in turns if t.sent_s <= turn.sent_s < t.end_s}
        if (sum(1 for _, p in busy if p in AGENT_PERSONAS) >= agents
                and sum(1 for _, p in busy if p == "burst") >= bursts):
            chosen.append(turn)
    return chosen


def class_report(turns: Sequence[Turn], *, duration_s: float, weights: Weights,
                 roster: Sequence[tuple[str, str]] = (), workers: Sequence[str] = (),
                 window_s: float = WINDOW_S) -> dict[str, Any]:
    """The replay's JSON, less `config` (the caller's): per student, per persona, fairness,
    cache and throughput. `roster`: (student, persona) of every student, so one who never got a
    turn in still has a row. `workers`: the names of the workers serving the run."""
    by_student: dict[str, list[Turn]] = defaultdict(list)
    persona_of = dict(roster)
    for turn in turns:
        by_student[turn.student].append(turn)
        persona_of.setdefault(turn.student, turn.persona)
    total_service = sum(amount for t in turns for _, _, amount in service_parts(t, weights)) or 0.0
    per_student = []
    for student in sorted(persona_of):
        row = {"student": student, "persona": persona_of[student], **aggregate(by_student[student], weights)}
        row["service_share"] = row["service"] / total_service if total_service else None
        per_student.append(row)
    per_persona: dict[str, Any] = {}
    for persona in sorted(set(persona_of.values())):
        members = [s for s, p in persona_of.items() if p == persona]
        per_persona[persona] = {"students": len(members),
                                **aggregate([t for s in members for t in by_student[s]], weights)}
    windows = jain_windows(turns, weights, window_s=window_s, duration_s=duration_s)
    ideal, ideal_rate = processor_sharing(turns, weights)
    ideal_windows = jain_windows(ideal, weights, window_s=window_s, duration_s=duration_s)
    done = [t for t in turns if t.completed]
    prompt = sum(t.prompt_tokens for t in done)
    agent_done = [t for t in done if t.persona in AGENT_PERSONAS]
    agent_prompt = sum(t.prompt_tokens for t in agent_done)
    output = sum(t.output_tokens for t in done)
    by_worker: dict[str, dict[str, float]] = {}
    for name in sorted({*workers, *(t.worker for t in done if t.worker)}):
        mine = [t for t in done if t.worker == name]
        by_worker[name] = {
            "output_tokens_per_s": sum(t.output_tokens for t in mine) / duration_s if duration_s else 0.0,
            "computed_prompt_tokens_per_s": (sum(t.computed_prompt_tokens for t in mine) / duration_s
                                             if duration_s else 0.0),
            "turns": len(mine),
        }
    chat_loaded = [t for t in under_load(turns) if t.completed and t.ttft_ms is not None]
    in_hand, ideal_in_hand = jain_index(windows, "jain_rate"), jain_index(ideal_windows, "jain_rate")
    return {
        "duration_s": duration_s,
        "turns": len(turns),
        "completed": len(done),
        "refused": len(turns) - len(done),
        "per_student": per_student,
        "per_persona": per_persona,
        "agents": {"students": sum(1 for p in persona_of.values() if p in AGENT_PERSONAS),
                   **aggregate([t for t in turns if t.persona in AGENT_PERSONAS], weights)},
        "jain_index": jain_index(windows),
        "jain_index_per_backlogged_s": jain_index(windows, "jain_rate"),
        "jain_windows": [{"start_s": w["start_s"], "students": w["students"], "jain": w["jain"],
                          "jain_rate": w["jain_rate"]} for w in windows],
        "jain_ideal": {"jain_index": jain_index(ideal_windows),
                       "jain_index_per_backlogged_s": jain_index(ideal_windows, "jain_rate"),
                       "service_per_s": ideal_rate},
        "jain_vs_ideal": {"per_s_in_hand": in_hand, "ideal_per_s_in_hand": ideal_in_hand,
                          "ratio": in_hand / ideal_in_hand if in_hand is not None and ideal_in_hand else None,
                          # where the gap comes from: who holds a slot while in hand (the line and
                          # the slots; the ideal: 1), and what a held slot gives per second
                          "held_share": jain_index(windows, "jain_held"),
                          "per_held_s": jain_index(windows, "jain_per_held_s")},
        "cache_hit_rate": sum(t.reused_prompt_tokens for t in done) / prompt if prompt else None,
        "agent_cache_hit_rate": (sum(t.reused_prompt_tokens for t in agent_done) / agent_prompt
                                 if agent_prompt else None),
        "tokens_per_s_per_worker": (output / duration_s / max(len(by_worker), 1)) if duration_s else 0.0,
        "tokens_per_s_by_worker": by_worker,
        "chat_under_load": {"turns": len(chat_loaded), "ttft_ms": p50_p95([t.ttft_ms for t in chat_loaded
                                                                           if t.ttft_ms is not None])},
    }


def turn_row(turn: Turn) -> dict[str, Any]:
    """One turn as stored with the run (the run page's plots read these)."""
    return {"student": turn.student, "persona": turn.persona, "sent_s": round(turn.sent_s, 3),
            "ttft_ms": None if turn.ttft_ms is None else round(turn.ttft_ms, 1), "e2e_ms": round(turn.e2e_ms, 1),
            "queue_wait_ms": round(turn.queue_wait_s * 1000, 1),
            "completed": turn.completed, "refused_reason": turn.refused_reason, "prompt_tokens": turn.prompt_tokens,
            "reused_prompt_tokens": turn.reused_prompt_tokens, "output_tokens": turn.output_tokens,
            "worker": turn.worker, "request_id": turn.request_id}


def turn_from_row(row: Mapping[str, Any]) -> Turn:
    """A stored turn back (to recompute a report with other weights or windows)."""
    ttft_ms = row.get("ttft_ms")
    sent = float(row["sent_s"])
    return Turn(student=row["student"], persona=row["persona"], sent_s=sent, end_s=sent + float(row["e2e_ms"]) / 1000,
                first_token_s=None if ttft_ms is None else sent + float(ttft_ms) / 1000,
                completed=bool(row["completed"]), refused_reason=row.get("refused_reason") or "",
                prompt_tokens=int(row.get("prompt_tokens") or 0),
                reused_prompt_tokens=int(row.get("reused_prompt_tokens") or 0),
                output_tokens=int(row.get("output_tokens") or 0),
                queue_wait_s=float(row.get("queue_wait_ms") or 0) / 1000, worker=row.get("worker") or "",
                request_id=row.get("request_id") or "")
