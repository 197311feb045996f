from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Worker
from fleet.services import worker_register
from fleet.worker_keys import worker_key_headers


class Command(BaseCommand):
    help = "Register an OpenAI-compatible llama-server that already runs elsewhere as a worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--url", required=True, help="llama-server root, e.g. http://100.64.0.12:8080")
        parser.add_argument("--model", required=True, help="Public model id clients send, e.g. smollm2-135m-instruct")
        parser.add_argument("--pool", default="production")
        parser.add_argument("--slots", type=int, default=None, help="Default: read from the server's /props.")
        parser.add_argument("--context", type=int, default=None, help="Context length (default: from /props).")
        parser.add_argument("--lane-tokens", type=int, default=None, metavar="N",
                            help="Keep it for short prompts: it takes only prompts of at most N tokens, and they "
                                 "go to it first (docs/classroom.md). 0: any prompt. Default: as it was (new: 0).")
        parser.add_argument("--api-key-file", type=Path, default=None,
                            help="The file the server was started with (llama-server --api-key-file): the "
                                 "gateway sends its key. Without it the server answers anyone who reaches it.")

    def handle(self, *args: Any, **options: Any) -> None:
        url = str(options["url"]).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise CommandError("--url must start with http:// or https://")
        slots, context, healthy = options["slots"], options["context"], False
        if options["lane_tokens"] is not None and options["lane_tokens"] < 0:
            raise CommandError("--lane-tokens must be 0 (any prompt) or more")
        api_key = ""
        if options["api_key_file"] is not None:
            try:
                lines = options["api_key_file"].read_text().splitlines()
            except OSError as exc:
                raise CommandError(f"--api-key-file {options['api_key_file']}: {exc.strerror}") from None
            api_key = next((line.strip() for line in lines if line.strip() and not line.startswith("#")), "")
            if not api_key:
                raise CommandError(f"--api-key-file {options['api_key_file']}: no key in it")
        try:
            headers = worker_key_headers(api_key)
            healthy = httpx.get(url + "/health", timeout=3, headers=headers).status_code == 200
            props = httpx.get(url + "/props", timeout=3, headers=headers).json()
            slots = slots or int(props.get("total_slots") or 1)
            per_slot = props.get("default_generation_settings", {}).get("n_ctx")
            context = context or (int(per_slot) if per_slot else None)
        except (httpx.HTTPError, ValueError) as exc:
            self.stderr.write(f"warning: {url} did not answer ({type(exc).__name__}); registering it as starting")
        worker = worker_register(
            name=str(options["name"]),
            base_url=url,
            model_id=str(options["model"]),
            pool_name=str(options["pool"]),
            slots=int(slots or 1),
            context_length=context,
            state=Worker.State.HEALTHY if healthy else Worker.State.STARTING,
            api_key=api_key if options["api_key_file"] is not None else None,
            lane_tokens=options["lane_tokens"],
        )
        self.stdout.write(f"worker {worker.name}: {worker.base_url} serves {options['model']} in pool "
                          f"{worker.pool.name} with {worker.slots} slots, state {worker.state}"
                          + (f", kept for prompts of at most {worker.lane_tokens} tokens" if worker.lane_tokens else ""))
