"""A request authenticates against the key cache without reading the "keys" generation first;
its admission reads the generation in the same round trip. A change made by another gateway
process (its database write, then the generation it bumps, here done by hand without this
process's own invalidation) still holds on this process's very next request, both ways: a
revoked key is refused, and a lifted pause is no longer refused on the cached state.

The model's only worker is down, so an admitted request ends with 503 no_worker_available: that
status is how these tests see "authenticated and admitted"."""
from __future__ import annotations

import json

import pytest
from tests.api_client import ApiClient

from accounts import key_cache
from accounts.models import ApiKey, Classroom
from accounts.services import key_issue
from core.live import live_state

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _a_model_no_worker_can_serve_now() -> None:
    from fleet.services import worker_register

    worker_register(name="w-down", base_url="http://127.0.0.1:9", model_id="m", pool_name="production", state="down")


def chat(raw: str) -> tuple[int, str]:
    response = ApiClient().post("/v1/chat/completions", json.dumps({"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": "hi"}]}), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    return response.status_code, response.json()["error"]["code"]


def changed_in_another_process() -> None:
    """What another gateway process's change looks like from here: the row changed, the live
    generation bumped, this process's cache untouched."""
    live_state().bump_generation(key_cache.GENERATION)


def test_a_key_revoked_in_another_process_is_refused_on_the_next_request(student) -> None:  # noqa: ANN001
    key, raw = key_issue(user=student)
    assert chat(raw) == (503, "no_worker_available")  # the first request reads the generation
    assert chat(raw) == (503, "no_worker_available")  # cached, checked with the admission
    seen = key_cache.seen_generation()
    assert seen is not None
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=key.created_at)
    changed_in_another_process()
    assert key_cache.seen_generation() == seen  # this process has not heard of it
    assert chat(raw) == (401, "invalid_api_key")
    assert key_cache.seen_generation() == seen + 1


def test_a_pause_lifted_in_another_process_is_not_refused_on_the_cached_state(student) -> None:  # noqa: ANN001
    room = Classroom.objects.create(name="exam", paused=True)
    student.classroom = room
    student.save(update_fields=["classroom"])
    _key, raw = key_issue(user=student)
    assert chat(raw) == (403, "class_paused")
    assert chat(raw) == (403, "class_paused")  # cached: the refusal reads the generation first
    Classroom.objects.filter(pk=room.pk).update(paused=False)
    changed_in_another_process()
    assert chat(raw) == (503, "no_worker_available")


def test_a_request_redone_on_a_fresh_identity_counts_once_in_its_minute(student, other_student) -> None:  # noqa: ANN001
    """A key limited to one request a minute, set up elsewhere after this process last read the
    generation: its first request is admitted on the stale stamp, undone, done again on the
    fresh identity — and counted once, so it is served; the second is refused."""
    from accounts.models import ApiKey

    _, other = key_issue(user=other_student)
    assert chat(other) == (503, "no_worker_available")  # this process has read the generation
    key, raw = key_issue(user=student)
    ApiKey.objects.filter(pk=key.pk).update(requests_per_minute=1)
    changed_in_another_process()
    assert chat(raw) == (503, "no_worker_available")
    assert chat(raw) == (429, "rate_limit_exceeded")
