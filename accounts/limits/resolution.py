"""Which limits apply to a request: pure resolution over class, student and key. No Django.

Levels, most specific first: the key, the student, the student's class, the site defaults
(settings). A field left empty at one level inherits from the next. Counters are kept per
student (all of their keys together) with the student's effective caps; a key that sets its own
caps is counted a second time, under its own caps, so a key can be made tighter than its owner
but never looser.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

NUMERIC = ("requests_per_minute", "tokens_per_day", "concurrency", "tokens_per_week", "tokens_per_term")


class LimitSource(Protocol):
    """A class, a student or a key: anything with the limit fields (None / "" = inherit)."""

    @property
    def requests_per_minute(self) -> int | None: ...
    @property
    def tokens_per_day(self) -> int | None: ...
    @property
    def concurrency(self) -> int | None: ...
    @property
    def tokens_per_week(self) -> int | None: ...
    @property
    def tokens_per_term(self) -> int | None: ...
    @property
    def allowed_models(self) -> str: ...
    @property
    def allowed_pools(self) -> str: ...


@dataclass(frozen=True)
class LimitLevel:
    """A level's fields as plain values (a LimitSource without a database row)."""

    requests_per_minute: int | None = None
    tokens_per_day: int | None = None
    concurrency: int | None = None
    tokens_per_week: int | None = None
    tokens_per_term: int | None = None
    allowed_models: str = ""
    allowed_pools: str = ""


UNSET = LimitLevel()


@dataclass(frozen=True)
class Caps:
    """One counting scope's caps; None = unlimited."""

    requests_per_minute: int | None = None
    tokens_per_day: int | None = None
    concurrency: int | None = None
    tokens_per_week: int | None = None  # per school week, Monday to Sunday
    tokens_per_term: int | None = None  # per term of the student's class (no term: not counted)

    def any(self) -> bool:
        return any(getattr(self, name) is not None for name in NUMERIC)


@dataclass(frozen=True)
class Policy:
    """Everything the gateway enforces for one key, resolved once and cached with the key."""

    student: Caps
    key: Caps | None = None
    allowed_models: frozenset[str] | None = None  # None: every model the pool serves
    allowed_pools: frozenset[str] | None = None
    access_expires_at: datetime | None = None
    term: tuple[date, date] | None = None  # the class's term, first and last day (school time)

    def allows_model(self, model_id: str) -> bool:
        return self.allowed_models is None or model_id in self.allowed_models

    def allows_pool(self, pool_name: str) -> bool:
        return self.allowed_pools is None or pool_name in self.allowed_pools


def names(text: str) -> frozenset[str] | None:
    """"a, b c" -> {"a", "b", "c"}; empty -> None (inherit)."""
    found = frozenset(part for part in text.replace(",", " ").split() if part)
    return found or None


def _first(*values: int | None) -> int | None:
    return next((value for value in values if value is not None), None)


def resolve(
    *,
    defaults: Caps,
    classroom: LimitSource | None,
    student: LimitSource,
    key: LimitSource,
    access_expires_at: datetime | None = None,
    term: tuple[date, date] | None = None,
) -> Policy:
    levels_for_student = [level for level in (student, classroom) if level is not None]
    student_caps = Caps(
        **{
            name: _first(*(getattr(level, name) for level in levels_for_student), getattr(defaults, name))
            for name in NUMERIC
        }
    )
    key_caps = Caps(**{name: getattr(key, name) for name in NUMERIC})
    ordered = [key, *levels_for_student]
    return Policy(
        student=student_caps,
        key=key_caps if key_caps.any() else None,
        allowed_models=next((found for level in ordered if (found := names(level.allowed_models))), None),
        allowed_pools=next((found for level in ordered if (found := names(level.allowed_pools))), None),
        access_expires_at=access_expires_at,
        term=term,
    )
