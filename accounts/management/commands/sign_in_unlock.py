from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.login_throttle import locked_usernames, login_clear


class Command(BaseCommand):
    help = ("Lift the sign-in locks (too many failed sign-ins) of these usernames, from every address; "
            "--list shows the usernames locked now.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("usernames", nargs="*")
        parser.add_argument("--list", action="store_true", help="List the usernames locked now, and why.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["list"]:
            locked = locked_usernames()
            for username, (_reason, until) in sorted(locked.items()):
                self.stdout.write(f"{username}: locked from one address for "
                                  f"{max(0, round((until - time.time()) / 60))} more min")
            if not locked:
                self.stdout.write("no username is locked")
            return
        if not options["usernames"]:
            raise CommandError("name the usernames to unlock, or pass --list")
        for username in options["usernames"]:
            login_clear(username=str(username))
            self.stdout.write(f"sign-in unlocked for {username}")
