"""Slot claims remember whose prompt each slot holds, so no student reuses a classmate's cache;
on the in-process backend and (when REDIS_URL is set) on Redis, which must choose alike."""
from __future__ import annotations

import asyncio

import pytest

from core.slot_owners import SlotOwner, lease_slot, pick_slot
from tests.ocsweb.test_live import BACKENDS, make_backends


def test_pick_prefers_the_conversation_then_the_student_then_an_unused_then_the_oldest_slot() -> None:
    owners = {0: SlotOwner("bob", "b1", 100), 1: SlotOwner("alice", "a2", 300), 2: SlotOwner("alice", "a1", 200),
              3: SlotOwner("carol", "c1", 50)}
    pick = lambda used, owners=owners, conversation="a1": pick_slot(  # noqa: E731
        capacity=5, used=used, owners=owners, student="alice", conversation=conversation)
    assert pick(set()) == 2  # this conversation's slot
    assert pick({2}) == 1  # alice's other slot: her prefix (system prompt, tools) is there
    assert pick({1, 2}) == 4  # a slot nobody used
    assert pick({1, 2, 4}) == 3  # carol's slot was used least recently: evict it, keep bob's
    assert pick({0, 1, 2, 3, 4}) is None
    assert pick(set(), conversation="") == 1  # no conversation: the student's latest slot


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_slot_holds_only_its_owner_s_cache(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        first = await live.claim_slot("worker:9", 1, 30, student="1", conversation="c")
        assert first is not None and first.index == 0 and lease_slot(first.lease_id) == 0
        assert not first.own_prefix  # a slot nobody owned yet may hold anything: no reuse
        assert await live.claim_slot("worker:9", 1, 30, student="2", conversation="d") is None  # full
        await live.release("worker:9", first.lease_id)
        again = await live.claim_slot("worker:9", 1, 30, student="1", conversation="c")
        assert again is not None and again.own_prefix  # alice's own next turn reuses her prompt
        await live.release("worker:9", again.lease_id)
        other = await live.claim_slot("worker:9", 1, 30, student="2", conversation="d")
        assert other is not None and not other.own_prefix  # bob takes over: no reuse of alice's prompt
        await live.release("worker:9", other.lease_id)
        back = await live.claim_slot("worker:9", 1, 30, student="1", conversation="c")
        assert back is not None and not back.own_prefix  # bob's prompt is in it now
        assert (await live.busy(["worker:9"])) == {"worker:9": 1}

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_each_student_keeps_their_own_slot_while_it_is_free(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        alice = await live.claim_slot("worker:4", 3, 30, student="1", conversation="a")
        bob = await live.claim_slot("worker:4", 3, 30, student="2", conversation="b")
        assert alice and bob and alice.index != bob.index
        await live.release("worker:4", alice.lease_id)
        await live.release("worker:4", bob.lease_id)
        carol = await live.claim_slot("worker:4", 3, 30, student="3", conversation="c")
        assert carol is not None and carol.index not in (alice.index, bob.index)  # the unused slot
        again = [await live.claim_slot("worker:4", 3, 30, student=s, conversation=c) for s, c in (("2", "b"), ("1", "a"))]
        assert [c.index for c in again if c] == [bob.index, alice.index]
        assert all(c and c.own_prefix for c in again)

    asyncio.run(scenario())
