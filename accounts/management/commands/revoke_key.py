from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import ApiKey
from accounts.services import key_revoke
from core.keys import prefix_of


class Command(BaseCommand):
    help = "Revoke the key with this prefix (the part after 'ocs-', as the portal shows it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, **options: Any) -> None:
        prefix = prefix_of(str(options["prefix"]))
        key = ApiKey.objects.filter(prefix=prefix).first()
        if key is None:
            raise CommandError(f"no key with prefix {prefix!r}")
        key_revoke(key=key)
        self.stdout.write(f"revoked {key.display} of {key.user.username}")
