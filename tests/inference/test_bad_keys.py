"""Unknown API keys cost no database query each, and an address that sends too many bad keys is
refused with 429 in the route's own envelope; valid keys are never slowed (issue 22)."""
from __future__ import annotations

import pytest
from tests.api_client import ApiClient

from accounts import key_cache
from core.keys import generate_key
from inference import auth
from inference.auth import BadKeyCounter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("request_log_written")]


@pytest.fixture(autouse=True)
def fresh(monkeypatch, settings) -> dict[str, int]:  # noqa: ANN001
    """A fresh bad-key counter, an allowance of 20, and counts of the key queries made."""
    monkeypatch.setattr(auth, "bad_keys", BadKeyCounter())
    settings.OCS = {**settings.OCS, "BAD_KEY_ALLOWANCE": 20, "TRUSTED_PROXIES": ("127.0.0.1",)}
    key_cache._cache.clear()
    monkeypatch.setattr(key_cache, "_prefixes", None)
    calls = {"key": 0, "prefixes": 0}
    load, load_prefixes = key_cache._load, key_cache._load_prefixes

    def counted_load(prefix: str):  # noqa: ANN202
        calls["key"] += 1
        return load(prefix)

    def counted_prefixes(generation: tuple[int, int], stale_before: float):  # noqa: ANN202
        calls["prefixes"] += 1
        return load_prefixes(generation, stale_before)

    monkeypatch.setattr(key_cache, "_load", counted_load)
    monkeypatch.setattr(key_cache, "_load_prefixes", counted_prefixes)
    return calls


def random_key() -> str:
    return generate_key().raw  # well-formed, in no row


def test_well_formed_unknown_keys_cost_no_query_each(fresh, student_key, settings) -> None:  # noqa: ANN001
    # A set of prefixes younger than the TTL is never reloaded; the TTL is lifted so that a slow
    # machine's 150 requests (which took longer than 3 × 5 s in one CI run) cannot age it.
    settings.OCS = {**settings.OCS, "KEY_CACHE_TTL_S": 3600.0}
    client = ApiClient()
    for n in range(150):
        answer = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {random_key()}",
                            HTTP_X_FORWARDED_FOR=f"198.51.100.{n % 100}")  # never over one address's allowance
        assert answer.status_code == 401
    assert fresh["key"] == 0  # no key row was looked up
    assert fresh["prefixes"] == 1  # the set of prefixes, loaded once
    _, raw = student_key
    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_a_key_issued_after_the_prefixes_were_loaded_works_at_once(student, settings) -> None:  # noqa: ANN001
    from accounts.services import key_issue

    settings.OCS = {**settings.OCS, "KEY_CACHE_TTL_S": 3600.0}  # only the issue's announcement can refresh it
    client = ApiClient()
    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {random_key()}").status_code == 401
    _, raw = key_issue(user=student, name="new")
    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_past_its_allowance_an_address_gets_429_in_the_routes_envelope_and_valid_keys_still_pass(
        student_key) -> None:  # noqa: ANN001
    attacker = ApiClient(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.66")
    for _ in range(20):
        assert attacker.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {random_key()}").status_code == 401
    refused = attacker.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {random_key()}")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert refused.json()["error"]["code"] == "too_many_bad_keys"
    assert "Retry after" in refused.json()["error"]["message"]
    anthropic = attacker.post("/v1/messages", data=b"{}", content_type="application/json",
                              HTTP_X_API_KEY=random_key())
    assert anthropic.status_code == 429 and anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "rate_limit_error"
    ollama = attacker.get(f"/ollama/{random_key()}/api/tags")
    assert ollama.status_code == 429 and ollama.json()["error"].startswith("too_many_bad_keys:")  # Ollama's envelope
    # The refusals are counted, not logged one row each (the flood would cost a row each).
    from inference import request_log
    from inference.models import RequestLog

    request_log.request_log().flush()
    assert not RequestLog.objects.filter(status=429).exists()
    assert RequestLog.objects.filter(status=401).count() == 20
    # The same address (a school's NAT) with a valid key is served as ever.
    _, raw = student_key
    assert attacker.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    # Another address is not touched.
    other = ApiClient(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert other.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {random_key()}").status_code == 401


def test_the_bad_key_window_ends_and_a_zero_allowance_never_refuses() -> None:
    now = [0.0]
    counter = BadKeyCounter(window_s=60.0, clock=lambda: now[0])
    for _ in range(5):
        counter.failed("203.0.113.1")
    assert counter.retry_after_s("203.0.113.1", allowance=6) is None
    assert counter.retry_after_s("203.0.113.1", allowance=5) == 60
    assert counter.retry_after_s("203.0.113.1", allowance=0) is None
    now[0] = 45.2
    assert counter.retry_after_s("203.0.113.1", allowance=5) == 15
    now[0] = 60.0
    assert counter.retry_after_s("203.0.113.1", allowance=5) is None
    counter.failed("203.0.113.1")  # a new window
    assert counter.retry_after_s("203.0.113.1", allowance=5) is None


def test_a_key_issued_by_another_process_without_redis_works_at_once(student, settings, monkeypatch) -> None:  # noqa: ANN001
    """`manage.py issue_key` beside an embedded gateway: the live state is each process's own, so
    only the stamp file in OCS_VAR_DIR tells the gateway."""
    from accounts.services import key_issue
    from core.live import live_state

    settings.OCS = {**settings.OCS, "KEY_CACHE_TTL_S": 3600.0}
    client = ApiClient()
    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {random_key()}").status_code == 401
    monkeypatch.setattr(type(live_state()), "bump_generation", lambda self, name: 0)  # another process's bump
    _, raw = key_issue(user=student, name="from-the-command-line")
    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
