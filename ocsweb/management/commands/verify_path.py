from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from lessons.services import path_verification_record
from research.path_check import PASS, WARN, render_checks, render_timings, verdict
from research.path_verify import verify


class Command(BaseCommand):
    help = ("From the control plane, check the whole request path: the public URL (TLS, /healthz, /readyz), "
            "every registered worker over the private network, a streamed completion through the gateway to each "
            "worker, the Ollama discovery routes and the Anthropic route. Prints a table per hop and a verdict; "
            "exits non-zero naming the broken hop. docs/deployment.md, step 1.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", required=True,
                            help="The public address students use, e.g. https://ai.school.example")
        parser.add_argument("--api-key", required=True, help="A student key (ocs-…) to send the test requests with.")
        parser.add_argument("--ca-file", help="Trust this CA bundle for the public URL (a private or test CA).")
        parser.add_argument("--timeout", type=float, default=60.0, help="Seconds for each request (default 60).")

    def handle(self, *args: Any, **options: Any) -> None:
        base_url = options["base_url"].strip()
        if not base_url.startswith(("http://", "https://")):
            raise CommandError("--base-url must start with https:// (or http:// on a test machine)")
        if options["timeout"] <= 0:
            raise CommandError("--timeout must be a positive number of seconds")
        results, timings = verify(base_url=base_url, api_key=options["api_key"].strip(),
                                  ca_file=options["ca_file"], timeout_s=options["timeout"])
        self.stdout.write(render_checks(results))
        if timings:
            self.stdout.write("")
            self.stdout.write(render_timings(timings))
        ok, line = verdict(results)
        # The burndown's "deployment path" row reads this record (lessons/burndown.py).
        try:
            path_verification_record(base_url=base_url, passed=ok, verdict=line,
                                     tls_ok=any(r.hop == "public TLS" and r.outcome in (PASS, WARN) for r in results))
        except DatabaseError as exc:  # the fleet database check above already names the broken hop
            self.stderr.write(f"verify_path: the result was not recorded for the burndown: {type(exc).__name__}")
        self.stdout.write("")
        self.stdout.write(line)
        if not ok:
            raise CommandError("the request path is broken; see the FAIL lines above", returncode=1)
