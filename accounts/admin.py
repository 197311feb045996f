from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.audit import acting_user
from accounts.models import ApiKey, AuditEvent, User
from accounts.services import key_revoke, user_set_active


@admin.register(User)
class OcsUserAdmin(UserAdmin):
    list_display = ("username", "role", "first_name", "last_name", "is_active", "last_login")
    list_filter = ("role", "is_active")
    fieldsets = (*(UserAdmin.fieldsets or ()), ("OCS", {"fields": ("role",)}))
    actions = ["disable", "enable"]

    def save_model(self, request: HttpRequest, obj: User, form: Any, change: bool) -> None:
        """Activating or deactivating goes through the service: keys stop working at once, audited."""
        active_changed = change and "is_active" in form.changed_data
        super().save_model(request, obj, form, change)
        if active_changed:
            user_set_active(user=obj, active=obj.is_active, actor=acting_user(request))

    @admin.action(description="Disable selected people (their keys stop working)")
    def disable(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        for user in queryset:
            user_set_active(user=user, active=False, actor=acting_user(request))
        self.message_user(request, f"Disabled {queryset.count()} account(s).", messages.SUCCESS)

    @admin.action(description="Enable selected people")
    def enable(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        for user in queryset:
            user_set_active(user=user, active=True, actor=acting_user(request))
        self.message_user(request, f"Enabled {queryset.count()} account(s).", messages.SUCCESS)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are issued from the portal or `issue_key` (the raw key is shown once); here they
    can be seen by prefix and revoked, never read."""

    list_display = ("display", "user", "name", "pool", "created_at", "last_used_at", "expires_at", "revoked_at")
    list_filter = ("pool", "revoked_at")
    search_fields = ("prefix", "user__username", "name")
    readonly_fields = ("prefix", "secret_hash", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key in queryset:
            key_revoke(key=key, actor=acting_user(request))
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the record of who did what."""

    list_display = ("at", "actor", "action", "subject", "detail")
    list_filter = ("action",)
    search_fields = ("subject", "detail", "actor__username")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
