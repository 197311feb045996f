"""A student whose weekly budget is spent is answered by the catalogue's fallback model, with
`x-ocs-fallback: budget` and the answering model's name (issue 21, item 2), against the real
llama-server; without a fallback the refusal is 429 budget_exhausted."""
from __future__ import annotations

import json

import pytest
from tests.api_client import ApiClient

from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

SMALL = "smollm2-small"


def ask(raw: str) -> tuple[int, dict, str]:
    response = ApiClient().post("/v1/chat/completions", json.dumps({
        "model": MODEL_ID, "max_tokens": 4, "messages": [{"role": "user", "content": "Say hi."}]}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    return response.status_code, response.json(), response.headers.get("x-ocs-fallback", "")


def test_a_spent_weekly_budget_falls_back_to_the_small_model(worker, spare_llama_servers, student,
                                                            settings) -> None:  # noqa: ANN001
    from accounts.services import key_issue, limits_set
    from fleet.services import worker_register

    small = spare_llama_servers(slots=1, context_per_slot=2048, model_id=SMALL)  # served under its own name
    worker_register(name="it-small", base_url=small.spec.base_url, model_id=SMALL, pool_name="production", slots=1,
                    context_length=2048, state="healthy", api_key=FIXTURE_WORKER_KEY)
    limits_set(target=student, tokens_per_week=1)
    _key, raw = key_issue(user=student)
    status, body, fallback = ask(raw)
    assert status == 429 and body["error"]["code"] == "budget_exhausted" and not fallback
    assert "week" in body["error"]["message"] and "resets on" in body["error"]["message"]

    settings.OCS = {**settings.OCS, "BUDGET_FALLBACK_MODEL": SMALL}
    status, body, fallback = ask(raw)
    assert status == 200, body
    assert fallback == "budget" and body["model"] == SMALL and body["choices"][0]["message"]["content"] is not None
