"""Per-day usage figures from request rows. Pure: no Django.

A row is (local day, prompt tokens, completion tokens, time to first token in ms or None,
generation speed in tokens/s or None, HTTP status). Medians are over the requests that report
the value (a refused request has no first token)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from statistics import median


@dataclass
class DayStats:
    day: date
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_values_ms: list[int] = field(default_factory=list, repr=False)
    rate_values: list[float] = field(default_factory=list, repr=False)

    @property
    def median_ttft_ms(self) -> float | None:
        return median(self.ttft_values_ms) if self.ttft_values_ms else None

    @property
    def median_tokens_per_s(self) -> float | None:
        return median(self.rate_values) if self.rate_values else None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


Row = tuple[date, int, int, "int | None", "float | None", int]


def daily_stats(rows: Iterable[Row]) -> list[DayStats]:
    """One DayStats per day that has requests, oldest first."""
    days: dict[date, DayStats] = {}
    for day, prompt, completion, ttft_ms, tokens_per_s, status in rows:
        stats = days.setdefault(day, DayStats(day=day))
        stats.requests += 1
        stats.errors += status >= 400
        stats.prompt_tokens += prompt
        stats.completion_tokens += completion
        if ttft_ms is not None:
            stats.ttft_values_ms.append(ttft_ms)
        if tokens_per_s is not None and tokens_per_s > 0:
            stats.rate_values.append(tokens_per_s)
    return [days[day] for day in sorted(days)]


def bar_heights(values: list[float], *, height: int) -> list[int]:
    """Bar heights in pixels, the largest value filling `height`; zeros (and an all-zero list) give 0."""
    top = max(values, default=0)
    if top <= 0:
        return [0 for _ in values]
    return [round(height * value / top) for value in values]


@dataclass(frozen=True)
class Bar:
    day: date
    tokens: int
    requests: int
    height: int  # pixels


@dataclass(frozen=True)
class DayChart:
    """Tokens per day as bars with a scale: the top of the axis is the busiest day's tokens."""

    bars: list[Bar]
    top: int

    def __bool__(self) -> bool:
        return any(bar.tokens for bar in self.bars)


def day_chart(days: list[tuple[date, int, int]], *, height: int = 100) -> DayChart:
    """(day, tokens, requests) per day, oldest first -> bars with heights and the axis's top."""
    heights = bar_heights([float(tokens) for _, tokens, _ in days], height=height)
    return DayChart([Bar(day, tokens, requests, h) for (day, tokens, requests), h in zip(days, heights)],
                    max((tokens for _, tokens, _ in days), default=0))
