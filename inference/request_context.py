"""The request's context: the one object that carries an API request through the pipeline."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from inference.admission.rules import prompt_tokens_estimate
from inference.protocols.base import Shape
from inference.request_log import request_log
from inference.usage import Usage

# A request's steps, in the order it reaches them; each kept as the time since its arrival.
# authenticated: its key known; admitted: its limits passed (a ticket); slot_claimed: a worker's
# slot is its own (the last claim, after a failover); upstream_first_byte: the worker's first
# chunk (a stream) or whole answer; client_first_byte: its first byte handed to the server.
STEPS = ("authenticated", "admitted", "slot_claimed", "upstream_first_byte", "client_first_byte")

if TYPE_CHECKING:  # annotations only: admission and the quota gate use this module's type
    from accounts.key_cache import KeyIdentity
    from accounts.limits.gate import Ticket
    from inference.admission.line import Slot, Want


@dataclass
class RequestContext:
    """One request's context on its way through inference/pipeline.py: who, what, where it ran,
    what it cost, and what it holds (its place in the queue, its quota ticket, its slot). Filled
    in along the way; the pipeline's `end()` releases what it holds, settles its reservation and
    `submit`s its log row once."""

    client: str
    path: str
    # Sent back as X-Request-Id and kept on the row: the class replay joins what a student saw to
    # what the worker counted (cached tokens) by it, on the control plane.
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    shape: Shape = field(default_factory=Shape)  # what the request carried (inference/protocols/base.py)
    user_agent: str = ""
    tool: str = ""  # inference/client_tools.py
    staff: bool = False  # the key belongs to a teacher or operator
    at: datetime = field(default_factory=timezone.now)
    started: float = field(default_factory=time.monotonic)
    user_id: int | None = None
    key_id: int | None = None
    pool: str = ""
    model: str = ""
    stream: bool = False
    worker_id: int | None = None
    worker_name: str = ""
    route_reason: str = ""  # the scheduler's reason for the worker that served it
    first_byte_s: float | None = None
    usage: Usage = field(default_factory=Usage)
    served: bool = False  # a worker answered (tokens may have been generated)
    want: Want | None = None
    ticket: Ticket | None = None
    # The worker slot last claimed for it. Who frees a slot: dispatch, when it gives up the slot
    # before an answer is handed over (a failure, failover, a refusal or the client leaving);
    # otherwise the request's end (`end()` in inference/pipeline.py), with the rest of the end in
    # one round trip.
    slot: Slot | None = None
    stream_error: str = ""  # an error event sent after the 200 (worker died mid-answer, queue timeout)
    fallback: str = ""  # why another model than the one asked for answered ("budget"); sent as x-ocs-fallback
    # The worker's end marker has been handed on: a client that closes after this point (the
    # OpenAI SDK closes as soon as it reads `data: [DONE]`) had the whole answer.
    answer_delivered: bool = False
    finished: bool = False
    # Seconds since `started` at which it reached each of STEPS it reached (monotonic clock).
    steps_s: dict[str, float] = field(default_factory=dict)

    def reached(self, step: str) -> None:
        """Note that the request has reached `step` (one of STEPS) now; a step reached again
        (a second authentication, a failover's claim) keeps its latest time."""
        self.steps_s[step] = time.monotonic() - self.started

    def step_durations_s(self) -> list[tuple[str, float]]:
        """Each step reached, with the seconds since the step before it (or arrival), in order."""
        durations, previous = [], 0.0
        for step in STEPS:
            at = self.steps_s.get(step)
            if at is not None:
                durations.append((step, max(0.0, at - previous)))
                previous = max(previous, at)
        return durations

    def identify(self, identity: KeyIdentity) -> None:
        self.user_id, self.key_id, self.pool = identity.user_id, identity.key_id, identity.pool_name
        self.staff = identity.is_staff

    def served_by(self, worker_id: int, worker_name: str, first_byte_s: float) -> None:
        self.served = True
        self.worker_id, self.worker_name, self.first_byte_s = worker_id, worker_name, first_byte_s

    def estimate_unreported_usage(self) -> None:
        """A worker answered but its counts never arrived (the client left, or the worker died,
        mid-stream): the request is charged and logged for what it cost, as the gateway knows it.
        The prompt by the byte estimate (the worker computed it before its first byte), the output
        as the content events relayed; marked as estimated."""
        if not self.served or self.usage.reported:
            return
        self.usage.prompt_tokens = prompt_tokens_estimate(self.want.prompt_bytes if self.want else 0)
        self.usage.completion_tokens = self.usage.relayed_tokens
        self.usage.estimated = True

    def served_tokens(self) -> int | None:
        """Tokens to charge: the worker's count (or, for a stream cut short, the estimate
        estimate_unreported_usage made); 0 if no worker answered; None if one answered and
        nothing is known, so the reservation stands."""
        if self.usage.reported:
            return self.usage.total
        return None if self.served else 0

    def submit(self, *, status: int, error_code: str = "") -> None:
        """Hand the row to the batch writer (no database work here)."""
        request_log().submit(self.row(status=status, error_code=error_code))

    def row(self, *, status: int, error_code: str) -> dict[str, Any]:
        want = self.want
        return {
            "at": self.at,
            "request_id": self.request_id,
            "user_id": self.user_id,
            "key_id": self.key_id,
            "pool": self.pool[:50],
            "model": self.model[:100],
            "worker_id": self.worker_id,
            "worker_name": self.worker_name[:100],
            "route_reason": self.route_reason[:200],
            "client": self.client,
            "user_agent": self.user_agent[:200],
            "tool": self.tool,
            "tools_n": min(self.shape.tools, 32_767),
            "system_chars": self.shape.system_chars,
            "turns": min(self.shape.turns, 32_767),
            "conversation": (want.conversation or "")[:32] if want else "",
            "path": self.path[:100],
            "stream": self.stream,
            "status": status,
            "error_code": error_code[:50],
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "usage_estimated": self.usage.estimated,
            "queue_wait_ms": round((want.queued_s if want else 0.0) * 1000),
            "ttft_ms": None if self.first_byte_s is None else round(self.first_byte_s * 1000),
            "total_ms": round((time.monotonic() - self.started) * 1000),
            "tokens_per_s": self.usage.predicted_per_second,
            "prompt_tokens_per_s": self.usage.prompt_per_second,
            "retries": len(want.failed) if want else 0,
            "steps_ms": {step: round(self.steps_s[step] * 1000, 2) for step in STEPS if step in self.steps_s},
        }
