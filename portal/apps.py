from __future__ import annotations

from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The students' portal and the teacher's pages (server-rendered), and the live fleet view."""

    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"
