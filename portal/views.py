"""The student portal: home, keys, usage, connect. Thin: parse, call one service or selector, render.
Every page shows only the signed-in person's own things; someone else's key answers 404."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounts.access import is_teacher
from accounts.audit import acting_user
from accounts.models import User
from accounts.school_sign_in import school_config
from accounts.selectors import chat_key_current, pause_status, student_policy
from accounts.services import (CHAT_KEY_LIFETIME, MAX_ACTIVE_KEYS, ChatOff, TooManyKeys, chat_allowed, chat_key_issue,
                               key_issue, key_revoke)
from inference.chat_page import CHAT_COOKIE, CHAT_COOKIE_PATH, CHAT_HEADER, CHAT_ROUTE
from inference.selectors import usage_summary
from portal import selectors
from portal.connect import KEY_PLACEHOLDER, setups, windows
from portal.forms import KeyCreateForm
from portal.stats import day_chart


def _person(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # login_required ran first
    return user


class SignInView(LoginView):
    """Sign-in; without a `next`, teachers land on their classes, students on their home."""

    def get_default_redirect_url(self) -> str:
        return "/teacher/" if is_teacher(self.request.user) else "/"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "school_sign_in": school_config() is not None}


def site_root(request: HttpRequest) -> str:
    """This site's address as the browser reached it, without a trailing slash."""
    return request.build_absolute_uri("/").rstrip("/")


@login_required
def home(request: HttpRequest) -> HttpResponse:
    person = _person(request)
    summary = usage_summary(person, days=0)
    keys = list(selectors.active_keys(person)[:5])
    return render(request, "portal/home.html", {
        "base_url": f"{site_root(request)}/v1", "keys": keys, "today": summary["today"],
        "limits": summary["limits"], "tokens_today": summary["today"]["prompt_tokens"]
        + summary["today"]["completion_tokens"],
        "pause": None if person.is_staff else pause_status(person.classroom),
        "budgets": selectors.budgets_shown([person])[person.id],
        "steps": selectors.next_steps(person),
    })


@login_required
@require_http_methods(["GET", "POST"])
def keys(request: HttpRequest) -> HttpResponse:
    """GET: the list. POST: create a key and show it once (the page is the POST's answer, never
    a redirect, so the raw key is never stored anywhere, not even in the session)."""
    person = _person(request)
    new_key, status = None, 200
    form = KeyCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            key, raw = key_issue(user=person, name=form.cleaned_data["name"])
        except TooManyKeys as refused:
            form.add_error(None, str(refused))
            status = 409
        else:
            new_key = {"row": key, "raw": raw}
            form = KeyCreateForm()
    elif request.method == "POST":
        status = 400
    response = render(request, "portal/keys.html", {
        "form": form, "keys": list(selectors.keys_of(person)), "new_key": new_key, "max_keys": MAX_ACTIVE_KEYS,
    }, status=status)
    if new_key:
        response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def key_revoke_view(request: HttpRequest, key_id: int) -> HttpResponse:
    key = get_object_or_404(selectors.keys_of(_person(request)), id=key_id)
    key_revoke(key=key, actor=acting_user(request))
    messages.success(request, f"Key {key.display} ({key.name}) is revoked: it is refused from now on.")
    return redirect("portal:keys")


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    person = _person(request)
    days = selectors.usage_days(person)
    summary = usage_summary(person, days=0)
    return render(request, "portal/usage.html", {
        "days": days, "chart": day_chart([(d.day, d.tokens, d.requests) for d in days], height=120), "recent": list(selectors.recent_requests(person)),
        "limits": summary["limits"], "today": summary["today"], "usage_days": selectors.USAGE_DAYS,
    })


@login_required
def connect(request: HttpRequest) -> HttpResponse:
    person = _person(request)
    policy = student_policy(person)
    models = selectors.served_models(policy.allowed_models)
    site = site_root(request)
    return render(request, "portal/connect.html", {
        "site": site, "models": models, "snippets": setups(site=site, models=models),
        "windows": windows(models),
        "placeholder": KEY_PLACEHOLDER, "has_keys": selectors.active_keys(person).exists(),
    })


@login_required
def chat(request: HttpRequest) -> HttpResponse:
    """The chat page. Its key lives in an HttpOnly cookie only the chat route reads
    (inference/chat_page.py); the conversations live in the browser's storage only."""
    person = _person(request)
    allowed = chat_allowed(person)
    policy = student_policy(person)
    response = render(request, "portal/chat.html", {
        "allowed": allowed, "models": selectors.served_models(policy.allowed_models),
        "fallback": settings.OCS["BUDGET_FALLBACK_MODEL"],
        "pause": None if person.is_staff else pause_status(person.classroom),
        "chat_route": CHAT_ROUTE, "chat_header": CHAT_HEADER,
    })
    if allowed:
        _give_chat_key(request, response)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def chat_key(request: HttpRequest) -> HttpResponse:
    """A fresh chat key in the page's cookie, when the one it had lapsed or was revoked (the page
    asks once, on a 401). CSRF-protected like every form."""
    response = JsonResponse({"ok": True})
    try:
        _give_chat_key(request, response, renew=True)
    except ChatOff as off:
        return JsonResponse({"error": {"code": "chat_off", "message": str(off)}}, status=403)
    response["Cache-Control"] = "no-store"
    return response


def _give_chat_key(request: HttpRequest, response: HttpResponse, *, renew: bool = False) -> None:
    if request.session.session_key is None:
        request.session.save()
    session_key = request.session.session_key
    assert session_key is not None
    person = _person(request)
    if not renew and chat_key_current(user=person, session_key=session_key, raw=request.COOKIES.get(CHAT_COOKIE)):
        return
    raw = chat_key_issue(user=person, session_key=session_key)
    response.set_cookie(CHAT_COOKIE, raw, max_age=int(CHAT_KEY_LIFETIME.total_seconds()), path=CHAT_COOKIE_PATH,
                        secure=request.is_secure(), httponly=True, samesite="Strict")
