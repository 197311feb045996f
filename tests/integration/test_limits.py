"""Limits and the request log against the real gateway and worker, on whichever back end the
suite runs (embedded default, or PostgreSQL + Redis)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import pytest

from tests.conftest import MODEL_ID, wait_for

pytestmark = pytest.mark.integration

HELLO = [{"role": "user", "content": "Say hello."}]


def limited_key(username: str, **limits: object) -> str:
    """A fresh student with these limits and one key. Set before the key's first use, so every
    gateway process loads them with the key."""
    from accounts.services import key_issue, limits_set, user_ensure

    user, _ = user_ensure(username=username, role="student")
    limits_set(target=user, **limits)
    return key_issue(user=user)[1]


def chat(url: str, key: str, *, max_tokens: int = 4, user_agent: str = "limits-test") -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}", "User-Agent": user_agent},
                      json={"model": MODEL_ID, "messages": HELLO, "max_tokens": max_tokens})


def logged_rows(**filters: object) -> list:  # noqa: ANN401
    from inference.models import RequestLog

    return list(RequestLog.objects.filter(**filters).order_by("at"))


def test_n_parallel_requests_against_a_limit_of_k_admit_exactly_k(gateway, worker) -> None:  # noqa: ANN001
    key = limited_key("rpm-student", requests_per_minute=3)
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda _: chat(gateway.url, key), range(8)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 3 + [429] * 5
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "3" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-limit-requests"] == "3"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    served = [r for r in responses if r.status_code == 200]
    assert sorted(r.headers["x-ratelimit-remaining-requests"] for r in served) == ["0", "1", "2"]
    metrics = httpx.get(gateway.url + "/metrics").text
    counted = [line for line in metrics.splitlines()
               if line.startswith('ocs_rate_limit_refusals_total{reason="requests_per_minute"}')]
    assert counted and float(counted[0].split()[-1]) >= 5


def test_a_refusal_on_the_anthropic_route_is_an_anthropic_rate_limit_error(gateway, worker) -> None:  # noqa: ANN001
    key = limited_key("rpm-claude", requests_per_minute=1)
    client = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0, timeout=60)
    client.messages.create(model=MODEL_ID, max_tokens=4, messages=HELLO)
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model=MODEL_ID, max_tokens=4, messages=HELLO)
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert caught.value.response.headers["x-ratelimit-limit-requests"] == "1"


def test_a_token_budget_is_never_exceeded_under_concurrency(gateway, worker) -> None:  # noqa: ANN001
    budget = 700
    key = limited_key("budget-student", tokens_per_day=budget)
    served = admitted = 0
    refusals: list[httpx.Response] = []
    for _ in range(10):  # waves of parallel requests until the budget refuses them all
        with ThreadPoolExecutor(max_workers=6) as pool:
            wave = list(pool.map(lambda _: chat(gateway.url, key, max_tokens=16), range(6)))
        served += sum(r.json()["usage"]["total_tokens"] for r in wave if r.status_code == 200)
        admitted += sum(r.status_code == 200 for r in wave)
        refusals += [r for r in wave if r.status_code == 429]
        if all(r.status_code == 429 for r in wave):
            break
    assert 0 < served <= budget
    assert refusals and refusals[-1].json()["error"]["code"] == "tokens_per_day_exceeded"
    assert refusals[-1].headers["x-ratelimit-limit-tokens"] == str(budget)
    # Each request reserved its worst case (body bytes + max_tokens) and got the unused part back:
    # more requests were served than worst cases fit in the budget.
    worst_case = len(refusals[0].request.content) + 16
    assert admitted > budget // worst_case


def test_concurrency_cap_refuses_the_request_beyond_it_at_once(gateway, worker) -> None:  # noqa: ANN001
    key = limited_key("conc-student", concurrency=1)
    # A long answer, so the first request still runs when the second arrives ("Say hello." can
    # end after a dozen tokens, before a loaded machine has sent the second).
    body = {"model": MODEL_ID, "max_tokens": 300, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60) as first:
        assert first.status_code == 200
        second = chat(gateway.url, key)
        assert second.status_code == 429 and second.headers["retry-after"] == "1"
        assert "at once" in second.json()["error"]["message"]
        first.read()
    assert chat(gateway.url, key).status_code == 200  # the stream's end freed its place


def test_disallowed_models_are_hidden_and_refused(gateway, worker) -> None:  # noqa: ANN001
    key = limited_key("models-student", allowed_models="some-other-model")
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(gateway.url + "/v1/models", headers=headers).json()["data"] == []
    refused = chat(gateway.url, key)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"


def test_every_request_is_logged_with_its_outcome_tokens_and_timings(gateway, worker) -> None:  # noqa: ANN001
    from accounts.models import User

    key = limited_key("logged-student", requests_per_minute=2)
    headers = {"Authorization": f"Bearer {key}", "User-Agent": "log-test/1.0"}
    body = {"model": MODEL_ID, "messages": HELLO, "max_tokens": 8, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60) as r:
        r.read()
    assert chat(gateway.url, key, user_agent="log-test/1.0").status_code == 200
    assert chat(gateway.url, key, user_agent="log-test/1.0").status_code == 429
    httpx.post(gateway.url + "/v1/chat/completions", headers={"User-Agent": "log-test/1.0"}, json={})
    user = User.objects.get(username="logged-student")
    rows = wait_for(lambda: len(logged_rows(user_agent="log-test/1.0")) == 4 and logged_rows(user_agent="log-test/1.0"),
                    timeout_s=10)
    assert rows, "the four requests were not all logged"
    stream, plain, limited, anonymous = rows
    for row in (stream, plain):
        assert (row.user_id, row.model, row.worker_name, row.client, row.status) == (
            user.id, MODEL_ID, "it-worker", "openai", 200)
        assert row.prompt_tokens > 0 and 0 < row.completion_tokens <= 8
        assert row.ttft_ms is not None and row.total_ms >= row.ttft_ms
        assert row.tokens_per_s and row.tokens_per_s > 0 and row.prompt_tokens_per_s
        assert row.key_id is not None and row.retries == 0
    assert stream.stream and not plain.stream
    assert (limited.status, limited.error_code, limited.worker_id) == (429, "rate_limit_exceeded", None)
    assert (anonymous.status, anonymous.error_code, anonymous.user_id) == (401, "invalid_api_key", None)


def test_refused_requests_count_toward_requests_per_minute_and_unknown_names_are_never_recorded(gateway, worker) -> None:  # noqa: ANN001
    """A loop of random model names or broken bodies is limited like any other traffic, and the
    names it invents appear in no log row and no metric."""
    key = limited_key("fuzzy-student", requests_per_minute=3)
    headers = {"Authorization": f"Bearer {key}", "User-Agent": "limits-test-refusals"}
    unknown = [httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=60,
                          json={"model": f"made-up-{i}-" + "x" * 150, "messages": HELLO}) for i in range(2)]
    broken = httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=60, content=b"{nope")
    assert [r.status_code for r in unknown] == [404, 404] and broken.status_code == 400
    limited = chat(gateway.url, key, user_agent="limits-test-refusals")
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limit_exceeded"
    rows = wait_for(lambda: logged_rows(user_agent="limits-test-refusals") if len(
        logged_rows(user_agent="limits-test-refusals")) == 4 else None, 10)
    assert rows is not None and [row.model for row in rows] == ["", "", "", MODEL_ID]  # the 429 asked for a real one
    assert "made-up" not in httpx.get(gateway.url + "/metrics").text
