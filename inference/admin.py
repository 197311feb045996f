from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from core.numbers import rate_text
from inference.models import DailyUsage, RequestLog


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(RequestLog)
class RequestLogAdmin(ReadOnlyAdmin):
    """Every API request, newest first: who, which model and worker, how it went."""

    list_display = ("at", "user", "model", "worker_name", "client", "status", "error_code", "prompt_tokens",
                    "completion_tokens", "queue_wait_ms", "ttft_ms", "total_ms", "tokens_per_second", "retries")
    list_filter = ("status", "client", "model", "pool")
    search_fields = ("user__username", "model", "worker_name", "error_code")
    date_hierarchy = "at"
    list_select_related = ("user",)

    # The detail page shows the rounded figures too, not 89.68380054322759.
    exclude = ("tokens_per_s", "prompt_tokens_per_s")
    readonly_fields = ("tokens_per_second", "prompt_tokens_per_second")

    @admin.display(description="prompt tokens/s")
    def prompt_tokens_per_second(self, obj: RequestLog) -> str:
        return rate_text(obj.prompt_tokens_per_s)

    @admin.display(description="tokens/s", ordering="tokens_per_s")
    def tokens_per_second(self, obj: RequestLog) -> str:
        """One decimal below 100 tokens/s, none above: the rest is measurement noise."""
        return rate_text(obj.tokens_per_s)


@admin.register(DailyUsage)
class DailyUsageAdmin(ReadOnlyAdmin):
    """Per student, model and day; a class's usage is the sum over its students (filter by class, or inference.selectors.class_daily_usage)."""

    list_display = ("day", "user", "classroom", "model", "requests", "errors", "prompt_tokens", "completion_tokens")
    list_filter = ("classroom", "model")
    search_fields = ("user__username",)
    date_hierarchy = "day"
    list_select_related = ("user", "classroom")
