"""python manage.py import_students FILE.csv [--class NAME] [--passwords] [--site URL]"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.csv_import import CsvProblem, parse_students_csv
from portal.site_address import site_url_default
from portal.services import students_import


class Command(BaseCommand):
    help = ("Create students from a CSV class list (username, email, name) and print a one-time "
            "set-password link (or, with --passwords, an initial password) for each.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="CSV file: username, email, name (header line optional).")
        parser.add_argument("--class", dest="classroom", default=None, help="Put every student in this class.")
        parser.add_argument("--passwords", action="store_true",
                            help="Print a random initial password for new students instead of a link.")
        parser.add_argument("--site", default=None,
                            help="The site's address, put in front of the links (default: OCS_SITE_URL, else "
                                 "where `manage.py demo` last started, else http://127.0.0.1:8000).")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            text = path.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise CommandError(f"{path}: no such file") from None
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not UTF-8 text (save it as 'CSV UTF-8')") from None
        except OSError as error:
            raise CommandError(f"{path}: {error.strerror}") from None
        try:
            rows = parse_students_csv(text)
            imported = students_import(rows=rows, classroom_name=options["classroom"], actor=None,
                                       initial_passwords=options["passwords"])
        except CsvProblem as problem:
            raise CommandError("nothing imported:\n  " + "\n  ".join(problem.problems)) from None
        except ValueError as problem:
            raise CommandError(f"nothing imported: {problem}") from None
        site, source = (options["site"], "--site") if options["site"] else site_url_default()
        site = site.rstrip("/")
        for student in imported:
            secret = (f"password {student.initial_password}" if student.initial_password
                      else f"{site}{student.set_password_path}")
            self.stdout.write(f"{student.username}\t{'new' if student.created else 'updated'}\t{secret}")
        created = sum(s.created for s in imported)
        self.stderr.write(f"{created} new, {len(imported) - created} updated"
                          + (f", class {options['classroom']}" if options["classroom"] else ""))
        if any(not s.initial_password for s in imported):
            self.stderr.write(f"links on {site} (from {source}; --site to change)")
