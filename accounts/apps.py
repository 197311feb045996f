from __future__ import annotations

from django.apps import AppConfig

from fleet.signals import teacher_action


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Students, teachers and API keys"

    def ready(self) -> None:
        from accounts.audit import record_teacher_action  # it imports models, loaded only once apps are ready

        teacher_action.connect(record_teacher_action, dispatch_uid="accounts.audit")
