"""Sign-in with the school's account (OpenID Connect): mozilla-django-oidc's two views, with the
school's configuration (accounts/school_sign_in.py) and the refusals said on the sign-in page.
Both answer 404 while school sign-in is off."""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from accounts.school_sign_in import REFUSAL_ATTR, ProviderUnavailable, provider_metadata, school_config, school_setting
from core.school_sign_in import REFUSALS


class SchoolSignInStart(OIDCAuthenticationRequestView):
    """/accounts/school/start/: off to the school's provider (state, nonce and PKCE in the session)."""

    get_settings = staticmethod(school_setting)

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the library's reads the endpoint here; get() does, once configured

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if school_config() is None:
            raise Http404("school sign-in is off")
        return super().dispatch(request, *args, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        config = school_config()
        assert config is not None
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_metadata(config.issuer)["authorization_endpoint"]
        except ProviderUnavailable:
            messages.error(request, REFUSALS["provider"])
            return redirect("portal:login")
        self.OIDC_RP_CLIENT_ID = config.client_id
        return super().get(request)


class SchoolSignInCallback(OIDCAuthenticationCallbackView):
    """/accounts/school/callback/: the provider sends the student back here; signed in, or back
    on the sign-in page with the reason."""

    get_settings = staticmethod(school_setting)

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if school_config() is None:
            raise Http404("school sign-in is off")
        return super().dispatch(request, *args, **kwargs)

    def login_failure(self) -> HttpResponse:
        reason = getattr(self.request, REFUSAL_ATTR, None) or "provider"
        messages.error(self.request, REFUSALS[reason])
        return redirect("portal:login")
