from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fleet.models import Pool
from fleet.rigs import rig_create
from fleet.services import catalog_model_ensure


class Command(BaseCommand):
    help = ("Create a rig (or rotate its token) and print its agent token alone on stdout, once. "
            "Put it in the rig's token_file. A rig serves only catalogue models and joins only pools "
            "that exist: --model and --pool create them here, on the teachers' side.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--address", required=True, help="The rig's NetBird address, where its workers listen.")
        parser.add_argument("--model", action="append", default=[], metavar="MODEL_ID",
                            help="A model its workers serve, added to the catalogue if new (repeatable).")
        parser.add_argument("--context", type=int, default=None, metavar="TOKENS",
                            help="The context length clients are told for each new --model (default 8192).")
        parser.add_argument("--pool", action="append", default=[], metavar="NAME",
                            help="A pool its workers join, created if new (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        for model_id in options["model"]:
            catalog_model_ensure(public_id=str(model_id), context_length=options["context"])
        for pool in options["pool"]:
            Pool.objects.get_or_create(name=str(pool))
        _rig, token = rig_create(name=str(options["name"]), address=str(options["address"]))
        self.stdout.write(token)
