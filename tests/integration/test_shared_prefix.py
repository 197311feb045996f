"""A client's constant prefix shared across students only once k students other than the requester
sent it (inference/admission/shared_prefix.py), on the real llama-server: the attack of issue 49, in
the paired form of test_cache_isolation.py, with repeats.

One slot (every turn of another student is a handover), a gateway with OCS_SHARED_PREFIX_K=3. A
victim's system prompt (three whole blocks and a short tail) holds a locker PIN. A clique of
k - 1 = 2 guesses it word for word: the prober with three keys (one student: counted once), then one
accomplice, whose guess has the victim and the prober as other senders. Neither finds a token of it
cached, and the accomplice's right guess is as slow as their wrong one (median ratio of the pairs).
On the last try a third member makes the clique k, the rule's stated limit: the block turns public
and is primed, and a further student's first turn then finds it (by the counts, and fast, which
shows the timing can see a hit) and the worker computes only that student's own tokens.
"""
from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID, Gateway, start_gateway, stop_process

pytestmark = [pytest.mark.integration]

TRIES = 3
OWN_OPENING = 64  # what a student may find of their own earlier prompt: the template's opening, "Note"
WORDS = ("school lesson teacher student laptop window garden river mountain planet engine number letter "
         "history science music painting kitchen bicycle morning evening market library station bridge").split()


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def ask(gateway_url: str, key: str, system: str, question: str) -> tuple[float, dict]:
    started = time.monotonic()
    answer = httpx.post(gateway_url + "/v1/chat/completions", timeout=300, headers={"Authorization": f"Bearer {key}"},
                        json={"model": MODEL_ID, "max_tokens": 1, "messages": [
                            {"role": "system", "content": system}, {"role": "user", "content": question}]})
    elapsed = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    return elapsed, answer.json()


def cached(answer: dict) -> int:
    return answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def computed(answer: dict) -> int:
    """The prompt tokens the worker computed (its own count, `timings.prompt_n`)."""
    return answer["timings"]["prompt_n"]


@pytest.fixture(scope="module")
def shared_gateway(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Gateway]:  # noqa: ANN001
    with django_db_blocker.unblock():
        running = start_gateway(tmp_path_factory.mktemp("shared-gateway") / "gateway.log", OCS_SHARED_PREFIX_K="3")
    try:
        yield running
    finally:
        stop_process(running.process)


def one_slot_worker(llama_server: str) -> None:
    from fleet.services import worker_register

    worker_register(name="it-shared-prefix", base_url=llama_server, model_id=MODEL_ID, pool_name="production",
                    slots=1, context_length=4096, state="healthy", api_key=FIXTURE_WORKER_KEY)


def keys_of(*names: str, per_student: int = 1) -> list[list[str]]:
    """Per student (created or found by name), `per_student` keys of theirs."""
    from accounts.services import key_issue, user_ensure

    users = [user_ensure(username=name, role="student", password=f"pw-{name}-1")[0] for name in names]
    return [[key_issue(user=user, name=f"laptop-{i}")[1] for i in range(per_student)] for user in users]


def test_a_clique_of_k_minus_one_with_several_keys_never_confirms_a_private_system_prompt(
        shared_gateway, llama_server, transactional_db) -> None:  # noqa: ANN001
    from inference.admission.shared_prefix import BLOCK_CHARS

    one_slot_worker(llama_server)
    (victim,), (accomplice,) = keys_of("vic", "abe")
    (prober,) = keys_of("pat", per_student=3)
    rng = random.Random(uuid.uuid4().int)
    seen: list[int] = []
    right, wrong, right_s, wrong_s = [], [], [], []
    for attempt in range(TRIES):
        pin = rng.randrange(10**5, 10**6)
        # Two whole blocks (~500 tokens) and a tail: enough for a hit to show in counts and time,
        # and a third less to read per ask than three blocks (this test asks 14 times).
        secret = (f"Note {uuid.uuid4().hex}: my locker PIN is {pin}. " + words(rng, 600))[:2 * BLOCK_CHARS + 300]
        guess_of = secret.replace(str(pin), str(pin + 1))  # the same prompt with a wrong PIN
        _, answer = ask(shared_gateway.url, victim, secret, "What is my PIN?")
        seen.append(cached(answer))
        _, answer = ask(shared_gateway.url, prober[0], secret, "Is that right?")
        seen.append(cached(answer))
        for key in prober[1:]:  # the same student's other keys: counted once (they reuse their own slot)
            ask(shared_gateway.url, key, secret, "Is that right?")
        seconds, answer = ask(shared_gateway.url, accomplice, secret, "Is that right?")  # others: victim, prober
        right.append(cached(answer))
        right_s.append(seconds)
        seconds, answer = ask(shared_gateway.url, accomplice, guess_of, "Is that right?")
        wrong.append(cached(answer))
        wrong_s.append(seconds)
    # The clique reaches k: the third member's turn primes the public blocks; a further student restores them.
    (third,), (further,) = keys_of("cal", "fay")
    _, primed = ask(shared_gateway.url, third, secret, "Is that right?")
    hit_s, hit = ask(shared_gateway.url, further, secret, "What is my PIN?")  # the victim's very prompt
    right_ratio = statistics.median(r / w for r, w in zip(right_s, wrong_s))
    hit_ratio = hit_s / wrong_s[-1]
    print(f"cached: victim and prober {seen}, right guess {right}, wrong guess {wrong}, further student "
          f"{cached(hit)} of {hit['usage']['prompt_tokens']} (computed {computed(hit)}); seconds: right {right_s}, "
          f"wrong {wrong_s}, further {hit_s:.2f}; ratios to the wrong guess: right {right_ratio:.2f} (median), "
          f"further {hit_ratio:.2f}")
    assert max(seen) < OWN_OPENING  # 0 and 1 others had sent it: nothing shared
    assert max(right) < OWN_OPENING and max(wrong) < OWN_OPENING  # the counts say nothing of the PIN
    assert right_ratio >= 0.5  # the right guess is no faster than a wrong one
    # ... until k students besides the requester sent it: then the whole blocks are found, not a
    # token of the tail past them, and the worker computes only the further student's own tokens.
    prompt = hit["usage"]["prompt_tokens"]
    assert cached(hit) > 250 and abs(cached(hit) - cached(primed)) <= 8, (hit["usage"], primed["usage"])  # 2 blocks: ~315
    assert cached(hit) < prompt - 30  # the tail past the whole blocks (~300 characters) is the student's to compute
    assert computed(hit) == prompt - cached(hit) and computed(hit) < 150, hit["timings"]
    assert hit_ratio < 0.5  # and the timing would have shown a hit
