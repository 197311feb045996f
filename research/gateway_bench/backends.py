"""The production back end against the embedded one: issue 53's targets, judged from pairs of
`bench_gateway --json` reports (one on PostgreSQL + Redis with `--processes 1,2`, one `--embedded`),
or from one report of `--processes 1,2 --beside-embedded`, where both back ends ran in the same
rounds (`beside_pair` splits it into the same pair, with one hop and one machine for both).

Each gateway is first taken against the reference hop of its own run (the same bare Python hop, in
the same rounds), so a pair of runs made minutes apart compares the gateways' own costs, not the
machine's speed at two moments: completions/s and CPU per chunk as the gateway's ÷ its hop's, the
first token as the time added over its hop. Then one back end against the other:

- time to first token added at 32 streams: PostgreSQL + Redis at most 5 ms (p50) and 20 ms (p99)
  above the embedded gateway's;
- completions/s at 32 and 128 streams: at least 0.97 × the embedded gateway's;
- CPU per relayed chunk at 32 streams: at most 1.1 × the embedded gateway's;
- at 128 streams, two PostgreSQL + Redis processes complete more than one;
- no errors in either run.

With several pairs, each target is judged in each pair and its figures' range is shown: a target
met in some pairs and not in others is within the machine's noise, and says so.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Report = dict[str, Any]  # a bench_gateway report as its --json writes it

ONE, TWO, HOP = "gateway uvicorn x1", "gateway uvicorn x2", "reference hop"
BESIDE = ONE + " embedded"  # run.py's name for the embedded gateway measured beside PostgreSQL + Redis


def has_beside(report: Report) -> bool:
    """Whether the report measured the embedded gateway in the same rounds (`--beside-embedded`)."""
    return any(level["target"] == BESIDE for level in report["levels"])


def beside_pair(report: Report) -> tuple[Report, Report]:
    """One `--beside-embedded` report as a (PostgreSQL + Redis, embedded) pair: the same report
    without the embedded gateway, and the same report with only it, under the name `judge` reads
    (direct and the hops are shared: measured in the same rounds)."""
    if not has_beside(report):
        raise ValueError("this report has no embedded gateway measured beside (bench_gateway --beside-embedded)")
    gateways = {level["target"] for level in report["levels"] if level["target"].startswith("gateway")}
    shared = [level for level in report["levels"] if level["target"] not in gateways]
    redis = {**report, "levels": [level for level in report["levels"] if level["target"] != BESIDE]}
    beside = [{**level, "target": ONE} for level in report["levels"] if level["target"] == BESIDE]
    embedded = {**report, "setup": {**report["setup"], "backend": report["setup"]["beside"]}, "levels": shared + beside}
    return redis, embedded


@dataclass(frozen=True)
class Target:
    name: str
    bound: str
    unit: str
    figure: Callable[[Report, Report], float]
    met: Callable[[float], bool]


def _level(report: Report, streams: int, target: str) -> Report:
    for level in report["levels"]:
        if level["upstream"] == "replay" and level["streams"] == streams and level["target"] == target:
            return level
    raise KeyError(f"no replay level at {streams} streams for {target!r} in this report")


def _number(level: Report, key: str) -> float:
    value = level.get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def _of_hop(report: Report, streams: int, key: str, target: str = ONE) -> float:
    hop = _number(_level(report, streams, HOP), key)
    return _number(_level(report, streams, target), key) / hop if hop > 0 else math.nan


def _added(report: Report, streams: int, key: str) -> float:
    return _number(_level(report, streams, ONE), key) - _number(_level(report, streams, HOP), key)


def _cpu_per_chunk(report: Report, streams: int, target: str) -> float:
    level = _level(report, streams, target)
    chunks = _number(level, "chunks_per_s")
    return _number(level, "server_cpu_percent") / chunks if chunks > 0 else math.nan


def _cpu_of_hop(report: Report, streams: int) -> float:
    hop = _cpu_per_chunk(report, streams, HOP)
    return _cpu_per_chunk(report, streams, ONE) / hop if hop > 0 else math.nan


def _errors(report: Report) -> float:
    return float(sum(level["errors"] for level in report["levels"] if level["target"].startswith("gateway")))


TARGETS: tuple[Target, ...] = (
    Target("32 streams: TTFT added p50, PostgreSQL + Redis − embedded", "≤ 5 ms", " ms",
           lambda redis, emb: _added(redis, 32, "ttft_p50_ms") - _added(emb, 32, "ttft_p50_ms"), lambda v: v <= 5.0),
    Target("32 streams: TTFT added p99, PostgreSQL + Redis − embedded", "≤ 20 ms", " ms",
           lambda redis, emb: _added(redis, 32, "ttft_p99_ms") - _added(emb, 32, "ttft_p99_ms"), lambda v: v <= 20.0),
    Target("32 streams: completions/s, PostgreSQL + Redis ÷ embedded", "≥ 0.97", "×",
           lambda redis, emb: _of_hop(redis, 32, "completions_per_s") / _of_hop(emb, 32, "completions_per_s"),
           lambda v: v >= 0.97),
    Target("128 streams: completions/s, PostgreSQL + Redis ÷ embedded", "≥ 0.97", "×",
           lambda redis, emb: _of_hop(redis, 128, "completions_per_s") / _of_hop(emb, 128, "completions_per_s"),
           lambda v: v >= 0.97),
    Target("32 streams: CPU per chunk, PostgreSQL + Redis ÷ embedded", "≤ 1.1", "×",
           lambda redis, emb: _cpu_of_hop(redis, 32) / _cpu_of_hop(emb, 32), lambda v: v <= 1.1),
    Target("128 streams: completions/s, 2 processes ÷ 1 (PostgreSQL + Redis)", "> 1", "×",
           lambda redis, emb: _of_hop(redis, 128, "completions_per_s", TWO) / _of_hop(redis, 128, "completions_per_s"),
           lambda v: v > 1.0),
    Target("errors, both runs", "0", "",
           lambda redis, emb: _errors(redis) + _errors(emb), lambda v: v == 0),
)


@dataclass(frozen=True)
class Judged:
    target: Target
    figures: tuple[float, ...]  # one per pair

    @property
    def met(self) -> tuple[bool, ...]:
        return tuple(not math.isnan(f) and self.target.met(f) for f in self.figures)

    @property
    def verdict(self) -> str:
        met = sum(self.met)
        if met == len(self.figures):
            return "met"
        return "not met" if met == 0 else f"met in {met} of {len(self.figures)}"

    def line(self) -> str:
        figures = ", ".join(_fmt(f, self.target.unit) for f in self.figures)
        return f"  {self.target.name}: {figures} (target {self.target.bound}): {self.verdict}"

    def as_dict(self) -> dict[str, object]:
        return {"target": self.target.name, "bound": self.target.bound, "verdict": self.verdict,
                "figures": [None if math.isnan(f) else round(f, 4) for f in self.figures], "met": list(self.met),
                "shown": [_fmt(f, self.target.unit) for f in self.figures]}


def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    if unit == " ms":
        return f"{value:+.2f} ms"
    return f"{value:.3f}{unit}" if unit else f"{value:g}"


def judge(pairs: Sequence[tuple[Report, Report]]) -> list[Judged]:
    """Each target over the pairs (PostgreSQL + Redis report, embedded report)."""
    for redis, embedded in pairs:
        if not ("PostgreSQL" in redis["setup"]["backend"] and "Redis" in redis["setup"]["backend"]
                and embedded["setup"]["backend"].startswith("embedded default")):
            raise ValueError("each pair is a PostgreSQL + Redis report, then an embedded one")
    judged = []
    for target in TARGETS:
        figures = []
        for redis, embedded in pairs:
            try:
                figures.append(target.figure(redis, embedded))
            except KeyError:
                figures.append(math.nan)  # a level or target that did not run: not met
        judged.append(Judged(target, tuple(figures)))
    return judged
