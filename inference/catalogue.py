"""Which catalogue model a request names, checked before anything records it.

The client's `model` string is only a request: until it is found in the catalogue (served by a
worker of the key's pool or of a pool that lends to it, and allowed for the student), it
appears in no metric label and no log row, so random names cost nothing and grow nothing.
"""
from __future__ import annotations

from django.conf import settings

from accounts.key_cache import KeyIdentity
from accounts.limits.gate import BUDGET_CODES, check_access
from core import errors
from fleet.scheduler import serves_model
from fleet.selectors import FleetSnapshot, ModelView, fleet_snapshot, models_for_pool, usable_pool_ids


def _served(snapshot: FleetSnapshot, model_id: str, pool_id: int) -> ModelView | None:
    model = snapshot.models.get(model_id)
    if model is None or not serves_model(snapshot.workers, model_id=model_id,
                                         pool_ids=usable_pool_ids(snapshot, pool_id)):
        return None
    return model


async def resolve_model(model_id: str, identity: KeyIdentity, *, maps_unknown: bool = False) -> ModelView:
    """The catalogue model for `model_id`, or 404 model_not_found. With `maps_unknown`
    (Anthropic's route), an unknown claude-* name — Claude Code's built-in agents ask for
    claude-haiku-… — goes to OCS_ANTHROPIC_DEFAULT_MODEL, or the pool's first model."""
    snapshot = await fleet_snapshot(pool_id=identity.pool_id)
    model = _served(snapshot, model_id, identity.pool_id)
    if model is None:
        snapshot = await fleet_snapshot(fresh=True)  # a worker may have registered just now
        model = _served(snapshot, model_id, identity.pool_id)
    if model is None and maps_unknown and model_id.startswith("claude-"):
        default = settings.OCS["ANTHROPIC_DEFAULT_MODEL"]
        if default:
            model = _served(snapshot, default, identity.pool_id)
        else:
            served = [m for m in models_for_pool(snapshot, identity.pool_id)
                      if identity.policy.allows_model(m.public_id)]
            model = served[0] if served else None
    if model is None:
        raise errors.model_not_found(model_id[:200])
    return model


async def budget_fallback(refused: errors.ApiError, identity: KeyIdentity, model_id: str) -> ModelView:
    """The model that serves a student whose token budget is spent (OCS_BUDGET_FALLBACK_MODEL),
    if it is another model, served for the key's pool and allowed for the student; otherwise
    the refusal stands (re-raised)."""
    fallback = settings.OCS["BUDGET_FALLBACK_MODEL"]
    if refused.code not in BUDGET_CODES or not fallback or fallback == model_id:
        raise refused
    try:
        model = await resolve_model(fallback, identity)
        check_access(identity, model.public_id)
    except errors.ApiError:
        raise refused from None
    return model
