"""The students' real tools, pinned in tests/clients, run headless through the gateway.

Each run is one client on one wire (tests/realclients/clients.py: Claude Code; Copilot CLI on
its completions, responses and anthropic wires; Codex CLI), with a student key, against a real
llama-server whose one slot holds a coding agent's whole prompt. Between the client and the
gateway sits the capture server as a pass-through proxy, so the test sees every request the
client sent and the gateway's status for it. A run passes when the client exits 0 and prints an
answer, every request it sent was answered 2xx, and the request log holds each one with tokens.

Slow on CPU (an agent's first prompt is 5k-20k tokens): the group is marked ``realclients``
and `make test` runs it once, on PostgreSQL + Redis.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.realclients.capture import CaptureServer, Exchange
from tests.realclients.clients import RUNS, Run, execute, prepare
from tests.realclients.conftest import AGENT_MODEL, OUTPUT_CAP
from tests.realclients.recapture import FIXTURES, capture

pytestmark = [pytest.mark.realclients, pytest.mark.integration, pytest.mark.timeout(1500)]

RUN_TIMEOUT_S = 1200  # one client run on 2 shared CPU cores: prompt processing dominates
# RequestLog.client per wire; the Responses route's kind is the protocol layer's to name.
CLIENT_KIND = {"anthropic": {"anthropic"}, "completions": {"openai"}, "responses": {"responses"}}
# Which tool the request log says sent it (inference/client_tools.py, from all the headers).
TOOL = {"claude": "claude-code", "copilot": "copilot", "codex": "codex"}
# What Claude Code prints when the model's answers keep stopping at the output cap.
MODEL_RAN_TO_ITS_CAP = "output token maximum"
# What each client says it is (User-Agent, as captured), which the request log must keep.
USER_AGENT = {"claude-code-anthropic": "claude-cli/", "copilot-completions": "OpenAI/JS",
              "copilot-responses": "OpenAI/JS", "copilot-anthropic": "Anthropic/JS", "codex-responses": "codex_exec/"}


def describe(run: Run, exchanges: list[Exchange], stdout: str, stderr: str, seconds: float) -> str:
    """What happened, for a failure message: each request, the gateway's status and answer
    (for a refusal), and the end of the client's output."""
    lines = [f"{run.name}: {len(exchanges)} request(s) in {seconds:.0f} s"]
    for exchange in exchanges:
        lines.append(f"  {exchange.method} {exchange.path} -> {exchange.status} ({exchange.seconds:.1f} s)")
        if not 200 <= exchange.status < 300:
            lines.append(f"    answer: {exchange.response_head[:600]}")
    lines += ["--- client stdout (end)", stdout[-1500:], "--- client stderr (end)", stderr[-2500:]]
    return "\n".join(lines)


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_real_client_completes_a_turn_through_the_gateway(run: Run, real_clients_installed, gateway, agent_worker,  # noqa: ANN001
                                                         student_key, tmp_path: Path) -> None:
    from inference.models import RequestLog

    key_row, raw_key = student_key
    with CaptureServer(upstream=gateway.url) as proxy:
        prepared = prepare(run, base_url=proxy.url, key=raw_key, model=AGENT_MODEL, workdir=tmp_path)
        started = time.monotonic()
        result = execute(prepared, RUN_TIMEOUT_S)
        seconds = time.monotonic() - started
        exchanges = list(proxy.exchanges)
    report = describe(run, exchanges, result.stdout, result.stderr, seconds)
    print(f"\n{run.name}: exit {result.returncode} after {seconds:.0f} s, {len(exchanges)} request(s)")

    api = [e for e in exchanges if e.path.startswith("/v1/")]
    assert api, "the client sent no API request\n" + report
    refused = [e for e in exchanges if not 200 <= e.status < 300 and (e.path.startswith("/v1/") or e.status >= 500)]
    assert not refused, "the gateway refused requests\n" + report
    model_ran_to_its_cap = run.client == "claude" and MODEL_RAN_TO_ITS_CAP in result.stdout
    if not model_ran_to_its_cap:
        assert result.returncode == 0, report
    assert result.stdout.strip(), "the client printed no answer\n" + report

    rows = wait_for(lambda: (list(RequestLog.objects.filter(key=key_row).order_by("at"))
                             if RequestLog.objects.filter(key=key_row).count() >= len(api) else None), 15)
    assert rows, f"the request log holds {RequestLog.objects.filter(key=key_row).count()} of {len(api)} requests\n" + report
    assert len(rows) == len(api), report
    for row in rows:
        assert 200 <= row.status < 300 and row.model == AGENT_MODEL, (row.path, row.status, row.error_code)
        assert row.prompt_tokens > 0 and row.completion_tokens > 0, (row.path, row.prompt_tokens, row.completion_tokens)
        assert row.client in CLIENT_KIND[run.wire], (row.path, row.client)
        assert row.tool == TOOL[run.client], (row.path, row.tool)
        assert row.user_agent.startswith(USER_AGENT[run.name]), row.user_agent
    assert sorted(row.path for row in rows) == sorted(e.path for e in api)
    if model_ran_to_its_cap:
        # SmolLM2 sometimes loops under Claude Code's ~3k-token system prompt (which holds the
        # date and the working directory, so it changes between runs) until the model's output
        # cap; Claude Code then reports the output maximum and exits 1. That is the model, not
        # the connection (issue 8 says so): every request above was served and logged, and the
        # answers that ended the turn really did run to the cap.
        assert rows[-1].completion_tokens == OUTPUT_CAP, report
    for row in rows:
        print(f"  {row.path} {row.status}: {row.prompt_tokens} prompt tokens ({row.cached_tokens} cached), "
              f"{row.completion_tokens} completion tokens, {row.total_ms / 1000:.0f} s")


def request_shape(record: dict) -> list[tuple]:
    """What a change of client version would change: each request's method, path, top-level body
    fields, tool names and message roles. Not ids, dates or prompt text."""
    shape = []
    for request in record["requests"]:
        body = request["body"] if isinstance(request["body"], dict) else {}
        messages = body.get("messages") or (body.get("input") if isinstance(body.get("input"), list) else [])
        shape.append((request["method"], request["path"], sorted(body),
                      [tool.get("name") or tool.get("function", {}).get("name") or tool.get("type")
                       for tool in body.get("tools") or []],
                      [message.get("role") or message.get("type") for message in messages]))
    return shape


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_the_fixture_holds_what_the_pinned_client_sends(run: Run, real_clients_installed) -> None:  # noqa: ANN001
    """tests/fixtures/clients/<run>.json is what the pinned version sends: re-capture after
    changing a pin (python -m tests.realclients.recapture)."""
    fixture = json.loads((FIXTURES / f"{run.name}.json").read_text())
    fresh = capture(run)
    assert fresh["exit_code"] == 0, fresh["stderr"]
    assert fresh["client_version"] == fixture["client_version"]
    assert request_shape(fresh) == request_shape(fixture)
