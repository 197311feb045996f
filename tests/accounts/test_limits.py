"""Which caps apply: key -> student -> class -> site defaults (pure, no database)."""
from __future__ import annotations

from accounts.limits.resolution import Caps, resolve
from accounts.limits.resolution import LimitLevel as Level

DEFAULTS = Caps(requests_per_minute=60, tokens_per_day=100_000, concurrency=8)


def test_each_field_comes_from_the_most_specific_level_that_sets_it() -> None:
    policy = resolve(defaults=DEFAULTS, classroom=Level(requests_per_minute=20, tokens_per_day=50_000),
                     student=Level(tokens_per_day=0), key=Level())
    assert policy.student == Caps(requests_per_minute=20, tokens_per_day=0, concurrency=8)
    assert policy.key is None  # the key sets nothing of its own: counted only as its student


def test_a_student_without_a_class_gets_the_site_defaults() -> None:
    policy = resolve(defaults=DEFAULTS, classroom=None, student=Level(), key=Level())
    assert policy.student == DEFAULTS and policy.allowed_models is None and policy.allows_model("anything")


def test_a_key_with_caps_of_its_own_is_a_second_scope_not_a_replacement() -> None:
    policy = resolve(defaults=DEFAULTS, classroom=None, student=Level(requests_per_minute=10),
                     key=Level(requests_per_minute=100))
    assert policy.student.requests_per_minute == 10  # the student's cap still counts every key
    assert policy.key == Caps(requests_per_minute=100)


def test_allowed_models_and_pools_inherit_as_a_whole_list() -> None:
    policy = resolve(defaults=DEFAULTS, classroom=Level(allowed_models="a, b", allowed_pools="production"),
                     student=Level(), key=Level(allowed_models="b"))
    assert policy.allowed_models == frozenset({"b"})
    assert not policy.allows_model("a") and policy.allows_model("b")
    assert policy.allows_pool("production") and not policy.allows_pool("dev")
