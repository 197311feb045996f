"""python manage.py create_teacher USERNAME [--classes A,B] [--site URL]"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Classroom
from accounts.services import teacher_ensure
from portal.site_address import site_url_default
from portal.services import set_password_path


class Command(BaseCommand):
    help = ("Create a teacher (a staff account) who sees and acts only on the students of their classes, "
            "and print a one-time set-password link. --classes makes them a teacher of these classes "
            "(created if missing); an existing teacher is added to them.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--classes", default="", help="comma-separated class names")
        parser.add_argument("--site", default=None,
                            help="The site's address, put in front of the link (default: OCS_SITE_URL, else "
                                 "where `manage.py demo` last started, else http://127.0.0.1:8000).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            teacher, created = teacher_ensure(username=options["username"],
                                              class_names=options["classes"].split(","))
        except ValueError as problem:
            raise CommandError(str(problem)) from None
        classes = ", ".join(Classroom.objects.filter(teachers=teacher).values_list("name", flat=True)) or "none yet"
        self.stderr.write(f"{'created' if created else 'updated'}: teacher {teacher.username}; classes: {classes}")
        site, source = (options["site"], "--site") if options["site"] else site_url_default()
        self.stderr.write(f"link on {site} (from {source}; --site to change)")
        self.stdout.write(site.rstrip("/") + set_password_path(user=teacher))
