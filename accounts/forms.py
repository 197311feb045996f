from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm

from accounts.login_throttle import login_locked


class ThrottledAdminLoginForm(AdminAuthenticationForm):
    """Says plainly that sign-in is locked, instead of "wrong password" forever."""

    def clean(self) -> dict[str, Any]:
        if login_locked(self.request, self.data.get("username")):
            minutes = max(1, round(settings.OCS["LOGIN_LOCK_S"] / 60))
            raise forms.ValidationError(
                f"Too many failed sign-ins. Try again in {minutes} minutes, or ask your teacher to reset your password.",
                code="locked",
            )
        return super().clean()
