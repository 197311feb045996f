from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from accounts.login_throttle import login_clear


class Command(BaseCommand):
    help = "Lift the sign-in locks of these usernames (too many failed sign-ins), from every address."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("usernames", nargs="+")

    def handle(self, *args: Any, **options: Any) -> None:
        for username in options["usernames"]:
            login_clear(username=str(username))
            self.stdout.write(f"sign-in unlocked for {username}")
