from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm

from accounts.login_throttle import login_refusal, refusal_message


class ThrottledAdminLoginForm(AdminAuthenticationForm):
    """Says plainly that sign-in is locked, instead of "wrong password" forever."""

    def clean(self) -> dict[str, Any]:
        reason = login_refusal(self.request, self.data.get("username"))
        if reason:
            raise forms.ValidationError(refusal_message(remedy="ask your teacher to reset your password"),
                                        code="locked")
        return super().clean()
