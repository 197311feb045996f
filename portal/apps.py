from __future__ import annotations

from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The students' portal and the teacher's pages (server-rendered), and the live fleet view."""

    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out
        from django.db.models.signals import post_save

        from fleet.models import WorkerEvent
        from portal.signals import chat_key_signed_out, worker_event_saved

        post_save.connect(worker_event_saved, sender=WorkerEvent, dispatch_uid="portal.fleet_changed")
        user_logged_out.connect(chat_key_signed_out, dispatch_uid="portal.chat_key_signed_out")
