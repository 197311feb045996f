"""State changes of the fleet."""
from __future__ import annotations

from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from fleet.models import CatalogModel, Pool, Worker, WorkerEvent
from fleet.signals import teacher_action


def catalog_model_ensure(*, public_id: str, context_length: int | None = None) -> CatalogModel:
    """The catalogue entry for a model id. Its advertised context length is the smallest any of
    its workers reported: clients (Copilot sizes its prompts from it) must fit on every worker."""
    context = context_length or 8192
    model, created = CatalogModel.objects.get_or_create(
        public_id=public_id,
        # A small model asked for no max_tokens must not fill its whole context.
        defaults={"context_length": context, "max_output_tokens": min(4096, max(256, context // 2))},
    )
    if not created and context_length and context_length < model.context_length:
        model.context_length = context_length
        model.save(update_fields=["context_length"])
    return model


# States a restart resets to `starting`: a teacher's draining/disabled stay as they are.
RESTARTABLE_STATES = frozenset({Worker.State.HEALTHY, Worker.State.DEGRADED, Worker.State.DOWN})


def worker_register(
    *,
    name: str,
    base_url: str,
    model_id: str,
    pool_name: str,
    slots: int = 1,
    context_length: int | None = None,
    state: str = Worker.State.STARTING,
    keep_pool: bool = False,
    process_started_at: datetime | None = None,
    ensure_catalogue: bool = True,
    api_key: str | None = None,
    lane_tokens: int | None = None,
) -> Worker:
    """Create or update a worker by name. Re-registering a worker is how a restarted one returns:
    it is `starting` again (whatever the last run left in its row) until a probe says it serves.
    Pass state=HEALTHY only when the caller has just seen /health answer 200 itself. With the
    default (STARTING), a worker a teacher drained or disabled keeps that state; another state
    given explicitly is applied. With keep_pool, an existing worker stays in the pool a teacher
    may have moved it to. `process_started_at` is when its llama-server process started, if
    known: the cold start recorded when it turns healthy runs from it (unknown: from when the
    worker became `starting`; given HEALTHY, none is recorded).

    With ensure_catalogue=False (a rig agent's report: fleet/rigs.py), the pool and the
    catalogue model must exist already and the catalogue is left as it is: its context length is
    never lowered to the worker's; the caller checked they exist.

    `lane_tokens`: a lane worker's limit (fleet/scheduler.py; 0: an ordinary worker); None leaves
    an existing worker's as it is (a new one is ordinary).

    `api_key` is the key the worker's llama-server was launched with (fleet/worker_keys.py); the
    gateway sends it from now on. None leaves an existing worker's key as it is."""
    if ensure_catalogue:
        pool, _ = Pool.objects.get_or_create(name=pool_name)
        model = catalog_model_ensure(public_id=model_id, context_length=context_length)
    else:
        pool = Pool.objects.filter(name=pool_name).first() or Pool.objects.get_default()
        model = CatalogModel.objects.get(public_id=model_id)
    with transaction.atomic():
        worker, created = Worker.objects.select_for_update().get_or_create(
            name=name,
            defaults={"base_url": base_url.rstrip("/"), "pool": pool, "model": model, "slots": slots,
                      "state": Worker.State.STARTING, "process_started_at": process_started_at,
                      "context_per_slot": context_length, "api_key": api_key or "",
                      "lane_tokens": lane_tokens or 0},
        )
        if created:
            WorkerEvent.objects.create(worker=worker, from_state=Worker.State.STARTING,
                                       to_state=Worker.State.STARTING, reason="registered")
        else:
            worker.base_url = base_url.rstrip("/")
            if not keep_pool:
                worker.pool = pool
            worker.model = model
            worker.slots = slots
            worker.context_per_slot = context_length or worker.context_per_slot
            fields = ["base_url", "pool", "model", "slots", "context_per_slot"]
            if lane_tokens is not None:
                worker.lane_tokens = lane_tokens
                fields.append("lane_tokens")
            if api_key is not None:
                worker.api_key = api_key
                fields.append("api_key")
            if process_started_at is not None:
                worker.process_started_at = process_started_at
                fields.append("process_started_at")
            worker.save(update_fields=fields)
            if worker.state in RESTARTABLE_STATES or (state != Worker.State.STARTING and worker.state != state):
                worker_set_state(worker=worker, state=Worker.State.STARTING,
                                 reason="re-registered: starting until a probe says it serves")
        if state != Worker.State.STARTING and worker.state != state:
            # Through `starting`, so that a worker the caller saw healthy gets its cold start.
            # A server found already running (register_worker) has no known cold start.
            worker_set_state(worker=worker, state=state,
                             reason="/health: 200" if state == Worker.State.HEALTHY else "registered",
                             record_cold_start=process_started_at is not None)
    return worker


def worker_set_state(*, worker: Worker, state: str, reason: str, record_cold_start: bool = True) -> bool:
    """Move a worker to `state`, recording the transition. Returns False if it was already there.
    starting -> healthy records the cold start: seconds from its process start (or, unknown, from
    when it became `starting`) to this first healthy probe."""
    if worker.state == state:
        return False
    previous = worker.state
    now = timezone.now()
    cold_start_s = None
    if record_cold_start and previous == Worker.State.STARTING and state == Worker.State.HEALTHY:
        since = worker.process_started_at or worker.state_changed_at
        cold_start_s = max(0.0, (now - since).total_seconds())
        reason = f"{reason}; cold start {cold_start_s:.1f} s (process start to first healthy probe)"
    fields = ["state", "state_changed_at"]
    if state == Worker.State.STARTING and (worker.process_started_at is None
                                           or worker.process_started_at < worker.state_changed_at):
        # The recorded start is an older process's (it predates the last transition): the cold
        # start of the one loading now is counted from here.
        worker.process_started_at = now
        fields.append("process_started_at")
    worker.state = state
    worker.state_changed_at = now
    worker.save(update_fields=fields)
    WorkerEvent.objects.create(worker=worker, at=now, from_state=previous, to_state=state, reason=reason[:300],
                               cold_start_s=cold_start_s)
    return True


def worker_process_started(*, worker: Worker, pid: int, started_at: datetime) -> bool:
    """The agent reports a llama-server process with a new pid: the old one ended and a new
    one loads its model. A worker that was serving goes back to `starting` (the gateway sends it
    nothing until a probe says it serves). Returns True if its state changed."""
    if worker.process_pid == pid:
        return False
    # A row with no pid yet (just registered, or older than this field) is not a restart.
    restarted = worker.process_pid is not None
    worker.process_pid = pid
    worker.process_started_at = started_at
    worker.save(update_fields=["process_pid", "process_started_at"])
    if restarted and worker.state in RESTARTABLE_STATES:
        return worker_set_state(worker=worker, state=Worker.State.STARTING,
                                reason=f"llama-server restarted (pid {pid}): starting until a probe says it serves")
    return False


def worker_move(*, worker: Worker, pool: Pool, actor: AbstractBaseUser | None = None) -> Worker:
    """Move a worker to another pool; its in-flight requests finish where they are."""
    if worker.pool_id != pool.id:
        previous = worker.pool.name
        worker.pool = pool
        worker.save(update_fields=["pool"])
        reason = f"moved from pool {previous} to {pool.name}"
        WorkerEvent.objects.create(worker=worker, from_state=worker.state, to_state=worker.state, reason=reason)
        teacher_action.send(sender=Worker, actor=actor, action="worker.moved", subject=worker.name, detail=reason)
    return worker


def _teacher_sets_state(*, worker: Worker, state: str, action: str, actor: AbstractBaseUser | None) -> bool:
    verb = action.split(".")[1]
    changed = worker_set_state(worker=worker, state=state,
                               reason=f"{verb} by {actor.get_username() if actor else 'an operator'}")
    if changed:
        teacher_action.send(sender=Worker, actor=actor, action=action, subject=worker.name, detail="")
    return changed


def worker_drain(*, worker: Worker, actor: AbstractBaseUser | None = None) -> bool:
    """No new requests; those in flight finish (their slots are leases, untouched here)."""
    return _teacher_sets_state(worker=worker, state=Worker.State.DRAINING, action="worker.drained", actor=actor)


def worker_disable(*, worker: Worker, actor: AbstractBaseUser | None = None) -> bool:
    return _teacher_sets_state(worker=worker, state=Worker.State.DISABLED, action="worker.disabled", actor=actor)


def worker_enable(*, worker: Worker, actor: AbstractBaseUser | None = None) -> bool:
    """Back under the monitor's care: `starting` until its first good probe makes it healthy."""
    if worker.state not in {Worker.State.DRAINING, Worker.State.DISABLED}:
        return False
    return _teacher_sets_state(worker=worker, state=Worker.State.STARTING, action="worker.enabled", actor=actor)


def worker_set_lane(*, worker: Worker, lane_tokens: int) -> None:
    """Keep a worker for prompts of at most `lane_tokens` tokens (a lane worker), or 0: any prompt.
    The gateways see it with their next fleet snapshot (OCS_FLEET_CACHE_TTL_S). A rig's worker
    takes its rig config's figure again when its agent next registers."""
    worker.lane_tokens = max(0, lane_tokens)
    worker.save(update_fields=["lane_tokens"])
