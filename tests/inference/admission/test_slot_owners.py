"""Slot claims remember whose prompt each slot holds, so no student reuses a classmate's cache;
on the in-process backend and (when REDIS_URL is set) on Redis, which must choose alike."""
from __future__ import annotations

import asyncio

import pytest

from inference.admission.slot_owners import PENDING, SlotOwner, handover, lease_slot, pick_slot
from tests.core.test_live import BACKENDS, make_backends


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


def test_pick_keeps_below_first_and_takes_the_preferred_slot_when_free() -> None:
    owners = {0: SlotOwner("alice", "a1", 300), 2: SlotOwner("bob", "b1", 100)}
    pick = lambda used, **lane: pick_slot(capacity=4, used=used, owners=owners, student="alice",  # noqa: E731
                                          conversation="a1", **lane)
    assert pick(set(), first=1) == 1  # her slot 0 is the lane's: a slot nobody used instead
    assert pick({1, 3}, first=1) == 2  # then bob's, the only one left above the lane
    assert pick({1, 2, 3}, first=1) is None  # only slot 0 is free: not for this request
    assert pick({0}, prefer=0) == 1 and pick(set(), prefer=0) == 0
    carol = pick_slot(capacity=4, used=set(), owners=owners, student="carol", conversation="c", prefer=0)
    assert carol == 0  # a short question takes the lane even over a slot nobody used


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_lane_holds_in_the_claim_itself(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        heavy = [await live.claim_slot("worker:6", 4, 30, student=str(n), conversation=f"c{n}", first=1)
                 for n in range(4)]
        assert sorted(c.index for c in heavy if c) == [1, 2, 3] and heavy[3] is None  # slot 0 stays free
        light = await live.claim_slot("worker:6", 4, 30, student="9", conversation="q", prefer=0)
        assert light is not None and light.index == 0
        for claim in heavy[:3]:
            assert claim is not None
            await live.release("worker:6", claim.lease_id)
        again = await live.claim_slot("worker:6", 4, 30, student="8", conversation="q2", prefer=0)
        assert again is not None and again.index != 0  # the lane is busy: any other free slot

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_slot_holds_only_its_owner_s_cache(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        first = await live.claim_slot("worker:9", 1, 30, student="1", conversation="c")
        assert first is not None and first.index == 0 and lease_slot(first.lease_id) == 0
        assert not first.own_prefix and first.handover  # a slot nobody owned yet may hold anything: no reuse
        assert (first.previous, first.restore) == ("", False)  # nobody's prompt to save, no file to restore
        assert await live.claim_slot("worker:9", 1, 30, student="2", conversation="d") is None  # full
        await live.confirm_slot("worker:9", 0, student="1", conversation="c")  # the worker processed her prompt
        await live.release("worker:9", first.lease_id)
        again = await live.claim_slot("worker:9", 1, 30, student="1", conversation="c")
        assert again is not None and again.own_prefix  # alice's own next turn reuses her prompt
        assert not again.handover and (again.previous, again.restore) == ("", False)
        await live.release("worker:9", again.lease_id)
        other = await live.claim_slot("worker:9", 1, 30, student="2", conversation="d")
        assert other is not None and not other.own_prefix  # bob takes over: no reuse of alice's prompt
        assert (other.previous, other.restore) == ("1", False)  # alice's prompt is saved to her file first
        await live.confirm_slot("worker:9", 0, student="2", conversation="d")
        await live.release("worker:9", other.lease_id)
        back = await live.claim_slot("worker:9", 1, 30, student="1", conversation="c")
        assert back is not None and not back.own_prefix  # bob's prompt is in it now
        assert (back.previous, back.restore) == ("2", True)  # bob's saved, alice's own file restored
        assert (await live.busy(["worker:9"])) == {"worker:9": 1}

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_each_student_keeps_their_own_slot_while_it_is_free(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        alice = await live.claim_slot("worker:4", 3, 30, student="1", conversation="a")
        bob = await live.claim_slot("worker:4", 3, 30, student="2", conversation="b")
        assert alice and bob and alice.index != bob.index
        await live.confirm_slot("worker:4", alice.index, student="1", conversation="a")
        await live.confirm_slot("worker:4", bob.index, student="2", conversation="b")
        await live.release("worker:4", alice.lease_id)
        await live.release("worker:4", bob.lease_id)
        carol = await live.claim_slot("worker:4", 3, 30, student="3", conversation="c")
        assert carol is not None and carol.index not in (alice.index, bob.index)  # the unused slot
        again = [await live.claim_slot("worker:4", 3, 30, student=s, conversation=c) for s, c in (("2", "b"), ("1", "a"))]
        assert [c.index for c in again if c] == [bob.index, alice.index]
        assert all(c and c.own_prefix for c in again)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_handover_that_never_reached_the_worker_leaves_the_slot_nobody_s(kind: str) -> None:
    """Bob claims alice's slot and leaves before his prompt reached the worker: the slot still
    holds alice's prompt, so it must not count as bob's (his next claim would reuse her prefix),
    nor as alice's (bob might have written part of it). Nobody reuses it until a prompt is confirmed."""
    (live,) = make_backends(kind)

    async def scenario() -> None:
        alice = await live.claim_slot("worker:5", 1, 30, student="1", conversation="a")
        assert alice is not None
        await live.confirm_slot("worker:5", 0, student="1", conversation="a")
        await live.release("worker:5", alice.lease_id)
        bob = await live.claim_slot("worker:5", 1, 30, student="2", conversation="b")
        assert bob is not None and bob.previous == "1"
        await live.release("worker:5", bob.lease_id)  # gone before the worker saw his prompt: no confirm
        for student, conversation in (("2", "b"), ("1", "a")):
            claim = await live.claim_slot("worker:5", 1, 30, student=student, conversation=conversation)
            assert claim is not None and not claim.own_prefix, student
            assert claim.previous == ""  # nobody's prompt to save: its content is nobody's
            await live.release("worker:5", claim.lease_id)

    asyncio.run(scenario())


def test_handover_saves_a_classmate_s_prompt_and_restores_only_one_s_own_file() -> None:
    assert handover(SlotOwner("alice", "a", 1), "alice", {"alice"}) == ("", False)  # her own slot: nothing to do
    assert handover(SlotOwner("alice", "a", 1), "bob", set()) == ("alice", False)
    assert handover(SlotOwner("alice", "a", 1), "bob", {"alice", "bob"}) == ("alice", True)
    assert handover(SlotOwner("alice", "a", 1), "bob", {"alice", "carol"}) == ("alice", False)  # never carol's
    assert handover(SlotOwner(PENDING, "", 1), "bob", {"bob"}) == ("", True)  # an unconfirmed slot: nothing saved
    assert handover(None, "bob", set()) == ("", False)


def test_a_light_request_skips_the_slot_file_steps_that_cost_more_than_its_prompt() -> None:
    """A save and a restore each wait for the worker's loop to finish a step: a question in the
    lane neither restores its own file nor saves the lane slot's last (light) owner; it still
    saves an agent whose slot it took outside the lane. A request not in the lane: unchanged."""
    alice = SlotOwner("alice", "a", 1)
    assert handover(alice, "bob", {"bob"}, light=True, lane_slot=True) == ("", False)
    assert handover(alice, "bob", {"bob"}, light=True, lane_slot=False) == ("alice", False)
    assert handover(alice, "bob", {"bob"}, light=False, lane_slot=False) == ("alice", True)
    assert handover(alice, "alice", {"alice"}, light=True, lane_slot=True) == ("", False)  # her own: nothing


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_light_claim_records_no_file_it_will_not_write(kind: str) -> None:
    """The lane's rule is applied in the claim itself, where the owners' files are recorded: a
    question taking the lane slot from a classmate's question saves nothing, so the classmate must
    not be recorded as having a file there (their next turn would ask the worker to restore a file
    that was never written); a question restores nothing of its own, even with a file."""
    (live,) = make_backends(kind)
    resource = "worker:8"

    async def turn(student: str, **lane: object):
        claim = await live.claim_slot(resource, 4, 30, student=student, conversation=f"c{student}", **lane)
        assert claim is not None
        await live.confirm_slot(resource, claim.index, student=student, conversation=f"c{student}")
        await live.release(resource, claim.lease_id)
        return claim

    async def scenario() -> None:
        await turn("1", prefer=0)             # 1's question takes the lane slot 0
        two = await turn("2", prefer=0)       # 2's question takes it from 1: nothing saved
        assert (two.index, two.previous, two.restore) == (0, "", False)
        agent = await turn("1", first=1)                  # 1's agent turn, outside the lane
        assert agent.index != 0 and not agent.restore     # 1 was never saved: nothing to restore
        held = [await live.claim_slot(resource, 4, 30, student=s, conversation="x", first=1) for s in "567"]
        # 1's agent slot went to a classmate (saved: outside the lane), so 1 has a file now; 1's
        # next question takes the lane slot from 2, saves nothing and restores nothing
        assert any(c is not None and c.previous == "1" for c in held)
        question = await turn("1", prefer=0)
        assert (question.index, question.previous, question.restore) == (0, "", False)

    asyncio.run(scenario())


def test_a_lease_id_names_its_slot_and_its_student() -> None:
    from inference.admission.slot_owners import lease_student, lease_token

    lease_id = f"3.{lease_token('42', 'abc123')}"
    assert lease_slot(lease_id) == 3 and lease_student(lease_id) == "42"
    assert lease_student("3.abc123") is None  # a lease of the old form holds nobody's share
