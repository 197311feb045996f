"""When a key's cache entry runs out, the requests that carry it at that moment (a class's agents
send many at once) wait for one database query, not one each; a request that leaves while it
waits does not take the answer from the others."""
from __future__ import annotations

import asyncio
import time

import pytest

from accounts import key_cache

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts _load calls; each takes 50 ms, as a query on a busy database might."""
    made: list[str] = []
    load = key_cache._load

    def slow_load(prefix: str):  # noqa: ANN202
        made.append(prefix)
        time.sleep(0.05)
        return load(prefix)

    monkeypatch.setattr(key_cache, "_load", slow_load)
    key_cache._cache.clear()
    return made


def test_many_requests_with_one_expired_key_make_one_query(student_key, loads) -> None:  # noqa: ANN001
    row, raw = student_key

    async def class_at_once() -> list[object]:
        return await asyncio.gather(*(key_cache.key_lookup(raw) for _ in range(30)))

    found = asyncio.run(class_at_once())
    assert loads == [row.prefix]
    assert all(identity is not None and identity.key_id == row.id for identity in found)
    key_cache._cache.clear()  # the entry ran out: the next wave loads again, once
    asyncio.run(class_at_once())
    assert loads == [row.prefix, row.prefix]


def test_a_request_that_leaves_while_waiting_does_not_cancel_the_load(student_key, loads) -> None:  # noqa: ANN001
    row, raw = student_key

    async def scenario() -> object:
        leaving = asyncio.ensure_future(key_cache.key_lookup(raw))
        staying = asyncio.ensure_future(key_cache.key_lookup(raw))
        await asyncio.sleep(0.01)
        leaving.cancel()
        return await staying

    identity = asyncio.run(scenario())
    assert identity is not None and identity.key_id == row.id and loads == [row.prefix]
