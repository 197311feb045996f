"""The site's URLs plus one route under /ollama/<key>/ that fails, for the log redaction tests."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from ocsweb.urls import urlpatterns as site_urlpatterns


def boom(request: HttpRequest, key: str) -> HttpResponse:
    raise RuntimeError(f"failed while serving key {key}")


urlpatterns = [path("ollama/<str:key>/boom", boom), *site_urlpatterns]
