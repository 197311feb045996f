"""The class replay on the control plane: its own students and keys, the guard against replaying
over a real class, the run itself, the join with the request log, and the stored run.

The replay's students are accounts marked `is_replay`, in their own class (also marked): the
teacher's usage page and Ground 0 progress leave them out (portal/selectors.py,
lessons/selectors.py). Their limits are the run's, set on the class (not the site defaults,
which would refuse a class's load from one machine); their keys are issued for the run and
revoked when it ends, whatever happened.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from accounts.models import ApiKey, Classroom, User
from accounts.services import key_issue, key_revoke, limits_set, user_ensure
from accounts.limits.quota import concurrency_resource
from core.live import live_state
from fleet.models import CatalogModel, Pool, Worker
from fleet.scheduler import LANE_TOKENS
from inference.admission.fair_share import POLICIES
from inference.admission.live import set_fair_policy
from inference.models import RequestLog
from research.class_metrics import Turn, Weights, class_report, turn_row
from research.class_personas import roster as make_roster
from research.class_replay import ReplayPlan, SentTurn, Student, gateway_root, run_class
from research.models import BenchmarkRun
from research.services import new_group

REPLAY_CLASS = "class-replay"
# Generous on purpose: the run states its own limits so that the site's defaults (meant for one
# person) do not refuse a class's load sent from one machine. Concurrency 2: a student's client
# has one turn in flight, a second only while the first is being cancelled.
DEFAULT_LIMITS = {"requests_per_minute": 600, "tokens_per_day": 1_000_000_000, "concurrency": 2}
RECENT_REAL_S = 60.0
SERVING = (Worker.State.HEALTHY, Worker.State.DEGRADED)


class ReplayRefused(Exception):
    """The replay will not start (real students busy, a name taken by a real person)."""


@dataclass
class ReplayOptions:
    base_url: str
    mix: dict[str, int]
    duration_s: float
    scale: float = 1.0
    seed: int = 0
    policy: str = "tokens"
    weights: Weights = field(default_factory=Weights)
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    pool: str = ""
    model: str = ""
    tools_inline: bool = True
    force: bool = False
    label: str = ""
    request_log_wait_s: float = 20.0


def replay_students_ensure(*, roster: list[tuple[str, str]], limits: dict[str, int],
                           pool: Pool) -> list[tuple[User, ApiKey, str]]:
    """The replay class and its students (created or reused), the run's limits on the class, and
    one fresh key each (keys left by an interrupted run are revoked first). A real person or
    class with a replay name is never taken over: ReplayRefused."""
    classroom, _ = Classroom.objects.get_or_create(name=REPLAY_CLASS, defaults={"is_replay": True})
    if not classroom.is_replay:
        raise ReplayRefused(f"a real class is named {REPLAY_CLASS!r}; rename it to run the replay")
    limits_set(target=classroom, **limits)  # type: ignore[arg-type]
    issued = []
    for username, _persona in roster:
        user, created = user_ensure(username=username, role=User.Role.STUDENT)
        if not created and not user.is_replay:
            raise ReplayRefused(f"{username!r} is a real account; the replay will not use it")
        changed = [name for name, value in (("is_replay", True), ("classroom_id", classroom.id), ("is_active", True))
                   if getattr(user, name) != value]
        for name, value in (("is_replay", True), ("classroom_id", classroom.id), ("is_active", True)):
            setattr(user, name, value)
        if changed:
            user.save(update_fields=[name.removesuffix("_id") for name in changed])
        for stale in ApiKey.objects.filter(user=user, revoked_at__isnull=True):
            key_revoke(key=stale)
        key, raw = key_issue(user=user, name="class-replay", pool=pool)
        issued.append((user, key, raw))
    return issued


def replay_keys_revoke(keys: list[ApiKey]) -> int:
    for key in keys:
        key_revoke(key=key)
    return len(keys)


def real_students_busy(*, recent_s: float = RECENT_REAL_S) -> list[str]:
    """Why now is not a time to replay: real (not replay) students with requests running or
    waiting (their concurrency leases in live state: seen across processes with Redis, not on the
    embedded in-process default) or with requests logged in the last `recent_s` seconds."""
    people = list(User.objects.filter(is_replay=False, api_keys__revoked_at__isnull=True)
                  .values_list("id", "username").distinct())
    reasons = []
    if people:
        resources = [concurrency_resource(f"user:{user_id}") for user_id, _ in people]
        busy = asyncio.run(live_state().busy(resources))
        running = [name for (user_id, name), resource in zip(people, resources) if busy.get(resource)]
        if running:
            reasons.append(f"requests in flight for {len(running)} real student(s): {', '.join(running[:5])}")
    since = timezone.now() - timedelta(seconds=recent_s)
    recent = (RequestLog.objects.filter(at__gte=since, user__isnull=False, user__is_replay=False)
              .values_list("user__username", flat=True).distinct())
    names = sorted(set(recent))
    if names:
        reasons.append(f"{len(names)} real student(s) sent requests in the last {recent_s:.0f} s: "
                       f"{', '.join(names[:5])}")
    return reasons


def fair_policy_apply(policy: str | None) -> tuple[bool, str]:
    """Sets every gateway's fair-sharing rule through the shared live state (None: back to their
    OCS_FAIR_POLICY); (applied, note). Without Redis the gateways' live state is their own: the
    rule in force is the one they were started with (`OCS_FAIR_POLICY=requests make demo`)."""
    if not settings.REDIS_URL:
        return False, (f"policy {policy!r} recorded in config only: without Redis this command cannot reach the "
                       "gateway's in-process live state; start the gateway with OCS_FAIR_POLICY to choose its rule")
    set_fair_policy(policy)
    return True, f"policy {policy!r} set in the shared live state (fair:policy)"


def fleet_config(*, pool: Pool, model: CatalogModel) -> dict[str, Any]:
    """The workers serving the run (healthy or degraded, in the pool, with the model)."""
    workers = list(Worker.objects.filter(pool_id=pool.id, model_id=model.id, state__in=SERVING).order_by("name"))
    contexts = [w.context_per_slot for w in workers if w.context_per_slot]
    lanes = [w.lane_tokens for w in workers if w.lane_tokens]
    return {
        "workers": len(workers),
        "slots": max((w.slots for w in workers), default=0),
        "slots_total": sum(w.slots for w in workers),
        "context": min(contexts) if contexts else None,
        "worker_list": [{"name": w.name, "slots": w.slots, "context_per_slot": w.context_per_slot,
                         "lane_tokens": w.lane_tokens} for w in workers],
        # the planner reads these back (research/planner/plan.py GATEWAY_SETTINGS)
        "lane_workers": len(lanes),
        "lane_tokens": min(lanes) if lanes else LANE_TOKENS,
    }


def join_request_log(sent: list[SentTurn], *, wait_s: float) -> list[Turn]:
    """Each turn joined with its request-log row (by X-Request-Id) for the worker's counts; waits
    up to `wait_s` for the gateway's batch writer to write the rows."""
    ids = [t.request_id for t in sent if t.request_id]
    rows: dict[str, RequestLog] = {}
    deadline = time.monotonic() + wait_s
    while True:
        missing = [i for i in ids if i not in rows]
        if missing:
            rows.update({row.request_id: row for row in RequestLog.objects.filter(request_id__in=missing)})
        if len(rows) >= len(set(ids)) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    turns = []
    for one in sent:
        row = rows.get(one.request_id)
        turns.append(Turn(
            student=one.student, persona=one.persona, sent_s=one.sent_s, end_s=one.end_s,
            first_token_s=one.first_token_s, completed=one.completed, refused_reason=one.refused_reason,
            prompt_tokens=row.prompt_tokens if row else 0,
            reused_prompt_tokens=min(row.cached_tokens, row.prompt_tokens) if row else 0,
            output_tokens=(row.completion_tokens if row else 0) or one.output_chunks,
            queue_wait_s=(row.queue_wait_ms / 1000) if row else 0.0,
            worker=row.worker_name if row else "", request_id=one.request_id,
        ))
    return turns


def model_and_pool(*, pool_name: str = "", model_id: str = "") -> tuple[Pool, CatalogModel]:
    """The pool (named, or the default) and the model (named, or the first) a load runs on:
    one a healthy worker of that pool serves, else ReplayRefused."""
    pool = Pool.objects.filter(name=pool_name).first() if pool_name else Pool.objects.get_default()
    if pool is None:
        raise ReplayRefused(f"no pool named {pool_name!r}")
    served = CatalogModel.objects.filter(workers__pool_id=pool.id, workers__state__in=SERVING).distinct()
    model = served.filter(public_id=model_id).first() if model_id else served.order_by("public_id").first()
    if model is None:
        raise ReplayRefused(f"no healthy worker in pool {pool.name!r} serves "
                            f"{model_id or 'any model'}: start the workers first")
    return pool, model


def class_replay_run(options: ReplayOptions, *, say: Callable[[str], Any] = lambda _: None,
                     progress: Callable[[SentTurn], None] | None = None) -> BenchmarkRun:
    """Runs one class replay and stores it as a `class-replay` run whose summary is the replay's
    JSON (research/class_metrics.py class_report, plus `config` and the turns). Refuses while
    real students are busy unless `options.force`. Keys are revoked at the end in every case."""
    if options.policy not in POLICIES:
        raise ReplayRefused(f"--policy must be one of {', '.join(POLICIES)}")
    if not options.force:
        busy = real_students_busy()
        if busy:
            raise ReplayRefused("real students are using the gateway (--force to replay anyway): " + "; ".join(busy))
    pool, model = model_and_pool(pool_name=options.pool, model_id=options.model)
    roster = make_roster(options.mix)
    fleet = fleet_config(pool=pool, model=model)
    applied, note = fair_policy_apply(options.policy)
    say(note)
    config = {
        **fleet, "policy": options.policy, "policy_applied": applied, "policy_note": note,
        "weights": options.weights.as_dict(), "mix": options.mix, "students": len(roster),
        "duration_s": options.duration_s, "scale": options.scale, "seed": options.seed,
        "limits": options.limits, "tools_inline": options.tools_inline, "model": model.public_id,
        "pool": pool.name, "base_url": gateway_root(options.base_url), "window_s": 10,
    }
    run = BenchmarkRun.objects.create(
        kind=BenchmarkRun.Kind.CLASS_REPLAY, group=new_group(), scenario="class-replay",
        label=options.label or f"class replay {len(roster)} students, {options.policy}",
        target=BenchmarkRun.Target.GATEWAY, base_url=gateway_root(options.base_url), model=model.public_id,
        launch=config, prompt_tokens=0, output_tokens=0, requests=0,
    )
    issued: list[tuple[User, ApiKey, str]] = []
    try:
        issued = replay_students_ensure(roster=roster, limits=options.limits, pool=pool)
        plan = ReplayPlan(
            base_url=options.base_url, duration_s=options.duration_s, seed=options.seed, scale=options.scale,
            model=model.public_id, context_tokens=int(fleet["context"] or model.context_length),
            tools_inline=options.tools_inline,
            students=[Student(name=user.username, persona=persona, key=raw, index=number)
                      for number, ((user, _key, raw), (_name, persona)) in enumerate(zip(issued, roster), start=1)],
        )
        say(f"replaying {len(roster)} students for {options.duration_s:g} s against {plan.root} "
            f"({fleet['workers']} workers x {fleet['slots']} slots, context {fleet['context']})")
        sent, wall_s = asyncio.run(run_class(plan, progress=progress))
    except BaseException as exc:  # Ctrl-C too: the run is not left "running"
        run.status, run.error, run.ended_at = BenchmarkRun.Status.FAILED, f"{type(exc).__name__}: {exc}"[:2000], \
            timezone.now()
        run.save(update_fields=["status", "error", "ended_at"])
        raise
    finally:
        replay_keys_revoke([key for _user, key, _raw in issued])
        if applied:
            fair_policy_apply(None)  # the gateways go back to the rule they were started with
    turns = join_request_log(sent, wait_s=options.request_log_wait_s)
    report = class_report(turns, duration_s=wall_s, weights=options.weights, roster=roster,
                          workers=[w["name"] for w in fleet["worker_list"]])
    done = [t for t in turns if t.completed]
    run.summary = {**report, "config": config, "requests": [turn_row(t) for t in turns]}
    run.requests = len(turns)
    run.prompt_tokens = round(sum(t.prompt_tokens for t in done) / len(done)) if done else 0
    run.output_tokens = round(sum(t.output_tokens for t in done) / len(done)) if done else 0
    run.status = BenchmarkRun.Status.DONE if done else BenchmarkRun.Status.FAILED
    run.error = "" if done else "no turn completed: " + ", ".join(sorted({t.refused_reason for t in turns}))[:1900]
    run.ended_at = timezone.now()
    run.save(update_fields=["summary", "requests", "prompt_tokens", "output_tokens", "status", "error", "ended_at"])
    return run


def replay_json(run: BenchmarkRun) -> dict[str, Any]:
    """What `class_replay --json` writes: the stored summary without the per-turn rows, plus the run id."""
    return {"run_id": run.pk, **{key: value for key, value in run.summary.items() if key != "requests"}}


def probe_record(*, name: str, base_url: str, model: str, result: dict[str, Any], label: str = "",
                 output_tokens: int = 0, started_at: datetime | None = None,
                 ended_at: datetime | None = None) -> BenchmarkRun:
    """Stores one probe's result as a run (kind probe, `scenario` "probe-<name>"): `manage.py
    share_probe`'s, bench_live_client's, judge_backends'. `model`: the model's public id, if any.
    `started_at` / `ended_at`: when the probe ran, if not now (runs kept and stored again)."""
    now = timezone.now()
    return BenchmarkRun.objects.create(
        kind=BenchmarkRun.Kind.PROBE, group=new_group(), scenario=f"probe-{name}", label=label or f"{name} probe",
        target=BenchmarkRun.Target.GATEWAY, base_url=base_url, model=model, prompt_tokens=0,
        output_tokens=output_tokens, requests=0, status=BenchmarkRun.Status.DONE, started_at=started_at or now,
        ended_at=ended_at or now, summary=result,
    )
