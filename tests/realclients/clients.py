"""How each pinned client is run headless against a base URL, with nothing of the real home.

A run is one (client, wire) pair from ``RUNS``. ``prepare`` builds its command line and its
environment: a fresh HOME (and the client's own config directory) under a temporary directory,
no inherited credentials or proxies, telemetry, update checks and sign-in off, so the client
talks only to the base URL it is given (the gateway, or the capture server).

The clients are installed by scripts/ensure_clients.sh into tests/clients/node_modules.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_DIR = ROOT / "tests" / "clients"
BIN_DIR = CLIENTS_DIR / "node_modules" / ".bin"
KEY_ENV = "OCS_API_KEY"  # the variable Codex reads the key from (its provider's env_key)
# Prompts SmolLM2 (greedy) answers in a few dozen tokens under each client's system prompt. The
# model's answer depends on the client's prompt around it: under Claude Code's, "Say hello in one
# short sentence." loops to the output cap (Claude Code then exits 1); under Copilot's, the
# single-word prompt runs to the cap and Copilot asks twice more to continue.
SHORT_SENTENCE = "Say hello in one short sentence."
SINGLE_WORD = "Reply with the single word: hello"


@dataclass(frozen=True)
class Run:
    """One client on one wire. ``name`` is also the fixture's file stem."""

    name: str
    client: str  # claude | copilot | codex
    wire: str  # anthropic | completions | responses
    binary: str
    prompt: str


RUNS: tuple[Run, ...] = (
    Run("claude-code-anthropic", "claude", "anthropic", "claude", SINGLE_WORD),
    Run("copilot-completions", "copilot", "completions", "copilot", SHORT_SENTENCE),
    Run("copilot-responses", "copilot", "responses", "copilot", SHORT_SENTENCE),
    Run("copilot-anthropic", "copilot", "anthropic", "copilot", SHORT_SENTENCE),
    Run("codex-responses", "codex", "responses", "codex", SHORT_SENTENCE),
)


@dataclass(frozen=True)
class Prepared:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    home: Path  # everything the client may write lies under here


def installed_version(package: str) -> str:
    import json

    return str(json.loads((CLIENTS_DIR / "node_modules" / package / "package.json").read_text())["version"])


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: PATH and locale from this process, a private HOME and TMPDIR."""
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
        # Loopback only: no proxy, and nothing to bypass one for.
        "NO_PROXY": "127.0.0.1,localhost",
    }


def prepare(run: Run, *, base_url: str, key: str, model: str, workdir: Path) -> Prepared:
    """The command and environment for one headless run of ``run`` against ``base_url``.

    ``base_url`` is the server root (``http://127.0.0.1:PORT``, no ``/v1``); each client gets
    the form it documents. ``workdir`` must be empty or not exist; HOME and the project
    directory (the client's working directory) are made under it.
    """
    home = workdir / "home"
    project = workdir / "project"
    home.mkdir(parents=True, exist_ok=True)
    project.mkdir(parents=True, exist_ok=True)
    env = base_env(home)
    binary = str(BIN_DIR / run.binary)
    if run.client == "claude":
        env.update(
            ANTHROPIC_BASE_URL=base_url,
            ANTHROPIC_AUTH_TOKEN=key,
            ANTHROPIC_MODEL=model,
            ANTHROPIC_DEFAULT_OPUS_MODEL=model,
            ANTHROPIC_DEFAULT_SONNET_MODEL=model,
            ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
            ANTHROPIC_SMALL_FAST_MODEL=model,
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_BUG_COMMAND="1",
            CLAUDE_CODE_DISABLE_TERMINAL_TITLE="1",
        )
        return Prepared([binary, "-p", run.prompt], env, project, home)
    if run.client == "copilot":
        env.update(
            COPILOT_HOME=str(home / ".copilot"),
            COPILOT_OFFLINE="true",
            COPILOT_AUTO_UPDATE="false",
            COPILOT_PROVIDER_BASE_URL=base_url if run.wire == "anthropic" else base_url + "/v1",
            COPILOT_PROVIDER_TYPE="anthropic" if run.wire == "anthropic" else "openai",
            COPILOT_PROVIDER_API_KEY=key,
            COPILOT_MODEL=model,
        )
        if run.wire != "anthropic":
            env["COPILOT_PROVIDER_WIRE_API"] = run.wire
        argv = [binary, "-p", run.prompt, "--allow-all-tools", "--disable-client-telemetry", "--no-auto-update",
                "--log-dir", str(home / "copilot-logs")]
        return Prepared(argv, env, project, home)
    if run.client == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(codex_config(base_url=base_url, model=model))
        env.update(CODEX_HOME=str(codex_home), **{KEY_ENV: key})
        argv = [binary, "exec", "--skip-git-repo-check", "--sandbox", "read-only", run.prompt]
        return Prepared(argv, env, project, home)
    raise ValueError(f"unknown client {run.client!r}")


def codex_config(*, base_url: str, model: str) -> str:
    """CODEX_HOME/config.toml: one custom provider ``ocs`` on the Responses wire."""
    lines = [
        f'model = "{model}"',
        'model_provider = "ocs"',
        'approval_policy = "never"',
        "",
        "[model_providers.ocs]",
        'name = "OCS Intelligence"',
        f'base_url = "{base_url}/v1"',
        f'env_key = "{KEY_ENV}"',
        'wire_api = "responses"',
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
    ]
    return "\n".join(lines)


def execute(prepared: Prepared, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Runs the client to the end; stdin is closed (headless)."""
    return subprocess.run(prepared.argv, cwd=prepared.cwd, env=prepared.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout_s, check=False)
