"""Who may open a teacher's page: one decorator and one answer for every app.

Signed out: to the sign-in page. Signed in without teacher access (User.is_teacher): a 403
page that says the page is for teachers. Lessons, research and the teacher's pages all use it.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

View = Callable[..., HttpResponse]


def is_teacher(user: object) -> bool:
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_teacher", False))


def staff_required(view: View) -> View:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not is_teacher(request.user):
            raise PermissionDenied("This page is for teachers.")
        return view(request, *args, **kwargs)

    return wrapped
