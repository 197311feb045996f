from __future__ import annotations

from django.contrib import admin

from lessons.models import Answer, FleetSighting, ManualCheck, PathLab, StepDone


@admin.register(StepDone)
class StepDoneAdmin(admin.ModelAdmin):
    list_display = ("user", "step", "done_at", "evidence")
    list_filter = ("step",)
    search_fields = ("user__username",)
    list_select_related = ("user",)


@admin.register(Answer)
class AnswerAdmin(admin.ModelAdmin):
    list_display = ("user", "question", "choice", "correct", "attempts", "answered_at")
    list_filter = ("question",)
    search_fields = ("user__username",)
    list_select_related = ("user",)


@admin.register(ManualCheck)
class ManualCheckAdmin(admin.ModelAdmin):
    list_display = ("deliverable", "ticked_by", "ticked_at", "note")


@admin.register(FleetSighting)
class FleetSightingAdmin(admin.ModelAdmin):
    list_display = ("user", "at", "in_flight")
    list_select_related = ("user",)


@admin.register(PathLab)
class PathLabAdmin(admin.ModelAdmin):
    list_display = ("user", "at", "status", "base_url", "private_picked")
    list_filter = ("status",)
    search_fields = ("user__username",)
    list_select_related = ("user",)
