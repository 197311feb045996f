from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.models import ApiKey, User
from accounts.services import key_revoke


@admin.register(User)
class OcsUserAdmin(UserAdmin):
    list_display = ("username", "role", "first_name", "last_name", "is_active", "last_login")
    list_filter = ("role", "is_active")
    fieldsets = (*(UserAdmin.fieldsets or ()), ("OCS", {"fields": ("role",)}))


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
            key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)
