"""State changes of the fleet."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.audit import audit_record
from accounts.models import User
from fleet.models import CatalogModel, Pool, Worker, WorkerEvent


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
) -> Worker:
    """Create or update a worker by name. Re-registering a worker is how a restarted one returns.
    With keep_pool, an existing worker stays in the pool a teacher may have moved it to."""
    pool, _ = Pool.objects.get_or_create(name=pool_name)
    model = catalog_model_ensure(public_id=model_id, context_length=context_length)
    with transaction.atomic():
        worker, created = Worker.objects.select_for_update().get_or_create(
            name=name,
            defaults={"base_url": base_url.rstrip("/"), "pool": pool, "model": model, "slots": slots, "state": state,
                      "context_per_slot": context_length},
        )
        if not created:
            worker.base_url = base_url.rstrip("/")
            if not keep_pool:
                worker.pool = pool
            worker.model = model
            worker.slots = slots
            worker.context_per_slot = context_length or worker.context_per_slot
            worker.save(update_fields=["base_url", "pool", "model", "slots", "context_per_slot"])
            if worker.state != state:
                worker_set_state(worker=worker, state=state, reason="re-registered")
        else:
            WorkerEvent.objects.create(worker=worker, from_state=state, to_state=state, reason="registered")
    return worker


def worker_set_state(*, worker: Worker, state: str, reason: str) -> bool:
    """Move a worker to `state`, recording the transition. Returns False if it was already there."""
    if worker.state == state:
        return False
    previous = worker.state
    worker.state = state
    worker.state_changed_at = timezone.now()
    worker.save(update_fields=["state", "state_changed_at"])
    WorkerEvent.objects.create(worker=worker, from_state=previous, to_state=state, reason=reason[:300])
    return True


def worker_move(*, worker: Worker, pool: Pool, actor: User | None = None) -> Worker:
    """Move a worker to another pool; its in-flight requests finish where they are."""
    if worker.pool_id != pool.id:
        previous = worker.pool.name
        worker.pool = pool
        worker.save(update_fields=["pool"])
        reason = f"moved from pool {previous} to {pool.name}"
        WorkerEvent.objects.create(worker=worker, from_state=worker.state, to_state=worker.state, reason=reason)
        audit_record(actor=actor, action="worker.moved", subject=worker.name, detail=reason)
    return worker


def _teacher_sets_state(*, worker: Worker, state: str, action: str, actor: User | None) -> bool:
    verb = action.split(".")[1]
    changed = worker_set_state(worker=worker, state=state,
                               reason=f"{verb} by {actor.username if actor else 'an operator'}")
    if changed:
        audit_record(actor=actor, action=action, subject=worker.name)
    return changed


def worker_drain(*, worker: Worker, actor: User | None = None) -> bool:
    """No new requests; those in flight finish (their slots are leases, untouched here)."""
    return _teacher_sets_state(worker=worker, state=Worker.State.DRAINING, action="worker.drained", actor=actor)


def worker_disable(*, worker: Worker, actor: User | None = None) -> bool:
    return _teacher_sets_state(worker=worker, state=Worker.State.DISABLED, action="worker.disabled", actor=actor)


def worker_enable(*, worker: Worker, actor: User | None = None) -> bool:
    """Back under the monitor's care: `starting` until its first good probe makes it healthy."""
    if worker.state not in {Worker.State.DRAINING, Worker.State.DISABLED}:
        return False
    return _teacher_sets_state(worker=worker, state=Worker.State.STARTING, action="worker.enabled", actor=actor)
