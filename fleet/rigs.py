"""Rigs and their agents: tokens, registration, heartbeats. State changes only."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.keys import RIG_SCHEME, generate_key, hash_matches, parse_prefix
from fleet.models import CatalogModel, Gpu, Pool, Rig, Worker
from fleet.rig_jobs import jobs_orphaned
from fleet.services import worker_process_started, worker_register, worker_set_state
from fleet.worker_keys import worker_key_new

PROCESS_DOWN_STATES = {"backoff", "crashed", "stopped"}
PROCESS_UP_STATES = {"starting", "running"}
ROUTABLE_OR_STARTING = {Worker.State.STARTING, Worker.State.HEALTHY, Worker.State.DEGRADED}
MEASURING_HEARTBEAT_S = 1.0  # GPU readings during a run: one a second, whatever the rig's heartbeat_s


def rig_create(*, name: str, address: str) -> tuple[Rig, str]:
    """Create a rig (or give an existing one a new token); returns it and the raw token, shown once."""
    new = generate_key(RIG_SCHEME)
    rig, _ = Rig.objects.update_or_create(
        name=name, defaults={"address": address, "token_prefix": new.prefix, "token_hash": new.secret_hash}
    )
    return rig, new.raw


def rig_authenticate(raw_token: str) -> Rig | None:
    prefix = parse_prefix(raw_token, RIG_SCHEME)
    if prefix is None:
        return None
    rig = Rig.objects.filter(token_prefix=prefix).first()
    if rig is None or not hash_matches(raw_token, rig.token_hash):
        return None
    return rig


class RigRefused(PermissionError):
    """What a rig token may not do: name a pool or a model the teachers did not create."""


def capped_context(reported: int | None, *, catalogue: int) -> int | None:
    """The context per slot a rig's worker is routed and advertised with: what the rig reports,
    never more than the catalogue's context length (the teacher's figure, which clients are told
    and a report never changes), so a rig cannot make the gateway promise more than the teacher
    set. None (not reported) stays unknown."""
    return min(reported, catalogue) if reported else None


def _check_declaration(*, rig: Rig, spec: dict[str, Any], existing: Worker | None) -> CatalogModel:
    """Rig agents report, teachers decide: a rig serves only catalogue models and, for a new
    worker, joins only a pool that exists (its pool is the teacher's to change afterwards).
    Returns the worker's catalogue model."""
    model = CatalogModel.objects.filter(public_id=spec["model_id"]).first()
    if model is None:
        raise RigRefused(f"worker {spec['name']!r}: model {spec['model_id']!r} is not in the catalogue; a teacher "
                         f"adds it first (manage.py create_rig {rig.name} --model {spec['model_id']}, or the admin)")
    pool = spec.get("pool") or settings.OCS["DEFAULT_POOL"]
    if pool == settings.OCS["DEFAULT_POOL"]:
        Pool.objects.get_default()  # the installation's own pool (OCS_DEFAULT_POOL), always there
    elif existing is None and not Pool.objects.filter(name=pool).exists():
        raise RigRefused(f"worker {spec['name']!r}: pool {pool!r} does not exist; a teacher creates it first "
                         f"(manage.py create_rig {rig.name} --pool {pool}, or the admin)")
    return model


@transaction.atomic
def rig_register(*, rig: Rig, agent_version: str, workers: list[dict[str, Any]]) -> list[Worker]:
    """The agent declares its workers. Base URLs come from the rig's address as the teacher set
    it, never from the agent, so a compromised agent cannot point the gateway elsewhere. A
    worker that left the rig's config is taken out of service. Pools and catalogue models come
    from the teachers' side only (RigRefused otherwise), and what a rig reports never changes
    the catalogue (its context length stays the teacher's, and caps the worker's).

    Every worker gets a new key (fleet/worker_keys.py), returned on its row as `api_key` for the
    agent's answer: a registration is an agent that has just started, which launches its
    llama-servers with the keys it receives, so the previous keys stop working."""
    rig.agent_version = agent_version[:50]
    rig.last_heartbeat_at = timezone.now()
    rig.save(update_fields=["agent_version", "last_heartbeat_at"])
    jobs_orphaned(rig=rig, reason="the rig agent restarted before it finished; it starts every worker again")
    registered = []
    for spec in workers:
        existing = Worker.objects.filter(name=spec["name"]).first()
        if existing is not None and existing.rig_id != rig.id:
            # A rig manages only the workers it created: not another rig's, and not one a
            # teacher registered by hand (rig None), which a token could otherwise repoint.
            owner = f"rig {existing.rig.name}" if existing.rig is not None else "no rig (registered by hand)"
            raise PermissionError(f"worker {spec['name']!r} belongs to {owner}, not to rig {rig.name}")
        model = _check_declaration(rig=rig, spec=spec, existing=existing)
        worker = worker_register(
            name=spec["name"],
            base_url=f"http://{rig.address}:{spec['port']}",
            model_id=spec["model_id"],
            pool_name=spec.get("pool") or settings.OCS["DEFAULT_POOL"],
            slots=spec["slots"],
            context_length=capped_context(spec.get("context_per_slot"), catalogue=model.context_length),
            keep_pool=True,
            ensure_catalogue=False,
            api_key=worker_key_new(),
            lane_tokens=spec.get("lane_tokens", 0),
        )
        worker.rig = rig
        worker.gpu_indices = list(spec.get("gpus") or [])
        # The model file's facts ride with the launch: runs copy it, so each run keeps the
        # facts its roofline was computed from.
        worker.launch = {**(spec.get("launch") or {}), **({"gguf": spec["gguf"]} if spec.get("gguf") else {})}
        worker.save(update_fields=["rig", "gpu_indices", "launch"])
        registered.append(worker)
    names = {w.name for w in registered}
    for gone in Worker.objects.filter(rig=rig).exclude(name__in=names):
        worker_set_state(worker=gone, state=Worker.State.DISABLED, reason="no longer in the rig agent's config")
    return registered


def sample_time(*, sampled_at: float | None, sent_at: float | None, received: datetime) -> datetime:
    """When a GPU sample was taken, on the control plane's clock. The agent stamps each sample and
    the heartbeat with its own clock; received - sent_at is the rig's clock skew plus the transit
    time, so sampled_at + that offset is never later than `received` (nor in the future), however
    wrong the rig's clock. Without the agent's stamps (an older agent): `received`."""
    if sampled_at is None or sent_at is None:
        return received
    offset_s = received.timestamp() - sent_at
    corrected = datetime.fromtimestamp(sampled_at + offset_s, tz=dt_timezone.utc)
    return min(corrected, received)


@transaction.atomic
def rig_heartbeat(*, rig: Rig, gpu_status: str, gpus: list[dict[str, Any]], workers: list[dict[str, Any]],
                  sent_at: float | None = None, rehearsal: bool = False) -> None:
    """Stores a heartbeat: the GPUs' latest readings, the workers' process states, and whether the
    rig is a rehearsal (its GPUs faked: every heartbeat says, an older agent's none = a real rig)."""
    now = timezone.now()
    rig.last_heartbeat_at = now
    rig.gpu_status = gpu_status[:200]
    rig.rehearsal = rehearsal
    rig.save(update_fields=["last_heartbeat_at", "gpu_status", "rehearsal"])
    for sample in gpus:
        fields = {k: v for k, v in sample.items() if k not in ("index", "sampled_at")}
        at = sample_time(sampled_at=sample.get("sampled_at"), sent_at=sent_at, received=now)
        Gpu.objects.update_or_create(rig=rig, index=sample["index"], defaults={**fields, "sampled_at": at})
    Gpu.objects.filter(rig=rig).exclude(index__in=[g["index"] for g in gpus]).delete()
    by_name = {w.name: w for w in Worker.objects.filter(rig=rig)}
    for report in workers:
        worker = by_name.get(report["name"])
        if worker is None:
            continue
        process_state = report["process_state"]
        changed = []
        if worker.process_state != process_state:
            worker.process_state = process_state
            changed.append("process_state")
        pruned = report.get("slot_files_pruned")
        if pruned is not None and worker.slot_files_pruned != pruned:
            worker.slot_files_pruned = pruned
            changed.append("slot_files_pruned")
        if changed:
            worker.save(update_fields=changed)
        pid = report.get("pid")
        if pid and process_state in PROCESS_UP_STATES:
            uptime_s = report.get("uptime_s") or 0.0
            worker_process_started(worker=worker, pid=pid, started_at=now - timedelta(seconds=uptime_s))
        if process_state in PROCESS_DOWN_STATES and worker.state in ROUTABLE_OR_STARTING:
            code = report.get("last_exit_code")
            worker_set_state(worker=worker, state=Worker.State.DOWN,
                             reason=f"rig agent: llama-server {process_state}"
                                    + (f" (exit code {code})" if code is not None else ""))


def rig_measuring(*, rig_id: int, for_s: float) -> None:
    """A run is measuring this rig's workers for at least `for_s` more seconds: its agent is asked
    for readings every second meanwhile (`heartbeat_pace`). Kept ahead while the run goes on, so a
    run that dies stops asking within `for_s`."""
    Rig.objects.filter(pk=rig_id).update(measuring_until=timezone.now() + timedelta(seconds=for_s))


def heartbeat_pace(rig: Rig) -> dict[str, float]:
    """What the heartbeat's answer says of the next one: {"heartbeat_s": 1.0} while a run measures
    the rig, else nothing (the agent keeps its config's heartbeat_s)."""
    if rig.measuring_until is not None and rig.measuring_until > timezone.now():
        return {"heartbeat_s": MEASURING_HEARTBEAT_S}
    return {}


def rig_workers_reset(*, rig: Rig, reason: str) -> list[str]:
    """Mark on start what the last run could not mark on stop: a rig agent (or the demo) that
    starts again takes its workers that still look routable out of service until they register
    and a probe says they serve. Returns the names changed."""
    changed = []
    for worker in Worker.objects.filter(rig=rig, state__in=ROUTABLE_OR_STARTING - {Worker.State.STARTING}):
        if worker_set_state(worker=worker, state=Worker.State.DOWN, reason=reason):
            changed.append(worker.name)
    return changed


def rigs_sweep_silent(*, silent_after_s: float) -> list[str]:
    """Workers of rigs whose agent stopped sending heartbeats are taken out of service."""
    cutoff = timezone.now() - timedelta(seconds=silent_after_s)
    changed = []
    for worker in Worker.objects.filter(rig__last_heartbeat_at__lt=cutoff, state__in=ROUTABLE_OR_STARTING):
        if worker_set_state(worker=worker, state=Worker.State.DOWN,
                            reason=f"rig agent silent for more than {silent_after_s:.0f} s"):
            changed.append(worker.name)
    return changed
