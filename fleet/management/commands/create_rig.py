from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fleet.rigs import rig_create


class Command(BaseCommand):
    help = ("Create a rig (or rotate its token) and print its agent token alone on stdout, once. "
            "Put it in the rig's token_file.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--address", required=True, help="The rig's NetBird address, where its workers listen.")

    def handle(self, *args: Any, **options: Any) -> None:
        _rig, token = rig_create(name=str(options["name"]), address=str(options["address"]))
        self.stdout.write(token)
