"""The students' real tools against the real worker: the openai SDK's tool calling, Copilot's
request shapes and its Ollama discovery routes."""
from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from django.conf import settings

from tests.conftest import MODEL_ID

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def client_for(gateway, raw_key: str) -> openai.OpenAI:  # noqa: ANN001
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=raw_key, max_retries=0, timeout=120)


def test_a_named_tool_choice_streams_a_real_tool_call_and_usage_every_time(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = client_for(gateway, student_key[1])
    for attempt in range(10):
        calls: dict[int, dict] = {}
        finish, usage = None, None
        for chunk in client.chat.completions.create(
            model=MODEL_ID, messages=ASK, tools=[WEATHER], stream=True, stream_options={"include_usage": True},
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=64,
        ):
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                assert not choice.delta.content, "forced tool calls carry no text"
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                    entry["id"] = call.id or entry["id"]
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
        assert list(calls) == [0], attempt
        assert calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
        assert isinstance(json.loads(calls[0]["arguments"])["city"], str)
        assert finish == "tool_calls"
        assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0


def test_required_with_one_tool_returns_a_tool_call_without_streaming(gateway, worker, student_key) -> None:  # noqa: ANN001
    reply = client_for(gateway, student_key[1]).chat.completions.create(
        model=MODEL_ID, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=64)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "get_weather"
    assert "city" in json.loads(choice.message.tool_calls[0].function.arguments)


def copilot_tools(count: int) -> list[dict]:
    return [{"type": "function", "function": {
        "name": f"tool_{i}-x", "description": f"Workspace tool number {i}",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}} for i in range(count)]


@pytest.mark.parametrize("tool_choice", ["auto", {"type": "function", "function": {"name": "tool_7-x"}}])
def test_copilots_request_shape_with_120_tools_and_no_max_tokens_streams(gateway, worker, student_key, tool_choice) -> None:  # noqa: ANN001
    from fleet.models import CatalogModel

    # No max_tokens: the model's output cap applies. At the default (4,096) SmolLM2 may ramble for
    # minutes on a CPU (this test took 6 s to 164 s, by the sampled text); a small cap keeps it
    # short and shows the cap is what ends the answer.
    CatalogModel.objects.filter(public_id=MODEL_ID).update(max_output_tokens=64)
    time.sleep(settings.OCS["FLEET_CACHE_TTL_S"] + 0.5)  # the gateway's catalogue snapshot
    body = {"model": MODEL_ID, "messages": [{"role": "system", "content": "You are Copilot."}, *ASK],
            "temperature": 0.1, "top_p": 1, "stream": True, "stream_options": {"include_usage": True},
            "tools": copilot_tools(120), "tool_choice": tool_choice}
    headers = {"Authorization": f"Bearer {student_key[1]}"}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=300) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    (usage,) = [e["usage"] for e in events if e.get("usage")]
    assert 0 < usage["completion_tokens"] <= 64
    assert not any("error" in e for e in events)
    if isinstance(tool_choice, dict):
        names = [c["function"].get("name") for e in events for ch in e["choices"]
                 for c in ch["delta"].get("tool_calls", [])]
        assert "tool_7-x" in names


def test_completions_endpoint_streams_and_answers(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = client_for(gateway, student_key[1])
    assert client.completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=5).choices[0].text
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt="Once upon a time", max_tokens=8, stream=True) if c.choices)
    assert text


def test_a_prompt_longer_than_the_context_is_context_length_exceeded(gateway, worker, student_key) -> None:  # noqa: ANN001
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(gateway, student_key[1]).chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "tea " * 6000}], max_tokens=4)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"


def test_ollama_discovery_routes_return_what_copilot_reads(gateway, worker, student_key) -> None:  # noqa: ANN001
    base = f"{gateway.url}/ollama/{student_key[1]}"
    version = httpx.get(base + "/api/version").json()["version"]
    assert tuple(int(p) for p in version.split(".")) >= (0, 6, 4)
    models = httpx.get(base + "/api/tags").json()["models"]
    assert [m["model"] for m in models] == [MODEL_ID]
    shown = httpx.post(base + "/api/show", json={"model": MODEL_ID}).json()
    assert "tools" in shown["capabilities"]
    arch = shown["model_info"]["general.architecture"]
    assert shown["model_info"][f"{arch}.context_length"] == 4096
    assert shown["model_info"]["general.basename"] == MODEL_ID
    assert httpx.post(base + "/api/show", json={"model": "nope"}).status_code == 404

    ollama = openai.OpenAI(base_url=base + "/v1", api_key="copilot-sends-none", max_retries=0)
    text = "".join(c.choices[0].delta.content or "" for c in ollama.chat.completions.create(
        model=MODEL_ID, messages=ASK, stream=True, max_tokens=8) if c.choices)
    assert text


def test_ollama_routes_refuse_a_revoked_key_and_keep_keys_out_of_the_logs(gateway, worker, student_key) -> None:  # noqa: ANN001
    from accounts.services import key_revoke

    key, raw = student_key
    base = f"{gateway.url}/ollama/{raw}"
    assert httpx.get(base + "/api/tags").status_code == 200
    key_revoke(key=key)
    from tests.conftest import wait_for

    assert wait_for(lambda: httpx.get(base + "/api/tags").status_code == 401, timeout_s=3)
    for path in ["/api/version", "/api/tags"]:
        response = httpx.get(base + path)
        assert response.status_code == 401 and response.json()["error"].startswith("invalid_api_key: ")  # Ollama's envelope
    assert httpx.post(base + "/api/show", json={"model": MODEL_ID}).status_code == 401
    assert httpx.post(base + "/v1/chat/completions", json={"model": MODEL_ID, "messages": ASK}).status_code == 401
    log = gateway.log()
    assert f"/ollama/ocs-{key.prefix}-[redacted]/api/tags" in log  # the access log saw these requests…
    assert raw not in log  # …without the key
