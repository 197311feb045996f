"""Re-captures tests/fixtures/clients/<run>.json: what each pinned client sends on its first turn.

    .venv/bin/python -m tests.realclients.recapture            # every run
    .venv/bin/python -m tests.realclients.recapture codex-responses

Each client runs headless against the capture server (tests/realclients/capture.py), which
answers every request with a minimal valid reply in its dialect, so a run is one turn and takes
seconds. Every request of the run is written, keys redacted and temporary paths replaced by
``/home/student`` (HOME) and ``/home/student/project`` (the working directory).
"""
from __future__ import annotations

import json
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.realclients.capture import CaptureServer
from tests.realclients.clients import ROOT, RUNS, Run, execute, installed_version, prepare

FIXTURES = ROOT / "tests" / "fixtures" / "clients"
PACKAGES = {"claude": "@anthropic-ai/claude-code", "copilot": "@github/copilot", "codex": "@openai/codex"}
CAPTURE_KEY = "sk-capture-not-a-real-key"
CAPTURE_MODEL = "smollm2-135m-instruct"


def scrub(document: Any, replacements: list[tuple[str, str]]) -> Any:
    """``document`` with every occurrence of each (old, new) string pair replaced, recursively."""
    if isinstance(document, str):
        for old, new in replacements:
            document = document.replace(old, new)
        return document
    if isinstance(document, list):
        return [scrub(item, replacements) for item in document]
    if isinstance(document, dict):
        return {scrub(k, replacements): scrub(v, replacements) for k, v in document.items()}
    return document


def capture(run: Run, timeout_s: float = 180) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ocs-capture-") as tmp, CaptureServer() as server:
        workdir = Path(tmp)
        prepared = prepare(run, base_url=server.url, key=CAPTURE_KEY, model=CAPTURE_MODEL, workdir=workdir)
        result = execute(prepared, timeout_s)
        replacements = [(str(prepared.cwd), "/home/student/project"), (str(prepared.home), "/home/student"),
                        (str(workdir), "/tmp/ocs-capture"), (CAPTURE_KEY, "<redacted>"),
                        (server.url.removeprefix("http://"), "127.0.0.1:PORT"), (socket.gethostname(), "HOSTNAME")]
        replacements += [(old.replace("/", "\\/"), new) for old, new in replacements[:3]]
        package = PACKAGES[run.client]
        record: dict[str, Any] = scrub({
            "run": run.name,
            "client": package,
            "client_version": installed_version(package),
            "wire": run.wire,
            "prompt": run.prompt,
            "argv": [Path(prepared.argv[0]).name, *prepared.argv[1:]],
            "env": {k: v for k, v in prepared.env.items() if k not in {"PATH"}},
            "exit_code": result.returncode,
            "stdout": result.stdout[-2000:],
            "stderr": result.stderr[-2000:],
            "requests": [exchange.as_fixture() for exchange in server.exchanges],
        }, replacements)
        return record


def main(names: list[str]) -> int:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    chosen = [run for run in RUNS if not names or run.name in names]
    status = 0
    for run in chosen:
        record = capture(run)
        path = FIXTURES / f"{run.name}.json"
        path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"{run.name}: exit {record['exit_code']}, {len(record['requests'])} request(s) -> {path}")
        if record["exit_code"] != 0 or not record["requests"]:
            print(record["stdout"], record["stderr"], sep="\n", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
