from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.audit import acting_user
from accounts.forms import OcsUserChangeForm, ThrottledAdminLoginForm
from accounts.models import ApiKey, AuditEvent, Classroom, User
from accounts.services import LIMIT_FIELDS, key_revoke, limits_changed, user_set_active

LIMITS_HELP = ("Empty fields inherit: key → student → class → site defaults (OCS_DEFAULT_*). "
               "Changes apply to the next request in every gateway process and are audited.")


class LimitsAdminMixin(admin.ModelAdmin):
    """Saving a changed limit is audited ("limits.changed") and reaches every gateway at once."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        fields = [name for name in form.changed_data if name in (*LIMIT_FIELDS, "access_expires_at", "classroom", "fair_weight")]
        if fields:
            limits_changed(target=obj, actor=acting_user(request), fields=fields)


@admin.register(Classroom)
class ClassroomAdmin(LimitsAdminMixin):
    list_display = ("name", "requests_per_minute", "tokens_per_day", "concurrency", "allowed_models", "student_count",
                    "self_enrolment")
    filter_horizontal = ("teachers",)
    fieldsets = ((None, {"fields": ("name", "teachers", "fair_weight")}), ("Default limits for its students", {
        "fields": LIMIT_FIELDS, "description": LIMITS_HELP}))

    @admin.display(description="students")
    def student_count(self, obj: Classroom) -> int:
        return obj.students.count()


@admin.register(User)
class OcsUserAdmin(LimitsAdminMixin, UserAdmin):
    list_display = ("username", "role", "classroom", "requests_per_minute", "tokens_per_day", "concurrency",
                    "is_active", "last_login")
    list_filter = ("role", "classroom", "is_active")
    fieldsets = (*(UserAdmin.fieldsets or ()), ("OCS", {"fields": ("role", "classroom")}),
                 ("Limits", {"fields": (*LIMIT_FIELDS, "access_expires_at"), "description": LIMITS_HELP}))
    actions = ["disable", "enable"]
    form = OcsUserChangeForm

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
class ApiKeyAdmin(LimitsAdminMixin):
    """Keys are issued from the portal or `issue_key` (the raw key is shown once); here they
    can be seen by prefix, limited and revoked, never read."""

    list_display = ("display", "user", "name", "pool", "created_at", "last_used_at", "expires_at", "revoked_at")
    list_filter = ("pool", "revoked_at")
    search_fields = ("prefix", "user__username", "name")
    readonly_fields = ("user", "pool", "prefix", "secret_hash", "created_at", "last_used_at", "revoked_at")
    fieldsets = ((None, {"fields": ("user", "name", "pool", "prefix", "secret_hash", "created_at", "last_used_at",
                                    "expires_at", "revoked_at")}),
                 ("Limits of this key (tighter than its owner's)", {"fields": LIMIT_FIELDS, "description": LIMITS_HELP}))
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


admin.site.login_form = ThrottledAdminLoginForm
admin.site.site_header = "OCS Intelligence"
admin.site.site_title = "OCS Intelligence"
