"""Numbers shown to people, rounded to what matters (the raw values stay in the database). Pure."""
from __future__ import annotations


def tokens_text(value: int | float | None) -> str:
    """1234 -> "1,234"; 2_500_000 -> "2.5M"; 25_000_000 -> "25M"; None -> "—"."""
    if value is None:
        return "—"
    number = float(value)
    if abs(number) >= 10_000_000:
        return f"{number / 1_000_000:.0f}M"
    if abs(number) >= 1_000_000:
        return f"{number / 1_000_000:.1f}M"
    return f"{round(number):,}"


def rate_text(value: float | None) -> str:
    """Tokens per second: 89.68380054322759 -> "89.7"; 1234.5 -> "1,234" (one decimal below 100,
    none above: the rest is measurement noise)."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def ms_text(value: int | float | None) -> str:
    """Milliseconds: 850 -> "850 ms"; 1234 -> "1.2 s"; 75000 -> "75 s"."""
    if value is None:
        return "—"
    if value < 1000:
        return f"{value:.0f} ms"
    seconds = value / 1000
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def percent_of(part: int | float | None, whole: int | float | None) -> int:
    """part of whole as a whole percentage clamped to 0..100 (for bars); 0 when whole is empty."""
    if not part or not whole:
        return 0
    return max(0, min(100, round(100 * float(part) / float(whole))))


def share_text(percent: float | None) -> str:
    """A share in words that never reads as nothing when it is something: 0.47 -> "0.5 %",
    0.02 -> "under 0.1 %", 63.4 -> "63 %"."""
    if percent is None:
        return "—"
    if percent == 0:
        return "0 %"
    if percent < 0.1:
        return "under 0.1 %"
    if percent < 10:
        return f"{percent:.1f} %".replace(".0 %", " %")
    return f"{percent:.0f} %"
