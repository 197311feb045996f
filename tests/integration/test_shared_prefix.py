"""A system prompt's start shared across students only once k of them sent it (inference/admission/shared_prefix.py).

On the real llama-server, one slot (every turn a handover), a gateway with OCS_SHARED_PREFIX_K=3.
Four students send the same ~1,400-token system prompt, each with a private question. The first
two find nothing of it in the cache (fewer than k senders: the rule of issue 18 holds); the third
makes it public: the worker computes its whole blocks alone, saves them as the shared file, and
the third student's prompt reuses them. The fourth sends the same system prompt and the first
student's private question word for word: the worker restores the shared file and finds the same
public prefix, not a token more of the first student's question.
"""
from __future__ import annotations

import random
import uuid

import httpx
import pytest

from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID, start_gateway, stop_process

pytestmark = [pytest.mark.integration]

WORDS = ("school lesson teacher student laptop window garden river mountain planet engine number letter "
         "history science music painting kitchen bicycle morning evening market library station bridge").split()


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def ask(gateway_url: str, key: str, system: str, question: str) -> dict:
    answer = httpx.post(gateway_url + "/v1/chat/completions", timeout=300, headers={"Authorization": f"Bearer {key}"},
                        json={"model": MODEL_ID, "max_tokens": 1, "messages": [
                            {"role": "system", "content": system}, {"role": "user", "content": question}]})
    assert answer.status_code == 200, answer.text
    return answer.json()


def cached(answer: dict) -> int:
    return answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def test_a_system_prompt_is_reused_across_students_only_after_k_sent_it_and_never_their_questions(
        gateway, llama_server, transactional_db, tmp_path) -> None:  # noqa: ANN001
    from accounts.services import key_issue, user_ensure
    from fleet.services import worker_register

    worker_register(name="it-shared-prefix", base_url=llama_server, model_id=MODEL_ID, pool_name="production",
                    slots=1, context_length=4096, state="healthy", api_key=FIXTURE_WORKER_KEY)
    keys = [key_issue(user=user_ensure(username=name, role="student", password=f"pw-{name}-1")[0], name="laptop")[1]
            for name in ("ann", "ben", "cat", "dan")]
    rng = random.Random(uuid.uuid4().int)  # a system prompt no earlier run has counted
    system = f"You are the tutor of course {uuid.uuid4().hex}. " + words(rng, 1400)
    questions = [f"My locker code is {rng.randrange(10**4):04d}. " + words(rng, 300) for _ in keys]
    shared = start_gateway(tmp_path / "gateway.log", OCS_SHARED_PREFIX_K="3")
    try:
        first = [ask(shared.url, key, system, question) for key, question in zip(keys[:3], questions)]
        probe = ask(shared.url, keys[3], system, questions[0])  # dan resends ann's question word for word
    finally:
        stop_process(shared.process)
    prompt = first[0]["usage"]["prompt_tokens"]
    print(f"prompt {prompt} tokens; cached: {[cached(a) for a in first]}, the probe {cached(probe)}")
    assert prompt > 1500
    assert cached(first[0]) < 64 and cached(first[1]) < 64  # one, then two senders: nothing shared
    public = cached(first[2])  # the third sender: the public prefix, computed once, reused at once
    assert public > 1000, first[2]["usage"]
    assert public < first[2]["usage"]["prompt_tokens"] - 250  # never cat's own question
    assert probe["usage"]["prompt_tokens"] == prompt  # the very prompt ann sent
    assert abs(cached(probe) - public) <= 8, (cached(probe), public)  # the shared file: no more of ann's
