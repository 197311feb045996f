from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Classroom
from accounts.services import class_resume


class Command(BaseCommand):
    help = ("Resume a paused class: its students are served again on their next request. During a "
            "timetable window it lifts that window; the next one pauses the class again.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the class")

    def handle(self, *args: Any, **options: Any) -> None:
        room = Classroom.objects.filter(name=options["name"]).first()
        if room is None:
            raise CommandError(f"no class named {options['name']!r}")
        class_resume(classroom=room)
        self.stdout.write(f"resumed: class {room.name}")
