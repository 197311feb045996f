"""The fair-sharing rule against hand-made timelines: one slot, requests whose service time is
their cost, students who arrive, burst and come late. The same timelines run against the pure
rule and against live state (in process, and on Redis when REDIS_URL is set), which must order
alike: the Redis scripts are the rule for every gateway process."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from django.conf import settings

from inference.admission import fair_share
from inference.admission.fair_share import POLICIES, Waiting, charge, lifted, pick
from ocsweb.live import SiteInProcessLiveState, SiteRedisLiveState


@dataclass
class Request:
    student: str
    arrives: float
    prompt: int
    output: int = 0
    weight: float = 1.0
    served_at: float | None = None

    @property
    def cost(self) -> float:  # service time in the simulation: what it costs the worker
        return charge("tokens", computed_prompt_tokens=self.prompt, output_tokens=self.output)


class PureLine:
    """The rule as the class replay's simulator uses it: plain dicts."""

    def __init__(self, policy: str, clock: Callable[[], float]) -> None:
        self.policy, self.clock = policy, clock
        self.waiting: dict[str, Waiting] = {}
        self.counters: dict[str, float] = {}

    def join(self, request: str, student: str, weight: float, cost: float) -> None:
        if all(w.student != student for w in self.waiting.values()):
            self.counters[student] = lifted(self.counters, self.waiting.values(), student)
        self.waiting[request] = Waiting(request=request, student=student, arrived=self.clock(), weight=weight,
                                        cost=cost)

    def turn(self) -> str | None:
        chosen = pick(self.waiting.values(), self.counters)
        return chosen.request if chosen else None

    def served(self, request: str, student: str, amount: float) -> None:
        del self.waiting[request]
        self.counters[student] = self.counters.get(student, 0.0) + amount

    def charge(self, student: str, amount: float) -> None:
        self.counters[student] = self.counters.get(student, 0.0) + amount


class LiveLine:
    """The same through a live-state backend's fair_* methods."""

    def __init__(self, policy: str, live: SiteInProcessLiveState | SiteRedisLiveState) -> None:
        self.policy, self.live, self.line = policy, live, f"1:m-{uuid.uuid4().hex[:6]}"

    def join(self, request: str, student: str, weight: float, cost: float) -> None:
        asyncio.run(self.live.fair_join(self.line, self.policy, request=request, student=student, weight=weight,
                                        cost=cost, ttl_s=10**7))

    def turn(self) -> str | None:
        turn = asyncio.run(self.live.fair_turn(self.line, self.policy))
        # the pump reads the line's order (fair_order): its head is always the turn
        ordered = asyncio.run(self.live.fair_order(self.line, self.policy, 100))
        assert (ordered[0] if ordered else None) == turn, (ordered, turn)
        return turn

    def served(self, request: str, student: str, amount: float) -> None:
        assert asyncio.run(self.live.fair_served(self.line, self.policy, request=request, student=student,
                                                 amount=amount))

    def charge(self, student: str, amount: float) -> None:
        asyncio.run(self.live.fair_charge(self.line, self.policy, student=student, amount=amount))


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


BACKENDS = ["pure", "in-process"] + (["redis"] if settings.REDIS_URL else [])


def make_line(kind: str, policy: str, clock: Clock) -> PureLine | LiveLine:
    if kind == "pure":
        return PureLine(policy, clock)
    if kind == "in-process":
        return LiveLine(policy, SiteInProcessLiveState(clock=clock))
    return LiveLine(policy, SiteRedisLiveState(settings.REDIS_URL, f"{settings.OCS_LIVE_NAMESPACE}-{uuid.uuid4().hex[:8]}"))


@dataclass
class Timeline:
    served: list[Request] = field(default_factory=list)

    def service(self, student: str, until: float) -> float:
        """Weighted service `student` received by time `until` (their requests' cost, pro rata)."""
        total = 0.0
        for r in self.served:
            if r.student == student and r.served_at is not None and r.served_at < until:
                total += min(r.cost, until - r.served_at) / r.weight
        return total


def run(requests: list[Request], *, kind: str, policy: str, closed_loop: dict[str, Callable[[float], Request]] | None = None,
        until: float = float("inf")) -> Timeline:
    """One slot. Requests join the line as they arrive; when the slot frees, the rule picks.
    `closed_loop`: students who send their next request as soon as the last one is answered."""
    clock = Clock()
    line = make_line(kind, policy, clock)
    pending = sorted(requests, key=lambda r: r.arrives)
    by_id: dict[str, Request] = {}
    timeline = Timeline()
    free_at = 0.0
    count = 0

    def arrive(request: Request) -> None:
        nonlocal count
        count += 1
        request_id = f"r{count:05d}"  # ids sort in arrival order: ties at one instant stay in order
        by_id[request_id] = request
        # the estimate the gateway has when a request joins: its prompt, as if nothing were cached
        line.join(request_id, request.student, request.weight,
                  charge(policy, computed_prompt_tokens=request.prompt, output_tokens=0, weight=request.weight))

    while clock.now < until:
        while pending and pending[0].arrives <= clock.now:
            arrive(pending.pop(0))
        turn = line.turn()
        if turn is None:
            if not pending:
                break
            clock.now = max(clock.now, pending[0].arrives)
            continue
        request = by_id[turn]
        line.served(turn, request.student, charge(policy, computed_prompt_tokens=request.prompt,
                                                  output_tokens=request.output, weight=request.weight))
        request.served_at = clock.now
        timeline.served.append(request)
        free_at = clock.now + request.cost
        # arrivals during the service join the line in time order
        while pending and pending[0].arrives <= free_at:
            clock.now = max(clock.now, pending[0].arrives)
            arrive(pending.pop(0))
        clock.now = free_at
        if closed_loop and request.student in closed_loop:
            pending.append(closed_loop[request.student](free_at))
            pending.sort(key=lambda r: r.arrives)
    return timeline


AGENT_TURN = dict(prompt=2000, output=50)  # costs 2,200
QUESTION = dict(prompt=50, output=25)  # costs 150


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_burst_student_cannot_take_more_than_their_share(kind: str) -> None:
    def load() -> list[Request]:
        return [Request("burst", 0.0, **AGENT_TURN) for _ in range(30)] + [
            Request("chat", 0.0, **QUESTION) for _ in range(300)]

    timeline = run(load(), kind=kind, policy="tokens", until=30_000)
    # Both wait the whole time: their service differs by at most one request of the larger kind.
    assert abs(timeline.service("burst", 30_000) - timeline.service("chat", 30_000)) <= 2200
    # The same load under request round-robin: one question per agent turn.
    round_robin = run(load(), kind=kind, policy="requests", until=30_000)
    assert round_robin.service("burst", 30_000) > 10 * round_robin.service("chat", 30_000)


def chat_waits(kind: str, policy: str) -> list[float]:
    """Three agent students and a burst student keep one slot busy; a chat student asks a short
    question now and then. How long does each question wait?"""
    heavy = [Request(student, 0.0, **AGENT_TURN) for student in ("agent1", "agent2", "agent3", "burst")
             for _ in range(15)]
    questions = [Request("chat", 1000.0 + 5000.0 * n, **QUESTION) for n in range(8)]
    timeline = run(heavy + questions, kind=kind, policy=policy, until=120_000)
    return [r.served_at - r.arrives for r in questions if r.served_at is not None]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_short_question_waits_for_one_heavy_turn_not_one_of_each(kind: str) -> None:
    tokens, requests = chat_waits(kind, "tokens"), chat_waits(kind, "requests")
    assert len(tokens) == len(requests) == 8
    median = lambda waits: sorted(waits)[len(waits) // 2]  # noqa: E731
    # tokens: usually only the turn running when it came; at worst the turns of the students
    # whose counters are level with the question's (its own recent service counts)
    assert median(tokens) <= 2200 and max(tokens) <= 3 * 2200
    # round-robin: one question per round of four agent turns, so its questions pile up
    assert median(requests) >= 4 * 2200 and max(tokens) <= 0.5 * max(requests)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_late_student_neither_starves_nor_jumps_the_queue(kind: str) -> None:
    early = [Request("early", 0.0, prompt=1000) for _ in range(40)]  # 40 requests of 1,000 from t=0
    late = [Request("late", 10_500.0, prompt=1000) for _ in range(10)]  # arrives after ~10 of them
    timeline = run(early + late, kind=kind, policy="tokens")
    order = [r.student for r in timeline.served]
    first_late = order.index("late")
    assert first_late <= 12  # served within about one request of arriving: no starving
    after = order[first_late:first_late + 10]
    # Alternation from then on: "late" did not bank the 10,000 tokens it was away.
    assert after.count("late") <= 6 and after.count("early") >= 4


@pytest.mark.parametrize("kind", BACKENDS)
def test_class_weights_hold(kind: str) -> None:
    heavy = [Request("double", 0.0, prompt=500, weight=2.0) for _ in range(60)]
    light = [Request("single", 0.0, prompt=500, weight=1.0) for _ in range(60)]
    timeline = run(heavy + light, kind=kind, policy="tokens", until=30_000)
    double = sum(r.cost for r in timeline.served if r.student == "double" and r.served_at < 30_000)
    single = sum(r.cost for r in timeline.served if r.student == "single" and r.served_at < 30_000)
    assert 1.7 <= double / single <= 2.3  # raw service 2:1 (equal weighted service)


@pytest.mark.parametrize("kind", BACKENDS)
def test_request_round_robin_ignores_sizes_and_weights(kind: str) -> None:
    requests = [Request("big", 0.0, prompt=5000) for _ in range(5)] + [
        Request("small", 0.0, prompt=10, weight=3.0) for _ in range(5)]
    order = [r.student for r in run(requests, kind=kind, policy="requests").served]
    assert order == ["big", "small"] * 5


def test_one_students_requests_go_in_arrival_order_and_the_policy_names_are_the_contract() -> None:
    waiting = [Waiting("b", "s", arrived=2.0), Waiting("a", "s", arrived=1.0), Waiting("c", "t", arrived=0.5)]
    assert pick(waiting, {"s": 1.0, "t": 5.0}).request == "a"  # type: ignore[union-attr]
    assert pick([], {}) is None
    assert lifted({"s": 1.0, "t": 5.0, "u": 9.0}, waiting, "u") == 9.0  # never lowered
    assert lifted({"s": 1.0, "t": 5.0}, waiting, "new") == 1.0  # level with the least-served waiting
    assert POLICIES == ("tokens", "requests", "local")
    assert charge("requests", computed_prompt_tokens=9000, output_tokens=10, weight=5) == 1.0
    assert charge("tokens", computed_prompt_tokens=100, output_tokens=10, weight=2) == 70.0
    with pytest.raises(ValueError):
        charge("fifo", computed_prompt_tokens=1, output_tokens=1)


@pytest.mark.parametrize("kind", [k for k in BACKENDS if k != "pure"])
def test_the_whole_line_in_order_is_the_pure_rules_order(kind: str) -> None:
    """fair_order (what the pump walks, so that a waiter holding for its worker lets the next
    one in) is fair_share.order on the same entries and counters, on both back ends."""
    line = make_line(kind, "tokens", Clock())
    assert isinstance(line, LiveLine)
    entries = [("r1", "ann", 1.0, 500.0), ("r2", "bob", 1.0, 40.0), ("r3", "cat", 2.0, 900.0), ("r4", "bob", 1.0, 60.0)]
    for request, student, weight, cost in entries:
        line.join(request, student, weight, cost)
    line.served("r2", "bob", 40.0)  # bob has received something: behind the others, who are level at 0
    expected = [w.request for w in fair_share.order(
        [Waiting(request=r, student=s, arrived=0.0, weight=w, cost=c) for r, s, w, c in entries if r != "r2"],
        {"bob": 40.0})]
    assert expected == ["r1", "r3", "r4"]
    assert asyncio.run(line.live.fair_order(line.line, "tokens", 10)) == expected
    assert asyncio.run(line.live.fair_order(line.line, "tokens", 2)) == expected[:2]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_hogs_running_streams_put_a_classmates_question_before_the_hogs_queued_stream(kind: str) -> None:
    """A hog holds every slot with long streams (claimed with nobody waiting: nothing charged yet)
    and queues one more; a classmate asks a short question. Only what the running streams relay,
    charged as it streams (rules.streamed_charge), puts the question first."""
    from inference.admission.rules import STREAM_CHARGE_TOKENS, estimate_charge, streamed_charge

    def question_first(relayed_per_stream: int) -> bool:
        line = make_line(kind, "tokens", Clock())
        line.join("r1-hog-queued", "hog", 1.0, estimate_charge("tokens", prompt_bytes=80))
        line.join("r2-question", "classmate", 1.0, estimate_charge("tokens", prompt_bytes=120))
        for _ in range(4):  # the hog's four running streams
            for _ in range(relayed_per_stream // STREAM_CHARGE_TOKENS):
                line.charge("hog", streamed_charge("tokens", output_tokens=STREAM_CHARGE_TOKENS))
        return line.turn() == "r2-question"

    assert not question_first(0)  # as before: level counters, the hog's cheaper, older request wins
    assert question_first(STREAM_CHARGE_TOKENS)  # one charge per running stream is enough


def test_a_stream_cut_short_pays_its_prompt_and_what_it_relayed_not_the_estimate_back() -> None:
    from inference.admission.rules import estimate_charge, prompt_tokens_estimate, settle_amount, streamed_charge

    prompt_bytes, relayed = 4000, 40  # the client read 40 tokens of a 2,048-token answer, then left
    charged = estimate_charge("tokens", prompt_bytes=prompt_bytes)  # leaving the line
    charged += streamed_charge("tokens", output_tokens=32)  # while it streamed
    # the end: the worker never reported, so the prompt estimate and the output relayed
    charged += settle_amount("tokens", charged_policy="tokens", charged=charged,
                             computed_prompt_tokens=prompt_tokens_estimate(prompt_bytes), output_tokens=relayed)
    assert charged == pytest.approx(charge("tokens", computed_prompt_tokens=1000, output_tokens=40))
    assert streamed_charge("requests", output_tokens=32) == 0.0  # round-robin charges a request once
    assert streamed_charge("tokens", output_tokens=32, weight=2.0) == pytest.approx(64.0)
