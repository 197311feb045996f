"""/v1/openapi.json names no model without a key, and with one only the models that key may use
(issue 22): not other pools', not those its limits forbid."""
from __future__ import annotations

import json

import pytest
from tests.api_client import ApiClient

from accounts.services import key_issue
from fleet.services import worker_register

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("request_log_written")]


@pytest.fixture
def catalogue() -> None:
    worker_register(name="w-prod", base_url="http://127.0.0.1:9", model_id="prod-model", pool_name="production",
                    state="healthy")
    worker_register(name="w-prod-2", base_url="http://127.0.0.1:9", model_id="forbidden-model",
                    pool_name="production", state="healthy")
    worker_register(name="w-dev", base_url="http://127.0.0.1:9", model_id="dev-only-model", pool_name="dev",
                    state="healthy")


def model_enum(document: dict) -> list[str] | None:  # type: ignore[type-arg]
    schema = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return schema["properties"]["model"].get("enum")


def test_without_a_key_the_document_names_no_model(catalogue) -> None:  # noqa: ANN001
    answer = ApiClient().get("/v1/openapi.json")
    assert answer.status_code == 200
    text = answer.content.decode()
    for name in ("prod-model", "forbidden-model", "dev-only-model"):
        assert name not in text
    document = json.loads(text)
    assert model_enum(document) is None  # any string: the document still describes every route
    assert {"/v1/models", "/v1/chat/completions", "/v1/messages"} <= set(document["paths"])


def test_with_a_key_the_document_names_only_the_models_that_key_may_use(catalogue, student) -> None:  # noqa: ANN001
    student.allowed_models = "prod-model"
    student.save(update_fields=["allowed_models"])
    _, raw = key_issue(user=student, name="laptop")
    answer = ApiClient().get("/v1/openapi.json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert answer.status_code == 200
    assert model_enum(answer.json()) == ["prod-model"]
    assert "dev-only-model" not in answer.content.decode() and "forbidden-model" not in answer.content.decode()
    # The same models as /v1/models lists for that key.
    listed = ApiClient().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}").json()
    assert [m["id"] for m in listed["data"]] == ["prod-model"]


def test_a_wrong_key_gets_401_in_the_openai_envelope(catalogue) -> None:  # noqa: ANN001
    answer = ApiClient().get("/v1/openapi.json", HTTP_AUTHORIZATION="Bearer ocs-aaaaaaaaaa-" + "b" * 40)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_api_key"
