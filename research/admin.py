from __future__ import annotations

from django.contrib import admin

from research.models import BenchmarkRun, Calibration, Experiment, GpuSample, PoolSlo, PromotionCheck, RequestSample


class RunInline(admin.TabularInline):
    model = BenchmarkRun
    extra = 0
    fields = ("label", "scenario", "model", "concurrency", "request_rate", "status", "started_at")
    readonly_fields = fields
    show_change_link = True
    can_delete = False


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ("title", "created_at")
    search_fields = ("title", "question", "decision")
    inlines = [RunInline]


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(admin.ModelAdmin):
    list_display = ("id", "started_at", "scenario", "label", "target", "model", "concurrency", "request_rate", "status")
    list_filter = ("status", "target", "scenario")
    search_fields = ("group", "label", "model", "base_url")
    raw_id_fields = ("worker", "experiment", "created_by")


@admin.register(RequestSample)
class RequestSampleAdmin(admin.ModelAdmin):
    list_display = ("run", "index", "warmup", "ok", "ttft_ms", "tpot_ms", "e2e_ms", "output_tokens")
    raw_id_fields = ("run",)


@admin.register(GpuSample)
class GpuSampleAdmin(admin.ModelAdmin):
    list_display = ("run", "at", "rig", "gpu_index", "utilization_pct", "memory_used_mib")
    raw_id_fields = ("run",)


@admin.register(PoolSlo)
class PoolSloAdmin(admin.ModelAdmin):
    list_display = ("pool", "ttft_p90_ms", "tpot_p90_ms", "baseline_prompt_tokens", "baseline_output_tokens",
                    "baseline_concurrency", "baseline_min_requests")


@admin.register(PromotionCheck)
class PromotionCheckAdmin(admin.ModelAdmin):
    list_display = ("at", "worker", "pool", "passed", "moved", "ttft_p90_ms", "tpot_p90_ms", "reasons")
    list_filter = ("passed", "moved")
    raw_id_fields = ("run", "worker")


@admin.register(Calibration)
class CalibrationAdmin(admin.ModelAdmin):
    list_display = ("id", "created_at", "source", "label", "worker")
    list_filter = ("source",)
    search_fields = ("label",)
    raw_id_fields = ("worker",)
