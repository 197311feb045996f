"""The gateway benchmark's numbers: per-round statistics, medians over rounds, the gateway ÷
direct ratios, the issue's targets, and the printed tables. Pure: no Django, no I/O.

Baselines: every target is compared with direct, and each gateway also with the reference hop
(research/gateway_bench/reference_hop.py: a bare pass-through on the same server and upstream
client), measured in the same rounds, so what the gateway's own work costs shows apart from what
any Python hop costs on this machine.

Units: TTFT in milliseconds; completions and content chunks per second of round time; a
gateway's CPU as the percentage of one core its processes used over the round (100 = one core
busy all round: the gateway is CPU-bound).
A level's value is the median over its rounds of each round's value (its TTFT p99 is the median
of the rounds' p99s); its errors are the sum. Ratios compare a gateway's medians with the direct
medians at the same upstream and level; direct rounds alternate with the gateway rounds.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

from research.gateway_bench.client import RoundResult

DIRECT = "direct"
REFERENCE = "reference hop"
CONSUMER_HOP = "consumer hop"  # the reference hop's work in a Channels AsyncHttpConsumer (--consumer-hop)
HOPS = (REFERENCE, CONSUMER_HOP)  # measured beside the gateways; the goals judge gateways only


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100), linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _median(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return statistics.median(present) if present else math.nan


@dataclass(frozen=True)
class RoundStats:
    ttft_p50_ms: float
    ttft_p99_ms: float
    completions_per_s: float
    chunks_per_s: float
    completions: int
    errors: int
    duration_s: float
    error_samples: tuple[str, ...] = ()
    server_cpu_percent: float = math.nan  # the gateway processes' CPU time ÷ round time; NaN for direct
    server_system_percent: float = math.nan  # the part of it spent in the kernel (system calls)
    # Round trips the gateway processes made to Redis during the round (their /metrics), per
    # completed request; NaN where there is no Redis (direct, the reference hop, the embedded default).
    live_round_trips_per_request: float = math.nan
    # The gateway processes' mean milliseconds per request from the step before (or arrival) to
    # each step (their /metrics, ocs_request_step_seconds), in the steps' order; empty for others.
    step_ms: tuple[tuple[str, float], ...] = ()
    # Per completed request, p50: from writing it to its last content chunk, and from there to
    # the end of the response (what the server still does once the answer is out).
    last_token_p50_ms: float = math.nan
    after_last_token_p50_ms: float = math.nan
    # The whole machine during the round (every process, the load generator's too), in % of all
    # its cores: busy, and stolen by the hypervisor for other machines. NaN where unmeasured.
    machine_busy_percent: float = math.nan
    machine_steal_percent: float = math.nan
    # Every redis-server, and every postgres, process on the machine during the round, in % of
    # one core: the back end's own work, on the same cores as the gateway here (on other machines
    # in production: RDS, and Redis where it is managed). NaN where unmeasured.
    redis_cpu_percent: float = math.nan
    postgres_cpu_percent: float = math.nan

    @classmethod
    def of(cls, measured: RoundResult, *, server_cpu_s: float | None = None, server_system_s: float | None = None,
           live_round_trips: float | None = None, step_ms: dict[str, float] | None = None,
           machine_cpu_s: tuple[float, float, int] | None = None, redis_cpu_s: float | None = None,
           postgres_cpu_s: float | None = None) -> RoundStats:
        seconds = measured.duration_s or math.nan
        busy, stolen, cores = machine_cpu_s or (math.nan, math.nan, 1)

        def of_a_core(cpu_s: float | None) -> float:  # CPU seconds in the round, in % of one core
            return math.nan if cpu_s is None else 100 * cpu_s / seconds
        return cls(
            ttft_p50_ms=percentile(measured.ttft_ms, 50), ttft_p99_ms=percentile(measured.ttft_ms, 99),
            completions_per_s=measured.completions / seconds, chunks_per_s=measured.content_chunks / seconds,
            completions=measured.completions, errors=measured.errors, duration_s=measured.duration_s,
            error_samples=tuple(measured.error_samples),
            server_cpu_percent=of_a_core(server_cpu_s), server_system_percent=of_a_core(server_system_s),
            live_round_trips_per_request=(live_round_trips / measured.completions
                                          if live_round_trips and measured.completions else math.nan),
            step_ms=tuple((step_ms or {}).items()),
            last_token_p50_ms=percentile(measured.last_token_ms, 50),
            after_last_token_p50_ms=percentile(measured.after_last_token_ms, 50),
            machine_busy_percent=100 * busy / (seconds * cores), machine_steal_percent=100 * stolen / (seconds * cores),
            redis_cpu_percent=of_a_core(redis_cpu_s), postgres_cpu_percent=of_a_core(postgres_cpu_s),
        )


class _MedianOfRounds:
    """A LevelStats figure: the median over its rounds of the RoundStats field of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        if name not in {f.name for f in fields(RoundStats)}:
            raise TypeError(f"{name} is not a field of RoundStats")
        self.name = name

    def __get__(self, level: LevelStats, owner: type | None = None) -> float:
        return _median([getattr(r, self.name) for r in level.rounds])


@dataclass(frozen=True)
class LevelStats:
    """One target at one upstream and concurrency: medians over its rounds."""

    upstream: str
    streams: int
    target: str
    rounds: tuple[RoundStats, ...]

    ttft_p50_ms = _MedianOfRounds()
    ttft_p99_ms = _MedianOfRounds()
    completions_per_s = _MedianOfRounds()
    chunks_per_s = _MedianOfRounds()
    server_cpu_percent = _MedianOfRounds()
    server_system_percent = _MedianOfRounds()
    live_round_trips_per_request = _MedianOfRounds()
    last_token_p50_ms = _MedianOfRounds()
    after_last_token_p50_ms = _MedianOfRounds()
    machine_busy_percent = _MedianOfRounds()
    machine_steal_percent = _MedianOfRounds()
    redis_cpu_percent = _MedianOfRounds()
    postgres_cpu_percent = _MedianOfRounds()

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.rounds)

    @property
    def step_ms(self) -> dict[str, float]:
        """Each step's mean milliseconds (from the step before), median over the rounds."""
        steps = list(dict.fromkeys(step for r in self.rounds for step, _ in r.step_ms))
        return {step: _median([dict(r.step_ms).get(step, math.nan) for r in self.rounds]) for step in steps}

    def as_dict(self) -> dict[str, object]:
        return {"upstream": self.upstream, "streams": self.streams, "target": self.target,
                **{name: _number(getattr(self, name)) for name in MEDIANS}, "errors": self.errors,
                "step_ms": {step: _number(ms) for step, ms in self.step_ms.items()},
                "rounds": [{**{name: _number(getattr(r, name)) for name in MEDIANS}, "completions": r.completions,
                            "errors": r.errors, "duration_s": round(r.duration_s, 3),
                            "error_samples": list(r.error_samples)} for r in self.rounds]}


# The figures a round measures that a level gives as their median over its rounds (NaNs left out):
# LevelStats's figures, in their order there.
MEDIANS = tuple(name for name, value in vars(LevelStats).items() if isinstance(value, _MedianOfRounds))


@dataclass(frozen=True)
class Ratio:
    """A target against a baseline (direct, or the reference hop) at one upstream and level."""

    upstream: str
    streams: int
    target: str
    completions_ratio: float  # target ÷ baseline completions per second
    ttft_added_p50_ms: float  # target p50 − baseline p50
    ttft_added_p99_ms: float  # target p99 − baseline p99
    gateway_errors: int
    direct_errors: int  # the baseline's errors
    baseline: str = DIRECT
    cpu_per_chunk_ratio: float = math.nan  # target's CPU per relayed chunk ÷ the baseline's (NaN for direct)

    def as_dict(self) -> dict[str, object]:
        return {"upstream": self.upstream, "streams": self.streams, "target": self.target, "baseline": self.baseline,
                "completions_ratio": _number(self.completions_ratio),
                "ttft_added_p50_ms": _number(self.ttft_added_p50_ms),
                "ttft_added_p99_ms": _number(self.ttft_added_p99_ms),
                "cpu_per_chunk_ratio": _number(self.cpu_per_chunk_ratio),
                "gateway_errors": self.gateway_errors, "direct_errors": self.direct_errors}


def cpu_per_chunk(level: LevelStats) -> float:
    """The target's CPU (percent of a core) per relayed content chunk per second; NaN if unmeasured."""
    return level.server_cpu_percent / level.chunks_per_s if level.chunks_per_s > 0 else math.nan


def ratio(direct: LevelStats, gateway: LevelStats) -> Ratio:
    """`gateway` against `direct` (the baseline: direct or the reference hop)."""
    completions = (gateway.completions_per_s / direct.completions_per_s
                   if direct.completions_per_s > 0 else math.nan)
    base_cpu = cpu_per_chunk(direct)
    return Ratio(upstream=gateway.upstream, streams=gateway.streams, target=gateway.target,
                 completions_ratio=completions,
                 ttft_added_p50_ms=gateway.ttft_p50_ms - direct.ttft_p50_ms,
                 ttft_added_p99_ms=gateway.ttft_p99_ms - direct.ttft_p99_ms,
                 gateway_errors=gateway.errors, direct_errors=direct.errors, baseline=direct.target,
                 cpu_per_chunk_ratio=cpu_per_chunk(gateway) / base_cpu if base_cpu > 0 else math.nan)


def ratios(levels: Sequence[LevelStats]) -> list[Ratio]:
    """Every target against direct at the same upstream and concurrency, then every gateway
    against the reference hop where it ran."""
    found = []
    for baseline in (DIRECT, REFERENCE):
        base = {(level.upstream, level.streams): level for level in levels if level.target == baseline}
        found += [ratio(base[(level.upstream, level.streams)], level) for level in levels
                  if level.target not in (DIRECT, baseline) and (level.upstream, level.streams) in base]
    return found


@dataclass(frozen=True)
class Goal:
    """One of the issue's targets: at an upstream and level, a bound on one measured number."""

    upstream: str
    streams: int
    what: str
    bound: str
    value: Callable[[Ratio], float]
    met: Callable[[Ratio], bool]
    unit: str = ""
    baseline: str = DIRECT
    issue: int = 13


GOALS = (
    Goal("replay", 1, "TTFT added p50", "≤ 1.5 ms", lambda r: r.ttft_added_p50_ms,
         lambda r: r.ttft_added_p50_ms <= 1.5, " ms"),
    Goal("replay", 1, "TTFT added p99", "≤ 5 ms", lambda r: r.ttft_added_p99_ms,
         lambda r: r.ttft_added_p99_ms <= 5.0, " ms"),
    Goal("replay", 32, "completions/s ratio", "≥ 0.97", lambda r: r.completions_ratio,
         lambda r: r.completions_ratio >= 0.97),
    Goal("replay", 128, "completions/s ratio, no errors", "≥ 0.90, 0 errors", lambda r: r.completions_ratio,
         lambda r: r.completions_ratio >= 0.90 and r.gateway_errors == 0),
    Goal("llama", 1, "completions/s ratio", "≥ 0.97", lambda r: r.completions_ratio,
         lambda r: r.completions_ratio >= 0.97),
    Goal("llama", 4, "completions/s ratio", "≥ 0.97", lambda r: r.completions_ratio,
         lambda r: r.completions_ratio >= 0.97),
    # Issue 24: against the reference hop, measured in the same rounds.
    Goal("replay", 1, "TTFT added over the reference hop p50", "≤ 0.5 ms", lambda r: r.ttft_added_p50_ms,
         lambda r: r.ttft_added_p50_ms <= 0.5, " ms", REFERENCE, 24),
    Goal("replay", 1, "TTFT added over the reference hop p99", "≤ 3 ms", lambda r: r.ttft_added_p99_ms,
         lambda r: r.ttft_added_p99_ms <= 3.0, " ms", REFERENCE, 24),
    Goal("replay", 32, "completions/s ratio to the reference hop", "≥ 0.97", lambda r: r.completions_ratio,
         lambda r: r.completions_ratio >= 0.97, "", REFERENCE, 24),
    Goal("replay", 32, "CPU per relayed chunk ÷ the reference hop's", "≤ 1.2", lambda r: r.cpu_per_chunk_ratio,
         lambda r: r.cpu_per_chunk_ratio <= 1.2, "", REFERENCE, 24),
    Goal("replay", 32, "TTFT added over direct p99, no errors", "≤ 20 ms, 0 errors", lambda r: r.ttft_added_p99_ms,
         lambda r: r.ttft_added_p99_ms <= 20.0 and r.gateway_errors == 0, " ms", DIRECT, 24),
)


@dataclass(frozen=True)
class GoalCheck:
    goal: Goal
    ratio: Ratio
    value: float
    met: bool

    def as_dict(self) -> dict[str, object]:
        return {"upstream": self.goal.upstream, "streams": self.goal.streams, "target": self.ratio.target,
                "what": self.goal.what, "bound": self.goal.bound, "value": _number(self.value), "met": self.met}


def check_goals(measured: Sequence[Ratio], goals: Sequence[Goal] = GOALS) -> list[GoalCheck]:
    """The goals that this run measured (a level it did not run is not judged); NaN is not met."""
    checks = []
    for goal in goals:
        for r in measured:
            if (r.upstream, r.streams, r.baseline) == (goal.upstream, goal.streams, goal.baseline) \
                    and r.target not in HOPS:  # the goals judge gateways, not the hops they are measured against
                value = goal.value(r)
                checks.append(GoalCheck(goal, r, value, not math.isnan(value) and goal.met(r)))
    return checks


@dataclass(frozen=True)
class RssGrowth:
    target: str
    pid: int
    requests: int
    after_warm_up_mb: float
    at_end_mb: float
    errors: int

    @property
    def growth_mb(self) -> float:
        return self.at_end_mb - self.after_warm_up_mb

    def as_dict(self) -> dict[str, object]:
        return {"target": self.target, "pid": self.pid, "requests": self.requests,
                "after_warm_up_mb": round(self.after_warm_up_mb, 2), "at_end_mb": round(self.at_end_mb, 2),
                "growth_mb": round(self.growth_mb, 2), "errors": self.errors}


RSS_GROWTH_LIMIT_MB = 20.0


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def _fmt(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else format(value, spec)


def _streams(count: int) -> str:
    return f"{count} stream" + ("" if count == 1 else "s")


def level_table(levels: Sequence[LevelStats], *, heading: str) -> list[str]:
    width = max([len(level.target) for level in levels] + [len("target")])
    lines = [heading, f"  {'target':<{width}}  {'TTFT p50 ms':>11}  {'TTFT p99 ms':>11}  {'completions/s':>13}  "
                      f"{'chunks/s':>9}  {'errors':>6}  {'server CPU %':>13}  {'Redis trips/req':>15}  "
                      f"{'machine busy / stolen %':>23}  {'Redis / PG CPU %':>16}"]
    for level in levels:
        cpu = "" if math.isnan(level.server_cpu_percent) else f"{level.server_cpu_percent:.0f}"
        trips = "" if math.isnan(level.live_round_trips_per_request) else f"{level.live_round_trips_per_request:.2f}"
        machine = ("" if math.isnan(level.machine_busy_percent)
                   else f"{level.machine_busy_percent:.0f} / {level.machine_steal_percent:.0f}")
        services = ("" if math.isnan(level.redis_cpu_percent)
                    else f"{level.redis_cpu_percent:.1f} / {level.postgres_cpu_percent:.1f}")
        lines.append(f"  {level.target:<{width}}  {_fmt(level.ttft_p50_ms, '.2f'):>11}  "
                     f"{_fmt(level.ttft_p99_ms, '.2f'):>11}  {_fmt(level.completions_per_s, '.2f'):>13}  "
                     f"{_fmt(level.chunks_per_s, '.1f'):>9}  {level.errors:>6}  {cpu:>13}  {trips:>15}  {machine:>23}  "
                     f"{services:>16}")
    return lines


def step_lines(levels: Sequence[LevelStats]) -> list[str]:
    """Per gateway, where a request's time before its first byte went: each step's mean ms from
    the step before it (or arrival), median over rounds."""
    lines = []
    for level in levels:
        steps = {step: ms for step, ms in level.step_ms.items() if not step.startswith("trip ")}
        trips: dict[str, dict[str, float]] = {}
        for key, ms in level.step_ms.items():
            if key.startswith("trip "):
                op, part = key[len("trip "):].rsplit(" ", 1)
                trips.setdefault(op, {})[part] = ms
        if steps:
            lines.append(f"  steps, {level.target} (mean ms from the step before): "
                         + ", ".join(f"{step} {_fmt(ms, '.2f')}" for step, ms in steps.items()))
        if trips:
            lines.append(f"  Redis round trips, {level.target} (mean ms each = waiting for the reply + for the event "
                         "loop + the rest): " + ", ".join(_trip(op, parts) for op, parts in trips.items()))
    return lines


def answer_lines(levels: Sequence[LevelStats]) -> list[str]:
    """Each target's whole answer, p50 per request, median over rounds: its last token, and the
    wait from there to the response's end, which a closed-loop stream waits for before its next
    request (so it counts in completions/s as much as the first token does)."""
    parts = [f"{level.target} {_fmt(level.last_token_p50_ms, '.1f')} + {_fmt(level.after_last_token_p50_ms, '.2f')}"
             for level in levels if not math.isnan(level.last_token_p50_ms)]
    lines = ["  whole answer p50 ms (to the last token + from it to the response's end): " + ", ".join(parts)
             ] if parts else []
    per_completion = [f"{level.target} {_fmt(10 * level.server_cpu_percent / level.completions_per_s, '.2f')} "
                      f"({_fmt(10 * level.server_system_percent / level.completions_per_s, '.2f')} in the kernel)"
                      for level in levels if not math.isnan(level.server_cpu_percent) and level.completions_per_s > 0]
    if per_completion:
        lines.append("  CPU per completion, ms (of it in the kernel): " + ", ".join(per_completion))
    return lines


def _trip(op: str, parts: dict[str, float]) -> str:
    whole = parts.get("all", math.nan)
    if "reply" not in parts or "resume" not in parts:
        return f"{op} {_fmt(whole, '.2f')}"
    rest = whole - parts["reply"] - parts["resume"]
    return f"{op} {_fmt(whole, '.2f')} = {parts['reply']:.2f} + {parts['resume']:.2f} + {rest:.2f}"


def ratio_lines(measured: Sequence[Ratio]) -> list[str]:
    lines = ["ratios (target ÷ baseline completions/s; TTFT added = target − baseline, ms; "
             "CPU per chunk = target's ÷ baseline's)"]
    for r in measured:
        cpu = "" if math.isnan(r.cpu_per_chunk_ratio) else f", CPU per chunk {r.cpu_per_chunk_ratio:.2f}x"
        lines.append(f"  ratio {r.upstream} {_streams(r.streams)}, {r.target}: "
                     f"completions/s {_fmt(r.completions_ratio, '.3f')} of {r.baseline}, "
                     f"TTFT added p50 {_fmt(r.ttft_added_p50_ms, '+.2f')} ms, p99 {_fmt(r.ttft_added_p99_ms, '+.2f')} ms"
                     f"{cpu}, errors {r.gateway_errors} ({r.baseline} {r.direct_errors})")
    return lines


def goal_lines(checks: Sequence[GoalCheck]) -> list[str]:
    lines = ["targets (issue 13 against direct, issue 24 against the reference hop; this machine, this run)"]
    if not checks:
        lines.append("  none of the targets' levels ran")
    for check in checks:
        goal = check.goal
        shown = _fmt(check.value, "+.2f" if goal.unit else ".3f") + goal.unit
        errors = f", errors {check.ratio.gateway_errors}" if "errors" in goal.what else ""
        lines.append(f"  {goal.upstream} {_streams(goal.streams)}, {check.ratio.target}: {goal.what} {shown}{errors} "
                     f"(target {goal.bound}, issue {goal.issue}): {'met' if check.met else 'not met'}")
    return lines


def rss_lines(growths: Sequence[RssGrowth]) -> list[str]:
    lines = [f"RSS of each gateway process (target: growth < {RSS_GROWTH_LIMIT_MB:g} MB over 10,000 requests)"]
    for g in growths:
        verdict = ("met" if g.growth_mb < RSS_GROWTH_LIMIT_MB else "not met") if g.requests >= 10_000 \
            else "not judged (fewer than 10,000 requests)"
        lines.append(f"  {g.target} pid {g.pid}: {g.after_warm_up_mb:.1f} MB after warm-up, {g.at_end_mb:.1f} MB "
                     f"after {g.requests} requests: {g.growth_mb:+.1f} MB, errors {g.errors}: {verdict}")
    return lines


@dataclass
class Report:
    """Everything one run measured, as printed and as written with --json."""

    machine: dict[str, object] = field(default_factory=dict)
    setup: dict[str, object] = field(default_factory=dict)
    levels: list[LevelStats] = field(default_factory=list)
    rss: list[RssGrowth] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def ratios(self) -> list[Ratio]:
        return ratios(self.levels)

    def as_dict(self) -> dict[str, object]:
        measured = self.ratios()
        return {"machine": self.machine, "setup": self.setup, "levels": [level.as_dict() for level in self.levels],
                "ratios": [r.as_dict() for r in measured],
                "targets": [check.as_dict() for check in check_goals(measured)],
                "rss": [g.as_dict() for g in self.rss], "notes": self.notes}
