from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import UserChangeForm

from accounts.login_throttle import login_refusal, refusal_message
from accounts.selectors import email_holders


class ThrottledAdminLoginForm(AdminAuthenticationForm):
    """Says plainly that sign-in is locked, instead of "wrong password" forever."""

    def clean(self) -> dict[str, Any]:
        reason = login_refusal(self.request, self.data.get("username"))
        if reason:
            raise forms.ValidationError(refusal_message(remedy="ask your teacher to reset your password"),
                                        code="locked")
        return super().clean()


class OcsUserChangeForm(UserChangeForm):
    """The admin's form for a person: an email another account holds is refused (school sign-in
    matches accounts by email)."""

    def clean_email(self) -> str:
        email = (self.cleaned_data.get("email") or "").strip()
        holder = email_holders([email]).get(email.lower()) if email else None
        if holder is not None and holder != self.instance.username:
            raise forms.ValidationError(f"{email} belongs to {holder}: an email address belongs to one account.")
        return email
