"""Which of llama-server's steps run longer than the planner's step model says (issue 20, eleventh
pass). Pure: `manage.py step_timing` reads the logs and the calibration. A worker's log written at
trace verbosity (LLAMA_ARG_LOG_VERBOSITY=5 in the demo's environment: llama-server reads it, the platform's launcher
passes its environment on), rebuilds every iteration of llama-server's loop from it, and costs each
with the calibration the planner used (research/planner/cost.CostModel.step_s).

From the log, per iteration (the pinned build's tools/server/server-context.cpp):
- it runs from `posting NEXT_RESPONSE` (update_slots) to the next one (or to `all slots are
  idle`): the batch built, the forward passes, each slot's token sampled and sent, and the tasks
  the server's queue runs before the next iteration (new requests, slot-file saves and restores);
- each generating slot's token: `slot decode token, ... n_tokens = C` (its context C);
- each prompt chunk: `cached n_tokens = C, memory_seq_rm` (C tokens already in the slot); its size
  is the rest of the slot's prompt (`new prompt, ... task.n_tokens = N`) or what is left of the
  batch (`n_batch`, from the server's start), whichever is smaller;
- the forward passes start at `n_batch (effective)` (decode()); the first token sampled after them
  (`n_gen = `) marks their end, give or take one slot's sampling.

    OCS_VAR_DIR=<the run's var> .venv/bin/python manage.py step_timing \\
        <calibration id> <worker log> [<worker log> ... --started T1,T2] [--slots 4] [--start -1]

Prints, per worker and per kind of iteration (decode only by slots generating, decode beside prompt
chunks, prompt only), the iterations, the measured and modelled seconds of their forward passes
(sums, the ratio of the sums, the median and p90 of the ratios), the time outside them (sampling,
sending, the queue's tasks), and the median ratio over time; last, the run's speed against the
calibration (every worker's measured forward-pass seconds over the modelled). In
scripts/validate_planner.sh's replays (STEP_TIMING=1) the drift probe's four requests, just before
the replay, are in the log's last start too.
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from research.planner.cost import CostModel, Piece

STAMP = re.compile(r"^\s*(?:\x1b\[[0-9;]*m)?(\d+)\.(\d{2})\.(\d{3})\.(\d{3})")
SLOT = re.compile(r"id\s+(\d+) \| task (-?\d+) \|")
NUMBER = {name: re.compile(rf"{name} = (\d+)") for name in ("n_tokens", "task.n_tokens", "n_batch \\(effective\\)")}


def seconds(line: str) -> float | None:
    """The log line's time since the server started (its `MM.SS.mmm.uuu` stamp), None without one."""
    match = STAMP.match(line)
    if not match:
        return None
    minutes, secs, millis, micros = (int(part) for part in match.groups())
    return minutes * 60 + secs + millis / 1e3 + micros / 1e6


@dataclass
class Step:
    start: float
    decode_at: float | None = None
    first_out: float | None = None
    end: float | None = None
    n_batch: int = 2048
    decoding: list[tuple[int, int]] = field(default_factory=list)  # (slot, context)
    chunks: list[tuple[int, int, int]] = field(default_factory=list)  # (slot, tokens, context before)

    @property
    def tokens(self) -> int:
        return len(self.decoding) + sum(tokens for _, tokens, _ in self.chunks)

    def kind(self) -> str:
        """decode N (only slots generating), decode N + chunks, or chunks only."""
        if self.chunks and self.decoding:
            return f"decode {len(self.decoding)} + chunks"
        if self.chunks:
            return "chunks only"
        return f"decode {len(self.decoding)}"


def _number(name: str, line: str) -> int:
    match = NUMBER[name].search(line)
    if match is None:
        raise ValueError(f"no {name} in {line.strip()[:120]!r}")
    return int(match.group(1))


def parse(lines: list[str], start: int = -1) -> list[Step]:
    """The loop's iterations in the log, of one start of the server (`start`, as a list index: the
    last by default; logs are appended)."""
    starts, last = [0], 0.0  # a start of the server is where the log's clock (since the process began) goes back
    for index, line in enumerate(lines):
        at = seconds(line)
        if at is not None:
            if at < last - 1.0:
                starts.append(index)
            last = at
    ends = starts[1:] + [len(lines)]
    lines = lines[starts[start]:ends[start]]
    batch_at_start = next((int(match.group(1)) for line in lines
                           if (match := re.search(r"llama_context: n_batch\s+=\s+(\d+)", line))), 2048)
    steps: list[Step] = []
    prompt_tokens: dict[int, int] = {}
    step: Step | None = None
    for line in lines:
        at = seconds(line)
        if at is None:
            continue
        if "posting NEXT_RESPONSE" in line or "all slots are idle" in line:
            if step is not None:
                step.end = at
                steps.append(step)
            step = Step(start=at, n_batch=batch_at_start) if "posting NEXT_RESPONSE" in line else None
            continue
        slot_match = SLOT.search(line)
        if "new prompt," in line and slot_match:
            prompt_tokens[int(slot_match.group(1))] = _number("task.n_tokens", line)
        if step is None:
            continue
        if "slot decode token" in line and slot_match:
            step.decoding.append((int(slot_match.group(1)), _number("n_tokens", line)))
        elif "memory_seq_rm" in line and "cached n_tokens" in line and slot_match:
            slot = int(slot_match.group(1))
            cached = _number("n_tokens", line)
            room = step.n_batch - step.tokens
            step.chunks.append((slot, max(0, min(prompt_tokens.get(slot, cached) - cached, room)), cached))
        elif "n_batch (effective)" in line:
            step.n_batch = _number("n_batch \\(effective\\)", line)
            if step.decode_at is None:
                step.decode_at = at
        elif " n_gen = " in line and "next token" in line and step.decode_at is not None and step.first_out is None:
            step.first_out = at
    return [s for s in steps if s.decode_at is not None and s.tokens > 0]


def overlap(start: float, end: float, intervals: list[tuple[float, float]]) -> float:
    """Seconds of [start, end] covered by `intervals` (sorted, not overlapping each other)."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in intervals if a < end and b > start)


def table(title: str, rows: dict[str, list[tuple[float, float, float]]]) -> list[str]:
    """Per kind of iteration: count, measured and modelled seconds of the forward passes, the ratio of
    the sums, the median and p90 of the ratios, the seconds outside the passes; then all of them."""
    lines = [title, f"  {'iteration':<22}{'count':>7}{'passes s':>10}{'model s':>9}{'ratio':>7}{'median':>8}"
                    f"{'p90':>7}{'outside s':>11}"]

    def order(kind: str) -> tuple[int, str]:
        return (0 if "chunks" not in kind else 1 if "decode" in kind else 2, kind)
    for kind in sorted(rows, key=order):
        items = rows[kind]
        ratios = sorted(m / p for m, p, _ in items if p > 0)
        measured, modelled = sum(m for m, _, _ in items), sum(p for _, p, _ in items)
        p90 = ratios[int(0.9 * (len(ratios) - 1))] if ratios else float("nan")
        lines.append(f"  {kind:<22}{len(items):>7}{measured:>10.1f}{modelled:>9.1f}{measured / modelled:>7.2f}"
                     f"{statistics.median(ratios) if ratios else float('nan'):>8.2f}{p90:>7.2f}"
                     f"{sum(o for _, _, o in items):>11.1f}")
    every = [item for items in rows.values() for item in items]
    measured, modelled = sum(m for m, _, _ in every), sum(p for _, p, _ in every)
    lines.append(f"  {'all':<22}{len(every):>7}{measured:>10.1f}{modelled:>9.1f}{measured / modelled:>7.2f}"
                 f"{statistics.median(m / p for m, p, _ in every if p > 0):>8.2f}{'':>7}"
                 f"{sum(o for _, _, o in every):>11.1f}")
    return lines


@dataclass(frozen=True)
class Timing:
    """What step_timing prints (`lines`) and the run's speed against the calibration (`speed`)."""

    lines: list[str]
    speed: float


def time_steps(logs: Sequence[tuple[str, str]], model: CostModel, *, slots: int, started: Sequence[float] = (),
               start: int = -1, window: float = 30.0) -> Timing:
    """Every iteration of each worker's loop (`logs`: (name, text) a worker) costed with `model`
    (the bench's speed: pass it with load_factor 1), the contention term applied for the time the
    other workers were inside their forward passes (`started`: each server's start on one clock)."""
    origins = list(started) or [0.0] * len(logs)
    if len(origins) != len(logs):
        raise ValueError("one start time per log")
    workers = []
    for (name, text), origin in zip(logs, origins):
        steps = parse(text.splitlines(), start)
        if not steps:
            raise ValueError(f"{name}: no iterations found: was it written at verbosity 5 (LLAMA_ARG_LOG_VERBOSITY=5)?")
        for step in steps:  # onto the common clock
            step.start += origin
            step.end = (step.end or step.start) + origin
            step.decode_at = (step.decode_at or 0.0) + origin
            step.first_out = step.first_out + origin if step.first_out is not None else None
        workers.append(steps)
    computing = [[(s.decode_at or 0.0, s.first_out if s.first_out is not None else s.end or 0.0) for s in steps]
                 for steps in workers]
    t0 = min(steps[0].start for steps in workers)
    total_measured = total_modelled = 0.0
    lines = [f"contention {model.contention:.3f} a step for each other worker computing; "
             f"{len(logs)} log(s): {', '.join(name for name, _ in logs)}"]
    for index, steps in enumerate(workers):
        rows: dict[str, list[tuple[float, float, float]]] = {}
        alone: dict[str, list[tuple[float, float, float]]] = {}
        buckets: dict[int, list[tuple[float, float]]] = {}
        for step in steps:
            batch = [Piece(slot, 1, context, decode=True) for slot, context in sorted(step.decoding)]
            batch += [Piece(slot, tokens, context) for slot, tokens, context in sorted(step.chunks) if tokens > 0]
            decode_at, end_of_step = step.decode_at or 0.0, step.end or step.start
            end = step.first_out if step.first_out is not None else end_of_step
            measured = end - decode_at
            others = sum(overlap(decode_at, end, computing[j]) for j in range(len(workers)) if j != index)
            busy = others / measured if measured > 0 else 0.0  # other workers computing, on average over the step
            cost = model.step_s(batch, streams=slots)
            modelled = cost * (1 + model.contention * busy)
            outside = (end_of_step - step.start) - measured
            rows.setdefault(step.kind(), []).append((measured, modelled, outside))
            alone.setdefault(step.kind(), []).append((measured, cost, outside))
            buckets.setdefault(int((step.start - t0) // window), []).append((measured, modelled))
            total_measured += measured
            total_modelled += modelled
        wall = (steps[-1].end or steps[-1].start) - steps[0].start
        idle = wall - sum((s.end or s.start) - s.start for s in steps)
        lines += ["", *table(f"{logs[index][0]}: {len(steps)} iterations over {wall:.1f} s, {idle:.1f} s of them idle; "
                             "the model with contention", rows)]
        if len(workers) > 1:
            lines += table("  the same against the model alone (no contention)", alone)
        lines.append(f"  over time (median of measured / modelled per iteration, every {window:.0f} s): " + ", ".join(
            f"{statistics.median(m / p for m, p in items if p > 0):.2f}" for _, items in sorted(buckets.items())))
    speed = total_measured / total_modelled
    lines += ["", f"speed in this run against the calibration: x{speed:.3f} "
                  "(every worker's forward passes, measured seconds over modelled)"]
    return Timing(lines=lines, speed=speed)
