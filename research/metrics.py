"""Serving metrics from client-side stream timings: pure maths, no Django, no I/O.

Definitions are vLLM `bench serve`'s and NVIDIA AIPerf's, which name two of them differently
(docs/research/results-cpu-smollm2.md says where other tools differ):

- TTFT: first streamed content chunk received minus request sent.
- TPOT: per request, (E2E - TTFT) / (output tokens - 1). AIPerf calls this ITL (inter-token
  latency); vLLM calls it TPOT. A request with fewer than two output tokens has no TPOT and is
  left out of the TPOT statistics (vLLM does the same); it still counts for TTFT, E2E,
  throughput and goodput (with no TPOT to miss, only its TTFT SLO applies).
- Inter-chunk latency: every gap between consecutive content chunks, pooled across all
  requests. AIPerf's "inter chunk latency"; vLLM calls the same pooled gaps ITL. A chunk may hold
  several tokens (speculative decoding, a batching server), so this is not a per-token time.
- E2E: request sent to last byte.
- Request throughput = completed requests / wall time; output throughput = output tokens / wall time.
- Goodput = completed requests that met every SLO set, per second of wall time.

Times are seconds in, milliseconds out where the name says `_ms`. Percentiles interpolate
linearly between closest ranks (numpy's default), so p50 of [1, 2, 3, 4] is 2.5.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RequestTiming:
    """One request as the client saw it.

    `sent_s`: when the request was sent (any monotonic clock, seconds).
    `chunk_times_s`: arrival time of each streamed chunk that carried content, same clock.
    `end_s`: when the last byte arrived.
    `output_tokens`: tokens generated (the server's usage when it reports it, else the chunk count).
    `ok`: the request completed without an error; failed requests count only as failures.
    """

    sent_s: float
    chunk_times_s: tuple[float, ...]
    end_s: float
    output_tokens: int
    prompt_tokens: int = 0
    ok: bool = True

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] - self.sent_s if self.chunk_times_s else None

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1); None for fewer than two output tokens."""
        ttft = self.ttft_s
        if ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - ttft) / (self.output_tokens - 1)

    @property
    def inter_chunk_gaps_s(self) -> list[float]:
        """Gaps between consecutive content chunks (one fewer than the chunks): the inter-chunk
        latency's samples (vLLM's ITL), not AIPerf's ITL (that is TPOT)."""
        chunks = self.chunk_times_s
        return [later - earlier for earlier, later in zip(chunks, chunks[1:])]


@dataclass(frozen=True)
class Slo:
    """Service-level objectives in milliseconds; None means not set (always met)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def is_set(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    def misses(self, timing: RequestTiming) -> list[str]:
        """The SLOs this request missed, e.g. ['ttft 2300 ms > 2000 ms']; [] when it met them all."""
        if not timing.ok:
            return ["failed"]
        missed: list[str] = []
        ttft = timing.ttft_s
        if self.ttft_ms is not None and (ttft is None or ttft * 1000 > self.ttft_ms):
            shown = "none" if ttft is None else f"{ttft * 1000:.0f} ms"
            missed.append(f"ttft {shown} > {self.ttft_ms:g} ms")
        tpot = timing.tpot_s
        if self.tpot_ms is not None and tpot is not None and tpot * 1000 > self.tpot_ms:
            missed.append(f"tpot {tpot * 1000:.1f} ms > {self.tpot_ms:g} ms")
        return missed


def parse_slo(text: str) -> Slo:
    """`ttft:2000,tpot:100` -> Slo(2000, 100). Raises ValueError with a plain message."""
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, number = part.partition(":")
        name = name.strip().lower()
        if not sep or name not in ("ttft", "tpot"):
            raise ValueError(f"goodput SLO {part!r}: expected ttft:MS or tpot:MS")
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"goodput SLO {part!r}: {number!r} is not a number of milliseconds") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"goodput SLO {part!r}: milliseconds must be positive")
        values[name] = value
    if not values:
        raise ValueError("goodput SLO is empty: expected e.g. ttft:2000,tpot:100")
    return Slo(ttft_ms=values.get("ttft"), tpot_ms=values.get("tpot"))


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default). `values` must not be empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Distribution:
    """p50, p90, p99 and mean of a set of values (milliseconds here); all None with no values."""

    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Distribution":
        if not values:
            return cls(None, None, None, None, 0)
        return cls(
            p50=percentile(values, 50),
            p90=percentile(values, 90),
            p99=percentile(values, 99),
            mean=sum(values) / len(values),
            count=len(values),
        )

    def as_dict(self) -> dict[str, float | None]:
        return {"p50": self.p50, "p90": self.p90, "p99": self.p99, "mean": self.mean}


@dataclass(frozen=True)
class Summary:
    """Everything one load level reports. Throughputs are per second of `duration_s`."""

    completed: int
    failed: int
    duration_s: float
    ttft_ms: Distribution
    tpot_ms: Distribution
    inter_chunk_latency_ms: Distribution
    e2e_ms: Distribution
    request_throughput: float
    output_throughput: float
    total_output_tokens: int
    total_prompt_tokens: int
    goodput: float | None
    good_requests: int | None
    slo: Slo = field(default_factory=Slo)


def summarize(timings: Sequence[RequestTiming], *, duration_s: float, slo: Slo | None = None) -> Summary:
    """Pools a level's requests into its summary. `duration_s`: wall time of the level (first
    request sent to last response ended), > 0. Warm-up requests must already be left out."""
    if duration_s <= 0:
        raise ValueError("duration_s must be positive")
    done = [t for t in timings if t.ok]
    ttfts = [t.ttft_s * 1000 for t in done if t.ttft_s is not None]
    tpots = [tpot * 1000 for t in done if (tpot := t.tpot_s) is not None]
    gaps = [gap * 1000 for t in done for gap in t.inter_chunk_gaps_s]
    e2es = [t.e2e_s * 1000 for t in done]
    output_tokens = sum(t.output_tokens for t in done)
    good: int | None = None
    goodput: float | None = None
    if slo is not None and slo.is_set():
        good = sum(1 for t in done if not slo.misses(t))
        goodput = good / duration_s
    return Summary(
        completed=len(done),
        failed=len(timings) - len(done),
        duration_s=duration_s,
        ttft_ms=Distribution.of(ttfts),
        tpot_ms=Distribution.of(tpots),
        inter_chunk_latency_ms=Distribution.of(gaps),
        e2e_ms=Distribution.of(e2es),
        request_throughput=len(done) / duration_s,
        output_throughput=output_tokens / duration_s,
        total_output_tokens=output_tokens,
        total_prompt_tokens=sum(t.prompt_tokens for t in done),
        goodput=goodput,
        good_requests=good,
        slo=slo or Slo(),
    )


def mean_or_none(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
