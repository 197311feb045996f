"""Does a TTFT a student measured fit the one request they quote? Pure: no Django.

The student streams one request, reads the id the gateway returned in `x-request-id` and times
it on their own machine (request sent -> first content chunk, the definition docs/performance.md uses). The
request log's `ttft_ms` is the gateway's view of the same request (arrival -> first byte from
the worker), which the student's clock contains: theirs adds the connection, the network both
ways and the time to the first *content* chunk. So a reported value is accepted only if it is
**not below the logged one** and **at most `tolerance_above_ms(logged)` above it**: 400 ms or
half the logged value, whichever is larger (a TLS handshake plus a round trip over school Wi-Fi
fits in 400 ms; a made-up number rarely lands in that window). The logged value is rounded to
whole milliseconds, so half a millisecond under it still counts as equal.
"""
from __future__ import annotations

TOLERANCE_ABOVE_MS = 400
TOLERANCE_ABOVE_RATIO = 0.5
ROUNDING_MS = 0.5
MAX_REPORTED_MS = 600_000
TOLERANCE_RULE = (f"not below the gateway's TTFT for that request, and at most {TOLERANCE_ABOVE_MS} ms or "
                  f"{TOLERANCE_ABOVE_RATIO:.0%} above it, whichever is larger")


def tolerance_above_ms(logged_ms: int) -> float:
    return max(TOLERANCE_ABOVE_MS, TOLERANCE_ABOVE_RATIO * logged_ms)


def ttft_fits(reported_ms: float, logged_ms: int) -> bool:
    """True when `reported_ms` can be the client-side TTFT of a request the gateway logged at `logged_ms`."""
    return logged_ms - ROUNDING_MS <= reported_ms <= logged_ms + tolerance_above_ms(logged_ms)


def looks_like_request_id(text: str) -> bool:
    """The gateway's ids are 32 lowercase hex digits (inference/request_log.py)."""
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)
