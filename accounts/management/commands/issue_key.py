from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import User
from accounts.services import MAX_ACTIVE_KEYS, TooManyKeys, active_key_count, key_issue
from fleet.models import Pool


class Command(BaseCommand):
    help = "Issue a new API key for USERNAME and print the raw key, alone, on stdout (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="default", help="A label for the key, e.g. 'laptop' or 'vscode'.")
        parser.add_argument("--pool", default=None, help="Pool the key routes to (default: production).")
        parser.add_argument("--force", action="store_true",
                            help=f"Issue the key even if the student already holds {MAX_ACTIVE_KEYS} active keys.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user = User.objects.get(username=options["username"])
        except User.DoesNotExist:
            raise CommandError(f"no user named {options['username']!r}") from None
        pool = None
        if options["pool"]:
            pool = Pool.objects.filter(name=options["pool"]).first()
            if pool is None:
                raise CommandError(f"no pool named {options['pool']!r}")
        try:
            _key, raw = key_issue(user=user, name=str(options["name"]), pool=pool, enforce_limit=not options["force"])
        except TooManyKeys as refused:
            raise CommandError(f"{user.username}: {refused} (or pass --force)") from None
        if active_key_count(user) > MAX_ACTIVE_KEYS:
            self.stderr.write(f"warning: {user.username} now holds {active_key_count(user)} active keys, "
                              f"more than the {MAX_ACTIVE_KEYS} a student may create")
        self.stdout.write(raw)
