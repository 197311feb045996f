from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest

from fleet.models import CatalogModel, Gpu, Pool, PoolEvent, Rig, Worker, WorkerEvent
from fleet.services import worker_disable, worker_drain, worker_enable, worker_move


class WorkerEventInline(admin.TabularInline):
    model = WorkerEvent
    extra = 0
    can_delete = False
    readonly_fields = ("at", "from_state", "to_state", "reason", "cold_start_s")
    ordering = ("-at",)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


def _actor(request: HttpRequest) -> AbstractBaseUser | None:
    return request.user if isinstance(request.user, AbstractBaseUser) and request.user.is_authenticated else None


def _bulk(action, verb: str):  # noqa: ANN001, ANN202
    def run(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Worker]) -> None:
        changed = sum(1 for worker in queryset if action(worker=worker, actor=_actor(request)))
        modeladmin.message_user(request, f"{verb} {changed} worker(s).", messages.SUCCESS)

    run.short_description = f"{verb.capitalize()} selected workers"  # type: ignore[attr-defined]
    run.__name__ = f"action_{verb}"
    return run


def _move_to(pool_name: str):  # noqa: ANN202
    def run(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Worker]) -> None:
        pool = Pool.objects.get(name=pool_name)
        for worker in queryset.select_related("pool"):
            worker_move(worker=worker, pool=pool, actor=_actor(request))
        modeladmin.message_user(request, f"Moved {queryset.count()} worker(s) to {pool_name}.", messages.SUCCESS)

    run.short_description = f"Move selected workers to pool {pool_name}"  # type: ignore[attr-defined]
    run.__name__ = f"move_to_{pool_name}"
    return run


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("name", "state", "pool", "model", "slots", "lane_tokens", "rig", "gpu_indices", "state_changed_at",
                    "last_cold_start")
    list_filter = ("state", "pool", "model", "rig")
    search_fields = ("name",)
    readonly_fields = ("state", "state_changed_at", "process_state", "process_pid", "process_started_at",
                       "slot_files_pruned", "last_cold_start", "created_at")
    inlines = [WorkerEventInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        latest = (WorkerEvent.objects.filter(worker=OuterRef("pk"), cold_start_s__isnull=False)
                  .order_by("-at").values("cold_start_s")[:1])
        return super().get_queryset(request).annotate(last_cold_start_s=Subquery(latest))

    @admin.display(description="last cold start", ordering="last_cold_start_s")
    def last_cold_start(self, worker: Worker) -> str:
        """Process start to first healthy probe, from the worker's latest cold-start event."""
        seconds = getattr(worker, "last_cold_start_s", None)
        return "-" if seconds is None else f"{seconds:.1f} s"

    def get_actions(self, request: HttpRequest) -> dict:
        actions = super().get_actions(request)
        for run in [_bulk(worker_drain, "drained"), _bulk(worker_disable, "disabled"),
                    _bulk(worker_enable, "enabled")] + [_move_to(p.name) for p in Pool.objects.all()]:
            actions[run.__name__] = (run, run.__name__, run.short_description)
        return actions


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ("name", "may_lend", "description")


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = ("public_id", "description", "context_length", "max_output_tokens", "owned_by")


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    readonly_fields = [f.name for f in Gpu._meta.fields if f.name not in {"id", "rig"}]


@admin.register(Rig)
class RigAdmin(admin.ModelAdmin):
    list_display = ("name", "address", "last_heartbeat_at", "gpu_status", "rehearsal", "agent_version")
    readonly_fields = ("token_prefix", "token_hash", "last_heartbeat_at", "gpu_status", "rehearsal", "agent_version")
    inlines = [GpuInline]


@admin.register(WorkerEvent)
class WorkerEventAdmin(admin.ModelAdmin):
    list_display = ("at", "worker", "from_state", "to_state", "cold_start_s", "reason")
    list_filter = ("to_state", "worker")


@admin.register(PoolEvent)
class PoolEventAdmin(admin.ModelAdmin):
    list_display = ("at", "pool", "kind", "detail")
