"""The capture server (a test helper) speaks each dialect well enough for the official SDKs, keeps
no credentials, and as a proxy passes requests and answers through unchanged."""
from __future__ import annotations

import anthropic
import httpx
import openai

from tests.realclients.capture import ANSWER_TEXT, CaptureServer

KEY = "sk-secret-never-recorded"


def test_the_openai_sdk_streams_a_chat_answer_and_usage_from_it() -> None:
    with CaptureServer() as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
        chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                     stream=True, stream_options={"include_usage": True}))
        exchange = server.exchanges[0]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER_TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert (exchange.method, exchange.path, exchange.status) == ("POST", "/v1/chat/completions", 200)
    assert exchange.body["messages"] == [{"role": "user", "content": "hi"}]
    assert exchange.headers["authorization"] == "<redacted>"


def test_the_openai_sdk_reads_a_complete_responses_stream_from_it() -> None:
    with CaptureServer() as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
        with client.responses.stream(model="m", input="hi") as stream:
            final = stream.get_final_response()
        plain = client.responses.create(model="m", input="hi")
    assert final.output_text == ANSWER_TEXT and plain.output_text == ANSWER_TEXT
    assert final.usage is not None and final.usage.output_tokens > 0


def test_the_anthropic_sdk_reads_a_complete_message_stream_from_it() -> None:
    with CaptureServer() as server:
        client = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)
        with client.messages.stream(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as stream:
            final = stream.get_final_message()
        exchange = server.exchanges[0]
    assert final.content[0].text == ANSWER_TEXT and final.stop_reason == "end_turn"
    assert exchange.headers.get("x-api-key", exchange.headers.get("authorization")) == "<redacted>"
    assert KEY not in repr(server.exchanges)


def test_as_a_proxy_it_passes_requests_and_answers_through_and_records_the_status() -> None:
    with CaptureServer() as upstream, CaptureServer(upstream=upstream.url) as proxy:
        found = httpx.post(proxy.url + "/v1/chat/completions?x=1", json={"model": "m", "messages": []},
                           headers={"authorization": f"Bearer {KEY}"})
        missing = httpx.get(proxy.url + "/nowhere")
        seen_upstream = list(upstream.exchanges)
        seen_proxy = list(proxy.exchanges)
    assert found.status_code == 200 and found.json()["choices"][0]["message"]["content"] == ANSWER_TEXT
    assert missing.status_code == 404
    assert [(e.path, e.query) for e in seen_upstream] == [("/v1/chat/completions", {"x": "1"}), ("/nowhere", {})]
    assert [e.status for e in seen_proxy] == [200, 404]
    assert "no route GET /nowhere" in seen_proxy[1].response_head
    assert seen_upstream[0].headers["authorization"] == "<redacted>"  # it reached the upstream, kept by neither
