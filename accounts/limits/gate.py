"""The limits a teacher set, applied to one request before it is dispatched.

`admit()` runs the atomic check-and-charge of accounts/limits/quota.py for the student (and the key,
if it has caps of its own) and either raises a 429 in the client's envelope, with
`retry-after` and `x-ratelimit-*` headers, or returns a Ticket. The ticket holds the request's
concurrency leases and its token reservation; `Ticket.settlement()` says how to free the one and
settle the other with the tokens really served, which the request's end sends with the rest of
its end in one round trip (`LiveState.finish`, inference/pipeline.py).

The reservation is the request's worst case: its body size in bytes (a token is at least one
byte of text, so this bounds the prompt, chat template included in practice) plus its output
cap, and never more than the model's context (prompt + answer must fit in it).
"""
from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, field, replace
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from accounts.key_cache import GENERATION, KeyIdentity, StaleIdentity
from accounts.limits.resolution import Caps
from core import errors
from core.lease import Lease
from accounts.limits.live_quota import TokenSettlement, quota_live
from accounts.limits.quota import QuotaAsk, QuotaScope, QuotaVerdict, concurrency_resource
from core.live import LiveStateUnavailable, Settlement
from core.school_day import school_time, this_term, this_week, today

log = logging.getLogger("ocs.quota")


def reservation(*, body_bytes: int, max_tokens: int, context_length: int) -> int:
    return max(1, min(body_bytes + max_tokens, context_length))


def _scope(name: str, caps: Caps) -> QuotaScope:
    return QuotaScope(name, caps.requests_per_minute, caps.tokens_per_day, caps.concurrency,
                      tokens_per_week=caps.tokens_per_week, tokens_per_term=caps.tokens_per_term)


@dataclass(frozen=True)
class Periods:
    """The school's day, week and (if the student's class has one) term: counter names and
    seconds until each ends."""

    day: str
    day_left_s: float
    week: str
    week_left_s: float
    term: str = ""
    term_left_s: float = 0.0


def periods_now(identity: KeyIdentity) -> Periods:
    day, day_left_s = today()
    week, week_left_s = this_week()
    term = this_term(identity.policy.term)
    return Periods(day, day_left_s, week, week_left_s, *(term or ("", 0.0)))


def scopes_for(identity: KeyIdentity) -> list[QuotaScope]:
    scopes = [_scope(f"user:{identity.user_id}", identity.policy.student)]  # accounts/limits/budgets.py student_scope
    if identity.policy.key is not None:
        scopes.append(_scope(f"key:{identity.key_id}", identity.policy.key))
    return scopes


def rate_headers(scope: QuotaScope, verdict: QuotaVerdict, *, day_left_s: float) -> dict[str, str]:
    """OpenAI's x-ratelimit-* names, for the scope the verdict is about."""
    headers: dict[str, str] = {}
    if scope.requests_per_minute is not None:
        headers["x-ratelimit-limit-requests"] = str(scope.requests_per_minute)
        headers["x-ratelimit-remaining-requests"] = str(max(0, scope.requests_per_minute - verdict.requests_used))
        headers["x-ratelimit-reset-requests"] = f"{math.ceil(max(verdict.window_reset_ms, 0) / 1000)}s"
    if scope.tokens_per_day is not None:
        headers["x-ratelimit-limit-tokens"] = str(scope.tokens_per_day)
        headers["x-ratelimit-remaining-tokens"] = str(max(0, scope.tokens_per_day - verdict.tokens_used))
        headers["x-ratelimit-reset-tokens"] = f"{math.ceil(day_left_s)}s"
    return headers


def budget_refusal(scope: QuotaScope, verdict: QuotaVerdict, *, reserve: int, left_s: float,
                   headers: dict[str, str]) -> errors.ApiError:
    """A week's or a term's budget is spent: 429 budget_exhausted, saying when it resets."""
    whose = "your key's" if scope.name.startswith("key:") else "your"
    weekly = verdict.refused_by == "tokens_per_week"
    budget = (scope.tokens_per_week if weekly else scope.tokens_per_term) or 0
    left = max(0, budget - verdict.tokens_used)
    period = "week" if weekly else "term"
    resets = school_time(timezone.now() + timedelta(seconds=left_s))
    when = (f"It resets on {resets} (weeks start on Monday)." if weekly
            else f"The term ends on {resets}; a new term starts a new budget.")
    hint = ("A shorter conversation or a lower max_tokens may still fit what is left; or ask your teacher for more."
            if 0 < left < reserve else "Ask your teacher if you need more.")
    message = (f"Token budget for this {period} used up: {left} of {whose} {budget} tokens for this {period} are "
               f"left and this request may use up to {reserve}. {when} {hint}")
    return errors.ApiError(429, message, type="tokens", code="budget_exhausted",
                           headers={"retry-after": str(math.ceil(left_s)), **headers},
                           reason=str(verdict.refused_by))


def refusal(scope: QuotaScope, verdict: QuotaVerdict, *, reserve: int, day_left_s: float,
            week_left_s: float = 0.0, term_left_s: float = 0.0) -> errors.ApiError:
    whose = "your key's" if scope.name.startswith("key:") else "your"
    headers = rate_headers(scope, verdict, day_left_s=day_left_s) if verdict.refused_by in (
        "requests_per_minute", "concurrency", "tokens_per_day") else {}
    if verdict.refused_by in ("tokens_per_week", "tokens_per_term"):
        left_s = week_left_s if verdict.refused_by == "tokens_per_week" else term_left_s
        return budget_refusal(scope, verdict, reserve=reserve, left_s=left_s, headers=headers)
    if verdict.refused_by == "requests_per_minute":
        wait = max(1, math.ceil(verdict.window_reset_ms / 1000)) if verdict.window_reset_ms > 0 else 60
        message = (f"Rate limit reached: {verdict.requests_used} requests in the last minute, {whose} limit is "
                   f"{scope.requests_per_minute}. Retry after {wait} s.")
        return errors.ApiError(429, message, type="requests", code="rate_limit_exceeded",
                               headers={"retry-after": str(wait), **headers}, reason="requests_per_minute")
    if verdict.refused_by == "concurrency":
        message = (f"Too many requests at once: {whose} limit is {scope.concurrency} running or waiting. "
                   "Wait for one to finish.")
        return errors.ApiError(429, message, type="requests", code="rate_limit_exceeded",
                               headers={"retry-after": "1", **headers}, reason="concurrency")
    budget = scope.tokens_per_day or 0
    left = max(0, budget - verdict.tokens_used)
    hint = ("Lower max_tokens or shorten the conversation." if reserve > budget
            else f"The budget resets in {math.ceil(day_left_s / 3600)} h; ask your teacher if you need more.")
    message = (f"Daily token budget reached: this request may use up to {reserve} tokens and {left} of {whose} "
               f"{budget} tokens for today are left. {hint}")
    return errors.ApiError(429, message, type="tokens", code="tokens_per_day_exceeded",
                           headers={"retry-after": str(math.ceil(day_left_s)), **headers}, reason="tokens_per_day")


@dataclass
class Ticket:
    """An admitted request's share of its student's limits, held until it is answered."""

    scopes: list[str]
    day: str
    reserved: int
    leases: list[Lease]
    periods: tuple[str, ...] = ()  # the week's and the term's counters, settled with the day's
    headers: dict[str, str] = field(default_factory=dict)
    _finished: bool = False

    def settlement(self, served_tokens: int | None) -> Settlement:
        """Its part of the request's end (LiveState.finish, one round trip with the slot and the
        fair share): the concurrency leases to free, and the reservation settled to
        `served_tokens` (None: unknown, e.g. a stream cut before the worker reported its counts:
        the reservation stands). Empty once taken."""
        if self._finished:
            return Settlement()
        self._finished = True
        leases = tuple(held for held in (lease.detach() for lease in self.leases) if held is not None)
        delta = served_tokens - self.reserved if served_tokens is not None else 0
        tokens = TokenSettlement(scopes=tuple(self.scopes), periods=(self.day, *self.periods), delta=delta)
        return Settlement(leases=leases, parts=(tokens,))

BUDGET_CODES = frozenset({"budget_exhausted", "tokens_per_day_exceeded"})


def check_access(identity: KeyIdentity, model_id: str) -> None:
    """Models and pools a teacher allowed: refused like a model or pool the key cannot see."""
    if not identity.policy.allows_pool(identity.pool_name):
        raise errors.ApiError(403, f"Your key's pool `{identity.pool_name}` is not allowed for your account; "
                                   "ask your teacher for a key in another pool.", type="permission_error",
                              code="pool_not_allowed")
    if not identity.policy.allows_model(model_id):
        raise errors.model_not_found(model_id)


async def charge_refusal(identity: KeyIdentity) -> None:
    """A request refused before admission (a malformed body, an unknown model) still counts
    toward requests per minute, so a loop of them is limited like any other: over the limit,
    the 429 replaces the refusal. Nothing is reserved and nothing stays held."""
    scopes = scopes_for(identity)
    day, day_left_s = today()
    request_id = uuid.uuid4().hex
    live = quota_live()
    verdict = await live.admit(scopes, QuotaAsk(request_id, 0, day, settings.OCS["SLOT_LEASE_S"]))
    if verdict.admitted:
        for scope in scopes:
            await live.release(concurrency_resource(scope.name), request_id)
    elif verdict.refused_by == "requests_per_minute":
        raise refusal(scopes[verdict.scope_index], verdict, reserve=0, day_left_s=day_left_s)


async def admit(identity: KeyIdentity, *, reserve: int, budgets: bool = True,
                generation: int | None = None) -> Ticket:
    """Check and charge the request's limits. `budgets=False` (the budget fallback): token
    budgets are not checked, though the tokens are still counted; the other caps hold.
    `generation`: the "keys" generation `identity` was checked against; it is read again in the
    same round trip as the admission, and if it moved, the admission is undone (its leases freed,
    its reservation refunded, its entry in the minute's window taken out) and StaleIdentity
    raised before any verdict, so no request is served or refused on a changed key's old limits."""
    scopes = scopes_for(identity)
    if not budgets:
        scopes = [replace(s, tokens_per_day=None, tokens_per_week=None, tokens_per_term=None) for s in scopes]
    now = periods_now(identity)
    request_id = uuid.uuid4().hex
    lease_s = settings.OCS["SLOT_LEASE_S"]
    ask = QuotaAsk(request_id, reserve, now.day, lease_s, week=now.week, term=now.term)
    live = quota_live()
    if generation is None:
        verdict = await live.admit(scopes, ask)
    else:
        verdict, current = await live.admit_seen(scopes, ask, GENERATION)
        if current != generation:
            if verdict.admitted:
                await live.finish(Settlement(
                    leases=tuple((concurrency_resource(s.name), request_id) for s in scopes),
                    parts=(TokenSettlement(scopes=tuple(s.name for s in scopes), periods=ask.periods(), delta=-reserve,
                                           window_entries=tuple((s.name, request_id) for s in scopes)),)))
            raise StaleIdentity(current)
    scope = scopes[verdict.scope_index]
    if not verdict.admitted:
        raise refusal(scope, verdict, reserve=reserve, day_left_s=now.day_left_s, week_left_s=now.week_left_s,
                      term_left_s=now.term_left_s)
    leases = [Lease(concurrency_resource(s.name), request_id).keep() for s in scopes]
    return Ticket([s.name for s in scopes], now.day, reserve, leases, periods=ask.periods()[1:],
                  headers=rate_headers(scope, verdict, day_left_s=now.day_left_s))
