"""The fleet simulator: discrete events over workers' slots, with the gateway's own rules in front.

Pure: no Django, no I/O, no clock (time is the event queue's). Students are objects that say
what they send next and how long they pause after an answer (research/planner/workload.py makes
them from the class replay's personas); workers step as research/planner/cost.py says.

The gateway's decisions are the production functions, called through their modules (so a change
to one, or a test's monkeypatch of one, changes the prediction):

- which workers, in which order: `fleet.scheduler.rank_workers` over the simulated busy counts and
  the conversation's affinity (the worker that served it last, for AFFINITY_TTL_S), tried in
  `inference.admission.rules.claim_order`; a request no worker could serve is refused by
  `no_worker_refusal`;
- which slot, and whether its cache may be reused: `inference.admission.slot_owners.pick_slot`,
  `holds_own_prefix` and `handover` (a slot last used by a classmate is recomputed from scratch,
  unless the student's own slot file on that worker is restored into it first: FleetPlan.slot_files;
  the save and the restore are tasks of llama-server's loop, run in its thread between two steps
  for CostModel.slot_task_s each, one after another: while the worker computes, a task waits for
  the step boundary, the gateway sends the restore after the save has answered and the prompt
  after the restore, so a handover on a busy worker waits one step per task, and handovers
  claimed together on an idle worker reach its loop one by one);
- who is served next while every slot is busy: `inference.admission.fair_share.pick` and `lifted`, charged
  `admission_rules.estimate_charge` when leaving the line and settled with `settle_amount`;
- the light lane (slot 0 kept for short prompts under the token-fair policy): `admission_rules.lane`,
  and `slot_owners.handover`'s rule for a light request (no restore; the lane slot is not saved);
- a long prompt waiting a little for its conversation's worker: `admission_rules.affinity_hold`, with
  the pump walking the line's order (`fair_share.order`, or `order_local` under "local": requests
  whose conversation's worker has a free slot first, within FleetPlan.local_bound) past requests
  that hold;
- a system prompt's public start shared across students (FleetPlan.shared_prefix_k,
  OCS_SHARED_PREFIX_K): on a handover that restored no file of the student's own, the student is
  counted among the senders of their system prompt's blocks (TurnShape.shared, named by
  `inference.admission.shared_prefix.block_names` in workload.py) and `inference.admission.shared_prefix.public_blocks` says how
  much is public; the worker's shared file for it is restored (a task, then that prefix is found
  cached), or, the first time on that worker, the prompt is computed whole and the public part
  saved (a task: the gateway primes the slot with the public text, then saves, then sends the
  rest, which costs the same computation);
- barging, waiting and refusing: `may_claim_directly`, `wait_deadline`, `timed_out`,
  `queue_timeout_retry_after_s`.

With a noise seed (FleetPlan.noise_seed), each step's time is drawn around its cost, log-normal
with mean 1 and the cost model's relative spread (CostModel.jitter), so that replicates of one
class differ as two real runs do.

Workers that share compute (CostModel.contention > 0: the CPU demo's) slow each other while
both compute: a step's seconds alone are done at 1 / (1 + contention x others computing), re-timed
when another worker starts or stops computing.

What the gateway does that is not simulated: several gateway processes (one line is one line),
worker failures and failover, the students' limits (the replay's are set out of reach), the
host-RAM prompt cache (`--cache-ram`), speculative decoding.

A slot's prompt cache is a list of segments (a message, a system block: key and tokens); the
tokens a request finds cached are those of the longest run of leading segments equal to what the
slot last held, if the slot holds this student's own prompt, and at most all but one token
(llama-server evaluates at least the last one). After a turn the slot holds its prompt and the
answer it generated (`TurnShape.answer_key`, as many tokens as were generated less the last one
sampled, which llama-server never evaluates), so a next prompt that carries the answer back finds
that much of it cached too.

A step is costed as llama.cpp runs it (`CostModel.step_s`): the batch (the generating slots' tokens,
then the prompt chunks, in slot order) is cut into forward passes (`cost.ubatches`), and each
prompt piece's cost grows with the tokens already in its slot before it (the cached prefix and the
pieces already evaluated).
"""
from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from inference.admission import fair_share, shared_prefix, slot_owners
from fleet import scheduler
from inference.admission import rules as admission_rules
from research.class_metrics import Turn
from research.planner.cost import CostModel, Piece

POOL_ID = 1


@dataclass(frozen=True)
class TurnShape:
    """One request as the simulator needs it: its prompt as cache segments (key, tokens), its
    body's bytes (what the gateway estimates from), its output tokens, its conversation key."""

    segments: tuple[tuple[str, int], ...]
    prompt_bytes: int
    output_tokens: int
    conversation: str = ""
    # The key the next prompt gives this turn's answer as a segment of its own (workload.py), so
    # the tokens the slot generated count as cached when they come back in the next prompt (as
    # llama-server finds them: the slot's KV holds the prompt and the answer). "": not reused.
    answer_key: str = ""
    # Its leading system message's whole blocks (inference/admission/shared_prefix.py), each as (its name, the
    # cache segments a slot primed with that block and all before it holds). (): shares nothing.
    shared: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    @property
    def prompt_tokens(self) -> int:
        return sum(tokens for _, tokens in self.segments)


class Student(Protocol):
    """A simulated student. `next_turn` is called when they send; `turn_ended` when the turn is
    answered (completed) or refused, and returns the seconds they pause before the next one."""

    name: str
    persona: str
    weight: float
    arrival_s: float

    def next_turn(self) -> TurnShape: ...

    def turn_ended(self, *, completed: bool, retry_after_s: float) -> float: ...


@dataclass(frozen=True)
class FleetPlan:
    """The fleet and the gateway's settings: `workers` workers of `slots` slots of
    `context_tokens` tokens each, for `duration_s` seconds of load (no turn is sent after it)."""

    workers: int
    slots: int
    context_tokens: int
    duration_s: float
    policy: str = fair_share.DEFAULT_POLICY
    max_wait_s: float = 30.0  # OCS_QUEUE_MAX_WAIT_S
    slot_lease_s: float = 30.0  # OCS_SLOT_LEASE_S (the retry-after of a queue timeout)
    affinity_ttl_s: float = 600.0  # OCS_AFFINITY_TTL_S
    light_lane_tokens: int = 0  # OCS_LIGHT_LANE_TOKENS (the light lane holds under the "tokens" policy)
    lane_workers: int = 0  # of `workers`, how many are kept for short prompts (fleet/scheduler.py, the last ones)
    lane_tokens: int = scheduler.LANE_TOKENS  # a lane worker takes prompts of at most this many tokens
    affinity_wait_s: float = 0.0  # OCS_AFFINITY_WAIT_S
    affinity_wait_tokens: int = 1024  # OCS_AFFINITY_WAIT_TOKENS
    local_bound: float = fair_share.LOCAL_BOUND  # OCS_LOCAL_BOUND (the "local" policy)
    slot_files: bool = True  # OCS_SLOT_FILES: a handover saves the previous owner's prompt, restores the new one's
    shared_prefix_k: int = 0  # OCS_SHARED_PREFIX_K: 0 off (needs slot_files)
    cache_type: str | None = None  # the KV cache type planned; None: the cost model's own
    # Seed of the step-time noise (each step's time drawn around its cost with CostModel.jitter);
    # None: every step takes exactly its cost.
    noise_seed: int | None = None
    model_id: str = "planned"


def cached_prefix_tokens(held: Sequence[tuple[str, int]], wanted: Sequence[tuple[str, int]]) -> int:
    """Tokens of the leading segments of `wanted` equal to those of `held`; a segment the slot
    holds only the start of (an answer: the last token sampled is not in the KV) counts that
    start, and the match ends there."""
    reused = 0
    for (held_key, held_tokens), (key, tokens) in zip(held, wanted):
        if held_key != key:
            break
        reused += min(held_tokens, tokens)
        if held_tokens != tokens:
            break
    return reused


@dataclass(eq=False)
class _Request:
    id: str
    student: Student
    shape: TurnShape
    sent_s: float
    worker_id: int | None = None
    slot: int | None = None
    reused: int = 0
    prefill_left: int = 0
    decode_left: int = 0
    generated: int = 0
    first_token_s: float | None = None
    claimed_s: float | None = None
    deadline: float | None = None
    charged_policy: str = ""
    charged: float = 0.0
    in_line: bool = False
    hold_ends_scheduled: bool = False
    # slot file tasks (("save" | "restore", tokens of the file)) still to run before its prompt is sent
    slot_tasks: list[tuple[str, int]] = field(default_factory=list)


@dataclass(eq=False)
class _Worker:
    view: scheduler.WorkerView
    cost: CostModel
    claimed: dict[int, _Request] = field(default_factory=dict)  # slot index -> its request
    cache: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    owners: dict[int, slot_owners.SlotOwner] = field(default_factory=dict)
    files: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)  # student -> saved prompt
    shared_files: set[str] = field(default_factory=set)  # the public prefixes (last block's name) saved here
    running: list[_Request] = field(default_factory=list)  # in llama-server's loop
    slot_tasks: list[_Request] = field(default_factory=list)  # requests whose next slot file task is in its queue
    stepping: bool = False
    tasking: bool = False  # running its queue's slot file tasks (between two steps, or while idle)
    step: list[tuple[_Request, int]] = field(default_factory=list)  # (request, prompt tokens this step; 0: decode)
    # The step in progress, as seconds of it alone still to do, since when, at which rate (below 1
    # while other workers compute: CostModel.contention), and which of its scheduled ends holds.
    work_left: float = 0.0
    since: float = 0.0
    rate: float = 1.0
    version: int = 0


class Simulation:
    """One run. `run()` returns the turns, in the order they ended, and the run's duration
    (the plan's duration, or the last turn's end if later)."""

    def __init__(self, *, plan: FleetPlan, costs: Sequence[CostModel], students: Sequence[Student]) -> None:
        fair_share.check_policy(plan.policy)
        if len(costs) != plan.workers:
            raise ValueError(f"{plan.workers} workers need {plan.workers} cost models, got {len(costs)}")
        self.plan = plan
        self.students = list(students)
        self.workers = {
            number: _Worker(view=scheduler.WorkerView(
                id=number, name=f"worker-{number}", base_url="", pool_id=POOL_ID, pool_name="planned",
                model_id=plan.model_id, slots=plan.slots, state="healthy", context=plan.context_tokens,
                lane_tokens=plan.lane_tokens if number > plan.workers - plan.lane_workers else 0), cost=cost)
            for number, cost in enumerate(costs, start=1)
        }
        self.now = 0.0
        self._noise = random.Random(plan.noise_seed) if plan.noise_seed is not None else None
        self._events: list[tuple[float, int, str, object]] = []
        self._sequence = itertools.count()
        self._ids = itertools.count(1)
        self.waiting: dict[str, fair_share.Waiting] = {}
        self.requests: dict[str, _Request] = {}
        self.counters: dict[str, float] = {}
        self.affinity: dict[str, tuple[int, float]] = {}
        self.senders: dict[str, set[str]] = {}  # shared-prefix block name -> the students who sent it
        self.turns: list[Turn] = []
        # Idle workers a request entered this instant: their step begins once every event of the
        # instant is handled, so requests that reach an idle worker together share its first batch.
        self._idle_entered: list[_Worker] = []

    # --- the event queue ------------------------------------------------------------------------

    def _at(self, when: float, kind: str, payload: object) -> None:
        heapq.heappush(self._events, (when, next(self._sequence), kind, payload))

    def run(self) -> tuple[list[Turn], float]:
        for student in self.students:
            if student.arrival_s < self.plan.duration_s:
                self._at(student.arrival_s, "send", student)
        while self._events or self._idle_entered:
            if self._idle_entered and (not self._events or self._events[0][0] > self.now):
                entered, self._idle_entered = self._idle_entered, []
                for worker in entered:
                    if not worker.stepping and not worker.tasking:
                        self._begin_step(worker)
                continue
            self.now, _, kind, payload = heapq.heappop(self._events)
            if kind == "send":
                self._send(cast(Student, payload))
            elif kind == "timeout":
                self._timeout(cast(_Request, payload))
            elif kind == "loop":
                self._enter_loop(cast(_Request, payload))
            elif kind == "pump":
                self._pump()
            elif kind == "task":
                self._task_done(cast(_Worker, payload))
            elif kind == "task_arrives":
                self._task_arrives(cast(_Request, payload))
            else:
                worker, version = cast(tuple[_Worker, int], payload)
                if version == worker.version:  # an end re-timed since (another worker started or stopped) is stale
                    self._step_done(worker)
        return self.turns, max([self.plan.duration_s, *(t.end_s for t in self.turns)])

    # --- a student sends, pauses, sends again ---------------------------------------------------

    def _send(self, student: Student) -> None:
        if self.now >= self.plan.duration_s:
            return
        shape = student.next_turn()
        request = _Request(id=f"r{next(self._ids)}", student=student, shape=shape, sent_s=self.now)
        self.requests[request.id] = request
        if shape.prompt_tokens + 1 > self.plan.context_tokens:
            self._refuse(request, "context_length_exceeded", retry_after_s=0.0)
            return
        turn = fair_share.pick(self.waiting.values(), self.counters)
        if admission_rules.may_claim_directly(waiting_here=len(self.waiting), turn=turn.request if turn else None):
            if self._claim(request) not in ("busy", "held", "passed"):
                return
        self._join(request)
        self._pump()

    def _after_turn(self, student: Student, *, completed: bool, retry_after_s: float) -> None:
        pause = student.turn_ended(completed=completed, retry_after_s=retry_after_s)
        remaining = self.plan.duration_s - self.now
        if remaining > 0:
            self._at(self.now + min(pause, remaining), "send", student)

    def _refuse(self, request: _Request, reason: str, *, retry_after_s: float) -> None:
        self.turns.append(Turn(student=request.student.name, persona=request.student.persona, sent_s=request.sent_s,
                               end_s=self.now, completed=False, refused_reason=reason,
                               queue_wait_s=self.now - request.sent_s, request_id=request.id))
        self._after_turn(request.student, completed=False, retry_after_s=retry_after_s)

    # --- the gateway: the line, the ranking, the slot -------------------------------------------

    def _claim(self, request: _Request) -> str:
        """'claimed', 'refused' (no worker could ever serve it), 'held' (it waits for its
        conversation's worker: admission_rules.affinity_hold), 'passed' (only a lane worker's slot
        is free, and this prompt is too long for it, admission_rules.passes_lane, or its student
        holds their share of that lane, lane_share_full) or 'busy'."""
        conversation = request.shape.conversation
        held = self.affinity.get(conversation) if conversation else None
        decision = scheduler.rank_workers(
            workers=[w.view for w in self.workers.values()],
            busy={number: len(w.claimed) for number, w in self.workers.items()},
            model_id=self.plan.model_id, pool_id=POOL_ID,
            affinity_worker_id=held[0] if held and held[1] > self.now else None,
            prompt_tokens_estimate=admission_rules.prompt_tokens_estimate(request.shape.prompt_bytes),
        )
        refusal = admission_rules.no_worker_refusal(decision, {})
        if refusal is not None:
            self.waiting.pop(request.id, None)
            self._refuse(request, refusal[0], retry_after_s=0.0)
            return "refused"
        hold_s = self.plan.affinity_wait_s
        if admission_rules.affinity_hold(decision, prompt_bytes=request.shape.prompt_bytes,
                                         waited_s=self.now - request.sent_s,
                                         hold_tokens=self.plan.affinity_wait_tokens, hold_s=hold_s):
            if not request.hold_ends_scheduled:  # once: the pump tries a held request again and again
                request.hold_ends_scheduled = True
                self._at(request.sent_s + hold_s, "pump", None)  # its hold ends: the line is served again
            return "held"
        if admission_rules.passes_lane(decision):
            return "passed"
        capped = False
        for candidate in admission_rules.claim_order(decision):
            worker = self.workers[candidate.worker.id]
            student = request.student.name
            if worker.view.lane_tokens and admission_rules.lane_share_full(
                    held=sum(1 for r in worker.claimed.values() if r.student.name == student), slots=worker.view.slots):
                capped = True
                continue
            first, prefer = admission_rules.lane(policy=self.plan.policy, slots=worker.view.slots,
                                                 prompt_bytes=request.shape.prompt_bytes,
                                                 light_tokens=self.plan.light_lane_tokens)
            index = slot_owners.pick_slot(capacity=worker.view.slots, used=set(worker.claimed), owners=worker.owners,
                                          student=student, conversation=conversation, first=first, prefer=prefer)
            if index is None:
                continue
            previous = worker.owners.get(index)
            own = slot_owners.holds_own_prefix(previous, student)
            tasks: list[tuple[str, int]] = []
            if not own and self.plan.slot_files:
                keep, restore = slot_owners.handover(previous, student, worker.files, light=prefer is not None,
                                                     lane_slot=index == prefer)
                if keep:
                    worker.files[keep] = worker.cache.get(index, ())
                    tasks.append(("save", sum(tokens for _, tokens in worker.files[keep])))
                if restore:
                    worker.cache[index], own = worker.files[student], True
                    tasks.append(("restore", sum(tokens for _, tokens in worker.cache[index])))
                if self.plan.shared_prefix_k:
                    counts = self._count_senders(request)  # on every handover, as the gateway counts
                    if not own:
                        own = self._shared_prefix(request, worker, index, tasks, counts)
            worker.owners[index] = slot_owners.SlotOwner(student=student, conversation=conversation,
                                                         last_used_ms=int(self.now * 1000))
            if conversation:
                self.affinity[conversation] = (worker.view.id, self.now + self.plan.affinity_ttl_s)
            self._start(request, worker, index, own_prefix=own, slot_tasks=tasks)
            return "claimed"
        return "passed" if capped else "busy"

    def _count_senders(self, request: _Request) -> list[int]:
        """Adds the request's student to the senders of its constant prefix's blocks (the gateway
        does so on every handover of a pinned slot); returns each block's distinct senders."""
        counts = []
        for name, _ in request.shape.shared:
            senders = self.senders.setdefault(name, set())
            senders.add(request.student.name)
            counts.append(len(senders))
        return counts

    def _shared_prefix(self, request: _Request, worker: _Worker, index: int, tasks: list[tuple[str, int]],
                       counts: list[int]) -> bool:
        """inference/admission/shared_prefix.prepare on a handover that restored nothing: True when the slot
        then holds the public prefix to reuse (restored from the worker's shared file); the first
        time on a worker the whole prompt is computed and the public part saved (False)."""
        blocks = request.shape.shared
        if len(blocks) < shared_prefix.MIN_PUBLIC_BLOCKS:
            return False
        public = shared_prefix.public_blocks(counts, self.plan.shared_prefix_k)
        if not public:
            return False
        name, held = blocks[public - 1]
        tokens = sum(count for _, count in held)
        if name in worker.shared_files:
            worker.cache[index] = held
            tasks.append(("restore", tokens))
            return True
        worker.shared_files.add(name)
        tasks.append(("save", tokens))
        return False

    def _join(self, request: _Request) -> None:
        student = request.student
        policy = self.plan.policy
        if not any(w.student == student.name for w in self.waiting.values()):
            self.counters[student.name] = fair_share.lifted(self.counters, self.waiting.values(), student.name)
        conversation = request.shape.conversation
        held = self.affinity.get(conversation) if conversation else None
        self.waiting[request.id] = fair_share.Waiting(
            request=request.id, student=student.name, arrived=self.now, weight=student.weight,
            cost=admission_rules.estimate_charge(policy, prompt_bytes=request.shape.prompt_bytes,
                                                 weight=student.weight),
            worker=held[0] if held and held[1] > self.now else None)
        request.in_line = True
        request.deadline = admission_rules.wait_deadline(started=self.now, max_wait_s=self.plan.max_wait_s)
        self._at(request.deadline, "timeout", request)

    def _pump(self) -> None:
        """Serve the line while a request in its order can claim a slot (the production pump's
        loop: one holding for its conversation's worker, or too long for the free lane worker's
        slot, lets the next one in)."""
        while self.waiting:
            for turn in self._line_order():
                request = self.requests[turn.request]
                outcome = self._claim(request)
                if outcome in ("held", "passed"):
                    continue
                break
            else:
                return
            if outcome == "busy":
                return
            self.waiting.pop(turn.request, None)
            request.in_line = False
            if outcome == "claimed":
                amount = admission_rules.estimate_charge(self.plan.policy, prompt_bytes=request.shape.prompt_bytes,
                                                         weight=request.student.weight)
                self.counters[turn.student] = self.counters.get(turn.student, 0.0) + amount
                request.charged_policy, request.charged = self.plan.policy, amount

    def _line_order(self) -> list[fair_share.Waiting]:
        """The line's order under the plan's policy: "local" (fair_share.order_local) puts first
        the requests whose conversation's worker has a free slot, within the plan's bound."""
        if self.plan.policy != "local":
            return fair_share.order(self.waiting.values(), self.counters)
        free = [number for number, w in self.workers.items() if len(w.claimed) < w.view.slots]
        return fair_share.order_local(self.waiting.values(), self.counters, free_workers=free,
                                      bound=self.plan.local_bound)

    def _timeout(self, request: _Request) -> None:
        if not request.in_line or request.deadline is None:
            return
        if not admission_rules.timed_out(deadline=request.deadline, now=self.now):
            return
        self.waiting.pop(request.id, None)
        request.in_line = False
        self._refuse(request, "queue_timeout",
                     retry_after_s=admission_rules.queue_timeout_retry_after_s(self.plan.slot_lease_s))

    # --- the worker: llama-server's loop --------------------------------------------------------

    def _start(self, request: _Request, worker: _Worker, index: int, *, own_prefix: bool,
               slot_tasks: Sequence[tuple[str, int]] = ()) -> None:
        prompt = request.shape.prompt_tokens
        held = worker.cache.get(index, ())
        found = cached_prefix_tokens(held, request.shape.segments) if own_prefix else 0
        request.reused = min(found, max(prompt - 1, 0))
        request.prefill_left = max(prompt - request.reused, 1)
        request.decode_left = max(request.shape.output_tokens, 1) - 1
        request.worker_id, request.slot, request.claimed_s = worker.view.id, index, self.now
        worker.claimed[index] = request
        worker.cache[index] = request.shape.segments
        if slot_tasks:  # the save and the restore go through the loop's queue first, one after the other
            request.slot_tasks = list(slot_tasks)
            self._task_arrives(request)
        else:
            self._send_prompt(request, worker)

    def _send_prompt(self, request: _Request, worker: _Worker) -> None:
        self._at(self.now + worker.cost.overhead_s, "loop", request)

    def _task_arrives(self, request: _Request) -> None:
        """`request`'s next slot file task reaches its worker's queue: llama-server runs it at once
        when idle, after the step in progress otherwise, and in the run of tasks under way if one is
        (its queue runs every task it holds, those arriving meanwhile too, before its next step)."""
        assert request.worker_id is not None
        worker = self.workers[request.worker_id]
        worker.slot_tasks.append(request)
        if not worker.stepping and not worker.tasking:
            self._run_tasks(worker)

    def _run_tasks(self, worker: _Worker) -> None:
        """Runs the queue's slot file tasks one by one (each CostModel.slot_task_s: the file written
        or read in the loop's thread), then the loop's next step. A request whose task ran sends its
        next one (the restore after the save's answer) or its prompt; that one finds the loop in the
        run still under way if the queue held more, and otherwise waits for the next step's end.
        Tasks that cost nothing run in this instant, so with CostModel's defaults a task on a busy
        worker waits one step, and an idle worker's run at once."""
        while worker.slot_tasks:
            request = worker.slot_tasks[0]
            kind, tokens = request.slot_tasks[0]
            seconds = worker.cost.slot_task_s(kind, tokens)
            worker.tasking = True
            if seconds > 0:
                self._at(self.now + seconds, "task", worker)
                return
            self._task_ran(worker)
        worker.tasking = False
        self._begin_step(worker)

    def _task_done(self, worker: _Worker) -> None:
        self._task_ran(worker)
        self._run_tasks(worker)

    def _task_ran(self, worker: _Worker) -> None:
        request = worker.slot_tasks.pop(0)
        request.slot_tasks.pop(0)
        if request.slot_tasks:  # the gateway sends the next task once this one has answered
            self._at(self.now, "task_arrives", request)
        else:
            self._send_prompt(request, worker)

    def _enter_loop(self, request: _Request) -> None:
        assert request.worker_id is not None
        worker = self.workers[request.worker_id]
        worker.running.append(request)
        # llama-server's loop takes every task queued before it builds a batch: requests reaching an
        # idle worker at one instant (claimed together when slots freed together) share a batch, and
        # which of them the event queue happened to hand over first must not decide that.
        if not worker.stepping and not worker.tasking and worker not in self._idle_entered:
            self._idle_entered.append(worker)

    def _begin_step(self, worker: _Worker) -> None:
        generating = sorted((r for r in worker.running if r.first_token_s is not None), key=lambda r: r.slot or 0)
        room = worker.cost.batch_tokens - len(generating)
        step: list[tuple[_Request, int]] = [(r, 0) for r in generating]
        batch = [Piece(r.slot or 0, 1, r.shape.prompt_tokens + r.generated, decode=True) for r in generating]
        # llama-server fills the batch's room with prompt chunks slot by slot, in slot order.
        for request in sorted(worker.running, key=lambda r: r.slot or 0):
            if request.first_token_s is None and room > 0:
                chunk = min(request.prefill_left, room)
                room -= chunk
                batch.append(Piece(request.slot or 0, chunk, request.shape.prompt_tokens - request.prefill_left))
                step.append((request, chunk))
        if not step:
            if worker.stepping:
                worker.stepping = False
                self._retime()  # one fewer worker computing: the others speed up
            return
        seconds = worker.cost.step_s(batch, streams=worker.view.slots, cache_type=self.plan.cache_type)
        jitter = worker.cost.jitter
        if self._noise is not None and jitter > 0:  # log-normal, mean 1: noise, not a bias
            sigma = math.sqrt(math.log(1 + jitter * jitter))
            seconds *= self._noise.lognormvariate(-sigma * sigma / 2, sigma)
        started = not worker.stepping
        worker.stepping, worker.step = True, step
        worker.work_left, worker.since = seconds, self.now
        worker.rate = worker.cost.rate(self._computing() - 1)
        worker.version += 1
        self._at(self.now + seconds / worker.rate, "step", (worker, worker.version))
        if started:
            self._retime()  # one more worker computing: the others slow down

    def _computing(self) -> int:
        return sum(1 for w in self.workers.values() if w.stepping)

    def _retime(self) -> None:
        """The number of workers computing changed: every step in progress keeps the work it has
        done at its old rate and ends when the rest is done at its new one (processor sharing among
        workers that share compute; with contention 0 every rate stays 1 and nothing moves)."""
        computing = self._computing()
        for worker in self.workers.values():
            if not worker.stepping:
                continue
            rate = worker.cost.rate(computing - 1)
            if rate == worker.rate:
                continue
            worker.work_left = max(0.0, worker.work_left - (self.now - worker.since) * worker.rate)
            worker.since, worker.rate = self.now, rate
            worker.version += 1
            self._at(self.now + worker.work_left / rate, "step", (worker, worker.version))

    def _step_done(self, worker: _Worker) -> None:
        freed = False
        for request, chunk in worker.step:
            if chunk:
                request.prefill_left -= chunk
                if request.prefill_left <= 0:
                    request.first_token_s, request.generated = self.now, 1
                    if request.decode_left <= 0:
                        self._finish(worker, request)
                        freed = True
            else:
                request.decode_left -= 1
                request.generated += 1
                if request.decode_left <= 0:
                    self._finish(worker, request)
                    freed = True
        worker.step = []
        if worker.slot_tasks:  # the queue's tasks run between this step and the next
            worker.stepping = False
            self._retime()
            self._run_tasks(worker)
        else:
            self._begin_step(worker)
        if freed:
            self._pump()

    def _finish(self, worker: _Worker, request: _Request) -> None:
        worker.running.remove(request)
        assert request.slot is not None
        worker.claimed.pop(request.slot, None)
        shape, student = request.shape, request.student
        if shape.answer_key and worker.cache.get(request.slot) == shape.segments:
            # llama-server's KV holds the prompt and every generated token but the last one sampled
            # (measured: a next turn found the prompt and 8 of a 9-token answer cached)
            worker.cache[request.slot] = (*shape.segments, (shape.answer_key, max(request.generated - 1, 0)))
        computed = shape.prompt_tokens - request.reused
        self.counters[student.name] = self.counters.get(student.name, 0.0) + admission_rules.settle_amount(
            self.plan.policy, charged_policy=request.charged_policy, charged=request.charged,
            computed_prompt_tokens=computed, output_tokens=request.generated, weight=student.weight)
        assert request.claimed_s is not None
        self.turns.append(Turn(
            student=student.name, persona=student.persona, sent_s=request.sent_s, end_s=self.now,
            first_token_s=request.first_token_s, completed=True, prompt_tokens=shape.prompt_tokens,
            reused_prompt_tokens=request.reused, output_tokens=request.generated,
            queue_wait_s=request.claimed_s - request.sent_s, worker=worker.view.name, request_id=request.id))
        self._after_turn(student, completed=True, retry_after_s=0.0)


def simulate(*, plan: FleetPlan, costs: Sequence[CostModel], students: Sequence[Student]) -> tuple[list[Turn], float]:
    """Runs `students` against `plan`'s fleet (worker i steps by `costs[i]`); returns the turns
    (research.class_metrics.Turn, the class replay's records) and the run's duration in seconds."""
    return Simulation(plan=plan, costs=costs, students=students).run()
