from __future__ import annotations

from datetime import datetime, time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.models import Classroom
from accounts.pause import next_time_of_day
from accounts.services import class_pause
from core.dates import moment_text


def _time_of_day(text: str) -> time:
    try:
        return datetime.strptime(text, "%H:%M").time()
    except ValueError:
        raise CommandError(f"--until takes HH:MM (24-hour, school time), not {text!r}") from None


class Command(BaseCommand):
    help = ("Pause a class (exam mode): its students' requests are refused with 403 class_paused on their "
            "next request in every gateway; running answers finish. Lift it with resume_class.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the class")
        parser.add_argument("--until", type=_time_of_day, metavar="HH:MM",
                            help="until the next such time in the school's time zone (default: until resumed)")
        parser.add_argument("--message", default="", help="a note the students read with the refusal")

    def handle(self, *args: Any, **options: Any) -> None:
        room = Classroom.objects.filter(name=options["name"]).first()
        if room is None:
            raise CommandError(f"no class named {options['name']!r}")
        until = next_time_of_day(options["until"], timezone.localtime()) if options["until"] else None
        class_pause(classroom=room, until=until, message=options["message"])
        span = f"until {moment_text(until)} {timezone.localtime(until):%Z}" if until else "until resumed"
        self.stdout.write(f"paused: class {room.name} {span}")
