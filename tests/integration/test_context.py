"""A prompt longer than every worker's slot gets a clear 400 with both numbers, in each dialect;
when workers differ, a long prompt is served by one whose slot holds it."""
from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

LONG = "tea " * 4400  # ~4,400 tokens: just more than the shared worker's 4,096-token slots (prefill is what costs)


def test_too_long_for_every_worker_is_a_400_in_every_dialect(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=student_key[1], max_retries=0, timeout=120)
    for create in (
        lambda: client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": LONG}],
                                               max_tokens=4),
        lambda: client.completions.create(model=MODEL_ID, prompt=LONG, max_tokens=4),
        lambda: client.responses.create(model=MODEL_ID, input=LONG, max_output_tokens=4),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            create()
        assert caught.value.code == "context_length_exceeded"
        assert "4096" in caught.value.message and any(ch.isdigit() for ch in caught.value.message.split("4096")[0])
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=student_key[1], max_retries=0, timeout=120)
    with pytest.raises(anthropic.BadRequestError) as caught_anthropic:
        claude.messages.create(model=MODEL_ID, max_tokens=4, messages=[{"role": "user", "content": LONG}])
    assert caught_anthropic.value.body["error"]["type"] == "invalid_request_error"
    assert "4096" in caught_anthropic.value.body["error"]["message"]
    # streamed, the refusal keeps its status: it comes before the first byte
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", timeout=120,
                      headers={"Authorization": f"Bearer {student_key[1]}"},
                      json={"model": MODEL_ID, "stream": True, "max_tokens": 4,
                            "messages": [{"role": "user", "content": LONG}]}) as answer:
        assert answer.status_code == 400
        answer.read()
        assert answer.json()["error"]["code"] == "context_length_exceeded"


# A prompt longer than a small worker's slot but cheap to read: the routing test's worker
# pair is a 1,024-token slot beside a 12,288-token one, so ~1,200 tokens tell them apart (the
# 4,400 tokens above, read by one CPU thread, were most of a minute).
ROUTED = "tea " * 1200
SMALL_SLOT = 1024


def test_a_long_prompt_goes_to_the_worker_whose_slot_holds_it(
        gateway, transactional_db, student_key, spare_llama_servers) -> None:  # noqa: ANN001
    from fleet.services import worker_register
    from inference.models import RequestLog
    from tests.conftest import wait_for

    small = spare_llama_servers(slots=2, context_per_slot=SMALL_SLOT)
    worker_register(name="it-small", base_url=small.spec.base_url, model_id=MODEL_ID, pool_name="production",
                    slots=2, context_length=SMALL_SLOT, state="healthy", api_key=FIXTURE_WORKER_KEY)
    big = spare_llama_servers(slots=1, context_per_slot=12288)  # YaRN past the native 8,192
    worker_register(name="it-big", base_url=big.spec.base_url, model_id=MODEL_ID, pool_name="production", slots=1,
                    context_length=12288, state="healthy", api_key=FIXTURE_WORKER_KEY)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=student_key[1], max_retries=0, timeout=300)
    models = {m.id: m for m in client.models.list()}
    assert models[MODEL_ID].model_extra["context_length"] == 12288  # what one request can really use
    reply = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": ROUTED}], max_tokens=4)
    assert reply.usage.prompt_tokens > SMALL_SLOT
    row = wait_for(lambda: RequestLog.objects.filter(status=200, prompt_tokens__gt=SMALL_SLOT).first(), 10)
    assert row is not None and row.worker_name == "it-big"
