"""Refusals carry what a client needs to back off: retry-after and x-ratelimit-* (pure)."""
from __future__ import annotations

from datetime import datetime, timezone

from accounts.limits.gate import refusal, reservation
from accounts.limits.quota import QuotaScope, QuotaVerdict
from core.school_day import today

SCOPE = QuotaScope("user:1", requests_per_minute=10, tokens_per_day=5000, concurrency=2)


def test_reservation_bounds_prompt_plus_answer_by_the_context() -> None:
    assert reservation(body_bytes=300, max_tokens=100, context_length=4096) == 400
    assert reservation(body_bytes=9000, max_tokens=100, context_length=4096) == 4096


def test_a_rate_refusal_says_when_the_window_frees_a_place() -> None:
    verdict = QuotaVerdict(False, 0, "requests_per_minute", requests_used=10, tokens_used=1200, window_reset_ms=12_300)
    error = refusal(SCOPE, verdict, reserve=50, day_left_s=3600.2)
    assert (error.status, error.code, error.headers["retry-after"]) == (429, "rate_limit_exceeded", "13")
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert error.headers["x-ratelimit-reset-requests"] == "13s"
    assert error.headers["x-ratelimit-remaining-tokens"] == "3800"
    assert error.headers["x-ratelimit-reset-tokens"] == "3601s"


def test_a_budget_refusal_waits_for_the_day_and_says_when_a_request_can_never_fit() -> None:
    spent = QuotaVerdict(False, 0, "tokens_per_day", requests_used=3, tokens_used=4990, window_reset_ms=5000)
    error = refusal(SCOPE, spent, reserve=50, day_left_s=7200)
    assert (error.code, error.headers["retry-after"]) == ("tokens_per_day_exceeded", "7200")
    assert "10 of your 5000" in error.message and "resets in 2 h" in error.message
    too_big = refusal(SCOPE, QuotaVerdict(False, 0, "tokens_per_day", 0, 0, 0), reserve=6000, day_left_s=7200)
    assert "Lower max_tokens" in too_big.message


def test_a_keys_own_cap_is_named_as_the_keys() -> None:
    key_scope = QuotaScope("key:9", None, None, 1)
    error = refusal(key_scope, QuotaVerdict(False, 1, "concurrency", 0, 0, 0), reserve=1, day_left_s=10)
    assert "your key's limit is 1" in error.message and error.headers == {"retry-after": "1"}


def test_the_day_is_the_schools_and_ends_at_its_midnight(settings) -> None:  # noqa: ANN001
    settings.TIME_ZONE = "Europe/Berlin"
    day, left = today(datetime(2026, 11, 29, 22, 30, tzinfo=timezone.utc))  # 23:30 in Berlin
    assert (day, left) == ("2026-11-29", 1800.0)
