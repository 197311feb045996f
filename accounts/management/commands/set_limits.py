from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import ApiKey, Classroom, User
from accounts.services import limits_describe, limits_set
from core.keys import prefix_of


def _cap(text: str) -> int | None:
    """A number, or "inherit" / "-" to clear the field."""
    if text.lower() in ("inherit", "-", "none", ""):
        return None
    try:
        value = int(text)
    except ValueError:
        raise CommandError(f"{text!r} is not a number (or 'inherit')") from None
    if value < 0:
        raise CommandError("limits cannot be negative")
    return value


class Command(BaseCommand):
    help = ("Set a student's limits (or, with --key / --class, a key's or a class's). Omitted options "
            "stay as they are; 'inherit' clears one. Takes effect on the next request in every gateway.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?", help="the student (omit with --class)")
        given_only = argparse.SUPPRESS  # an omitted option is left out of `options`: it stays as it is
        parser.add_argument("--rpm", type=_cap, help="requests per minute", default=given_only)
        parser.add_argument("--tokens-per-day", type=_cap, help="prompt + completion tokens per day", default=given_only)
        parser.add_argument("--tokens-per-week", type=_cap, help="tokens per week (Monday to Sunday)",
                            default=given_only)
        parser.add_argument("--tokens-per-term", type=_cap, help="tokens per term (the class's term dates)",
                            default=given_only)
        parser.add_argument("--concurrency", type=_cap, help="requests running or waiting at once", default=given_only)
        parser.add_argument("--models", help="allowed model ids, comma-separated ('' = inherit)", default=given_only)
        parser.add_argument("--pools", help="allowed pool names, comma-separated ('' = inherit)", default=given_only)
        parser.add_argument("--key", metavar="PREFIX", help="set the limits of this key of the student instead")
        parser.add_argument("--class", dest="classroom", metavar="NAME",
                            help="set the limits of this class (created if missing) instead")

    def handle(self, *args: Any, **options: Any) -> None:
        target = self._target(options)
        fields = {"rpm": "requests_per_minute", "tokens_per_day": "tokens_per_day",
                  "tokens_per_week": "tokens_per_week", "tokens_per_term": "tokens_per_term", "concurrency": "concurrency",
                  "models": "allowed_models", "pools": "allowed_pools"}
        changes = {field: options[option] for option, field in fields.items() if option in options}
        if not changes:
            raise CommandError("nothing to change: give --rpm, --tokens-per-day, --concurrency, --models or --pools")
        changed = limits_set(target=target, **changes)
        self.stdout.write(f"{'updated' if changed else 'unchanged'}: {target}: {limits_describe(target, list(changes))}")

    @staticmethod
    def _target(options: dict[str, Any]) -> Classroom | User | ApiKey:
        if options["classroom"]:
            classroom, _ = Classroom.objects.get_or_create(name=options["classroom"])
            return classroom
        username = options["username"]
        if not username:
            raise CommandError("give a USERNAME (or --class NAME)")
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if options["key"]:
            prefix = prefix_of(str(options["key"]))
            key = ApiKey.objects.filter(user=user, prefix=prefix).first()
            if key is None:
                raise CommandError(f"{username} has no key with prefix {prefix!r}")
            return key
        return user
