"""The coding agents with exactly the set-up /connect/ gives, against a worker whose slot a short
scripted session outgrows: Claude Code compacts instead of failing; Codex and the Copilot CLI
answer with the window they are told.

The worker is SmolLM2 with one slot of WINDOW tokens (YaRN over its native 8,192). Claude Code
2.1.197, told that window, compacts at WINDOW - min(answer cap, 20,000) - 13,000 tokens
(portal.connect.claude_code_compact_at: 7,352 here, with the 128-token answer cap), and its first
request is about 3,050 tokens on SmolLM2 plus the turn's ~1,400; SmolLM2 runs to the cap under
Claude Code's prompt and Claude Code asks three times more to continue, so the first turn ends near
5,000 tokens and the second reaches the threshold. Each turn is one `claude -p --continue`, as a
student typing into the same session would. (A 32-token cap and a 18,432-token slot did not work:
the compaction's summary, cut at 32 tokens, was asked to continue until the turn timed out.) The capture server
sits between the client and the gateway as a pass-through proxy, so the test sees every request
(the compaction's summary request among them) and the gateway's status for each.
"""
from __future__ import annotations

import json
import random
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.local_worker import LaunchOptions, LlamaServerProcess, LlamaServerSpec, find_default_model, free_port
from tests.conftest import FIXTURE_WORKER_KEY, wait_for
from tests.realclients.capture import CaptureServer, Exchange
from tests.realclients.clients import BIN_DIR, SHORT_SENTENCE, SINGLE_WORD, base_env
from tests.realclients.conftest import OUTPUT_CAP
from tests.realclients.test_real_clients import MODEL_RAN_TO_ITS_CAP

pytestmark = [pytest.mark.realclients, pytest.mark.windows, pytest.mark.integration, pytest.mark.timeout(1500)]

WINDOW_MODEL = "smollm2-135m-small-window"
WINDOW = 20480  # tokens in the one slot: YaRN scale 2.5 over SmolLM2's 8,192
TURN_CHARS = 7000  # of plain words per turn: ~1,400 SmolLM2 tokens, ~1,750 by Claude Code's estimate
MAX_TURNS = 4  # compaction is due at the second turn; more means it never came
RUN_TIMEOUT_S = 600
SUMMARY_PROMPT = "create a detailed summary of the conversation so far"  # Claude Code's compaction request
WORDS = ("the river bends north past the old mill where a miller keeps his grain and counts each sack "
         "before the carts leave for town while children watch from the bridge and gulls circle above").split()


@pytest.fixture(scope="module")
def small_window_llama_server(tmp_path_factory: pytest.TempPathFactory, fixture_key_file: Path) -> Iterator[str]:
    spec = LlamaServerSpec(
        model_path=find_default_model(), model_id=WINDOW_MODEL, port=free_port(), context=WINDOW, slots=1,
        options=LaunchOptions(rope_scaling="yarn", rope_scale=WINDOW / 8192, yarn_orig_ctx=8192,
                              extra_args=("--temp", "0")),
        api_key_file=fixture_key_file,
    )
    process = LlamaServerProcess(spec, log_path=tmp_path_factory.mktemp("window-llama") / "llama-server.log").start()
    try:
        process.wait_healthy(180)
        yield spec.base_url
    finally:
        process.stop()


def register_window_worker(base_url: str, *, answer_cap: int):  # noqa: ANN201
    from fleet.models import CatalogModel
    from fleet.services import worker_register

    worker = worker_register(name="window-worker", base_url=base_url, model_id=WINDOW_MODEL,
                             pool_name="production", slots=1, context_length=WINDOW, state="healthy",
                             api_key=FIXTURE_WORKER_KEY)
    CatalogModel.objects.filter(public_id=WINDOW_MODEL).update(max_output_tokens=answer_cap)
    return worker


@pytest.fixture
def small_window_worker(transactional_db, small_window_llama_server):  # noqa: ANN001, ANN201
    return register_window_worker(small_window_llama_server, answer_cap=OUTPUT_CAP)


def connect_snippets(*, site: str) -> dict[str, str]:
    """The set-ups /connect/ renders for this site and the models being served."""
    from portal.connect import setups
    from portal.selectors import served_models

    return setups(site=site, models=served_models())


def exports(snippet: str, *, key: str) -> dict[str, str]:
    """`export NAME=value` lines of a set-up, the key placeholder replaced."""
    from portal.connect import KEY_PLACEHOLDER

    found = {}
    for line in snippet.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            found[name] = value.replace(KEY_PLACEHOLDER, key)
    return found


def turn_text(turn: int) -> str:
    """Plain words, different per turn (no prefix shared with the previous turn's text)."""
    chooser = random.Random(turn)
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < TURN_CHARS:
        words.append(chooser.choice(WORDS))
    return " ".join(words)


def client_run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs a client to the end; one that outlives RUN_TIMEOUT_S is reported as exit code -1 with
    what it printed, so the test can still say which requests it sent."""
    try:
        return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as expired:
        def text(output: str | bytes | None) -> str:
            return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
        return subprocess.CompletedProcess(argv, -1, text(expired.stdout),
                                           text(expired.stderr) + f"\n(killed after {RUN_TIMEOUT_S} s)")


def messages_text(exchange: Exchange) -> str:
    body = exchange.body if isinstance(exchange.body, dict) else {}
    return json.dumps(body.get("messages") or body.get("input") or [])


def describe(exchanges: list[Exchange], outputs: list[str]) -> str:
    lines = [f"{len(exchanges)} request(s)"]
    for exchange in exchanges:
        kind = " (compaction)" if SUMMARY_PROMPT in messages_text(exchange) else ""
        lines.append(f"  {exchange.method} {exchange.path} -> {exchange.status} ({exchange.seconds:.1f} s){kind}")
        if not 200 <= exchange.status < 300:
            lines.append(f"    answer: {exchange.response_head[:600]}")
    return "\n".join(lines + ["--- client output (ends)"] + [output[-800:] for output in outputs])


def assert_all_logged_2xx(key_row, sent: int) -> list:  # noqa: ANN001
    from inference.models import RequestLog

    rows = wait_for(lambda: (list(RequestLog.objects.filter(key=key_row).order_by("at"))
                             if RequestLog.objects.filter(key=key_row).count() >= sent else None), 15)
    assert rows, f"the request log holds {RequestLog.objects.filter(key=key_row).count()} of {sent} requests"
    assert [(row.status, row.error_code) for row in rows if not 200 <= row.status < 300] == []
    return rows


def test_claude_code_with_the_connect_set_up_compacts_a_session_that_outgrows_the_slot(
        real_clients_installed, gateway, small_window_worker, student_key,  # noqa: ANN001
        tmp_path: Path) -> None:
    from portal.connect import claude_code_compact_at
    from portal.selectors import served_models

    key_row, raw_key = student_key
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    outputs: list[str] = []
    started = time.monotonic()
    with CaptureServer(upstream=gateway.url) as proxy:
        env = base_env(home)
        env.update(CLAUDE_CONFIG_DIR=str(home / ".claude"), CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                   DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1")
        snippet = connect_snippets(site=proxy.url)["claude_code"]
        env.update(exports(snippet, key=raw_key))
        assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(WINDOW), snippet
        compact_at = claude_code_compact_at(served_models()[0])
        compacted_at_turn = None
        for turn in range(MAX_TURNS):
            argv = [str(BIN_DIR / "claude"), *(["--continue"] if turn else []), "-p",
                    f"{turn_text(turn)}\n\n{SINGLE_WORD}"]
            result = client_run(argv, env, project)
            outputs.append(f"turn {turn}: exit {result.returncode}\n{result.stdout}\n{result.stderr}")
            report = describe(list(proxy.exchanges), outputs)
            assert result.stdout.strip(), f"turn {turn} printed no answer\n" + report
            assert result.returncode == 0 or MODEL_RAN_TO_ITS_CAP in result.stdout, report
            if any(SUMMARY_PROMPT in messages_text(e) for e in proxy.exchanges):
                compacted_at_turn = turn
                break
        exchanges = list(proxy.exchanges)
    seconds = time.monotonic() - started
    report = describe(exchanges, outputs)
    print(f"\nclaude-code session: {len(outputs)} turns, compaction at turn {compacted_at_turn} "
          f"(threshold {compact_at} tokens), {len(exchanges)} requests, {seconds:.0f} s")

    refused = [e for e in exchanges if e.path.startswith("/v1/") and not 200 <= e.status < 300]
    assert not refused, "the gateway refused requests\n" + report
    assert compacted_at_turn is not None, f"no compaction in {MAX_TURNS} turns\n" + report
    api = [e for e in exchanges if e.path.startswith("/v1/")]
    rows = assert_all_logged_2xx(key_row, len(api))
    for row in rows:
        print(f"  {row.path} {row.status}: {row.prompt_tokens} prompt tokens, {row.completion_tokens} completion tokens")
    summary_index = next(i for i, e in enumerate(api) if SUMMARY_PROMPT in messages_text(e))
    assert summary_index + 1 < len(api), "the turn that compacted was not sent after the summary\n" + report
    # The turn after the summary carries the summary instead of the early conversation.
    first_turn = turn_text(0)[:300]
    assert first_turn in messages_text(api[summary_index]), report
    assert first_turn not in messages_text(api[summary_index + 1]), report
    assert max(row.prompt_tokens for row in rows) + OUTPUT_CAP <= WINDOW, [row.prompt_tokens for row in rows]


@pytest.mark.parametrize("client", ["codex", "copilot_cli"])
def test_the_connect_set_up_of_codex_and_the_copilot_cli_answers_through_the_gateway(
        client: str, real_clients_installed, gateway, small_window_worker, student_key,  # noqa: ANN001
        tmp_path: Path) -> None:
    key_row, raw_key = student_key
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    with CaptureServer(upstream=gateway.url) as proxy:
        env = base_env(home)
        snippet = connect_snippets(site=proxy.url)[client]
        if client == "codex":
            config, _, shell = snippet.partition("# then")
            codex_home = home / ".codex"
            codex_home.mkdir(parents=True)
            # The page's config, with the test's telemetry off (two tables the page leaves out).
            (codex_home / "config.toml").write_text(config.removeprefix("# ~/.codex/config.toml\n")
                                                    + "\n[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n")
            env.update(CODEX_HOME=str(codex_home), **exports(shell, key=raw_key))
            assert "git init" in shell  # the trusted-directory step: Codex refuses outside a repository
            subprocess.run(["git", "init", "-q"], cwd=project, check=True, env=env)
            argv = [str(BIN_DIR / "codex"), "exec", SHORT_SENTENCE]
        else:
            env.update(COPILOT_HOME=str(home / ".copilot"), COPILOT_AUTO_UPDATE="false",
                       **exports(snippet, key=raw_key))
            assert env["COPILOT_PROVIDER_MAX_PROMPT_TOKENS"] == str(WINDOW - OUTPUT_CAP), snippet
            assert shlex.split(snippet.splitlines()[-1])[:2] == ["copilot", "-p"], snippet
            argv = [str(BIN_DIR / "copilot"), "-p", SHORT_SENTENCE, "--allow-all-tools", "--disable-client-telemetry",
                    "--no-auto-update", "--log-dir", str(home / "copilot-logs")]
        started = time.monotonic()
        result = client_run(argv, env, project)
        exchanges = list(proxy.exchanges)
    report = describe(exchanges, [f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"])
    print(f"\n{client}: exit {result.returncode} after {time.monotonic() - started:.0f} s, {len(exchanges)} request(s)")
    api = [e for e in exchanges if e.path.startswith("/v1/")]
    assert api, "the client sent no API request\n" + report
    assert all(200 <= e.status < 300 for e in api), report
    assert result.returncode == 0 and result.stdout.strip(), report
    for row in assert_all_logged_2xx(key_row, len(api)):
        print(f"  {row.path} {row.status}: {row.prompt_tokens} prompt tokens, {row.completion_tokens} completion tokens")
