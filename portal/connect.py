"""The set-ups on /connect/, filled in with this site's address, the live models and a key.
Pure: no Django. The shapes follow docs/clients.md (each is exercised by an integration test
there); change both together.

`site` is the site's root without a trailing slash (https://ai.school.example); `key` is the
student's key or KEY_PLACEHOLDER, which the page's script replaces in the browser with a key
the student has just created (the server never renders a raw key here)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

KEY_PLACEHOLDER = "PASTE-YOUR-KEY-HERE"
FALLBACK_MODEL = "MODEL-ID"


@dataclass(frozen=True)
class ConnectModel:
    id: str
    usable_context: int  # tokens one request may hold (prompt + answer)
    max_output_tokens: int
    tools: bool
    description: str = ""  # the catalogue's one line for students (the chat page's picker)

    @property
    def max_input_tokens(self) -> int:
        return max(1, self.usable_context - self.max_output_tokens)


# Prompt tokens of each client's first request, measured on the captured requests in
# tests/fixtures/clients/ (README there; SmolLM2's tokenizer). A model whose usable context is
# below this refuses the client's very first request (or the client refuses to send it).
FIRST_REQUEST_TOKENS = {
    "copilot_cli": ("Copilot CLI", 5400),
    "claude_code": ("Claude Code", 3050),
    "codex": ("Codex", 4580),
}

# Claude Code 2.1.197 (its bundled source): a model whose name does not start with `claude-` gets
# CLAUDE_CODE_MAX_CONTEXT_TOKENS as its window (else 200,000). It keeps min(output cap, 20,000)
# tokens free for the answer and compacts the conversation 13,000 tokens before that, but only when
# the compaction window is not "auto": CLAUDE_CODE_AUTO_COMPACT_WINDOW set (it is raised to at least
# 100,000, then capped at the model's window) makes it compact there; without it, it waits for the
# API to answer "prompt is too long".
CLAUDE_CODE_ANSWER_ROOM_MAX = 20_000
CLAUDE_CODE_COMPACT_BUFFER = 13_000
# Codex sends no output cap (the gateway applies the model's): it must compact while the prompt
# plus one answer still fits; the last fifth of the prompt budget is left for what one turn adds.
CODEX_COMPACT_SHARE = 0.8
# VS Code 1.133.0 counts a Custom Endpoint's window 16,384 tokens larger than the entry says
# (microsoft/vscode#331426): maxInputTokens leaves that much free where the model has room for it
# and a prompt of at least VSCODE_MIN_INPUT_TOKENS.
VSCODE_OVERCOUNT_TOKENS = 16_384
VSCODE_OVERCOUNT_VERSION = "1.133"
VSCODE_MIN_INPUT_TOKENS = 4096
# VS Code 1.132 hides Custom Endpoint models from the model picker without this user setting
# (microsoft/vscode#329545).
VSCODE_BYOK_SETTING = '"chat.agentHost.byokModels.enabled": true'


def claude_code_compact_at(model: ConnectModel) -> int:
    """Tokens of conversation at which Claude Code, told the model's window, compacts it."""
    return model.usable_context - min(model.max_output_tokens, CLAUDE_CODE_ANSWER_ROOM_MAX) - CLAUDE_CODE_COMPACT_BUFFER


def codex_compact_limit(model: ConnectModel) -> int:
    """Codex's `model_auto_compact_token_limit`: tokens of conversation at which it compacts."""
    return int(model.max_input_tokens * CODEX_COMPACT_SHARE)


def vscode_max_input_tokens(model: ConnectModel) -> int:
    """`maxInputTokens` for a Custom Endpoint entry: the prompt budget less VS Code 1.133's
    over-count where the model has room for it, else the plain prompt budget."""
    room = model.max_input_tokens - VSCODE_OVERCOUNT_TOKENS
    return room if room >= VSCODE_MIN_INPUT_TOKENS else model.max_input_tokens


def vscode_overcount_fits(model: ConnectModel) -> bool:
    """Whether the model's entry leaves room for VS Code 1.133's over-count."""
    return vscode_max_input_tokens(model) < model.max_input_tokens


def context_needed(snippet: str, model: ConnectModel) -> int:
    """Tokens of context a coding agent needs from `model` to work: its first request, the
    model's answer, and for the clients that compact, the room they keep free for it (below
    that, every turn compacts or is refused)."""
    first = FIRST_REQUEST_TOKENS[snippet][1]
    answer = model.max_output_tokens
    if snippet == "claude_code":
        return first + min(answer, CLAUDE_CODE_ANSWER_ROOM_MAX) + CLAUDE_CODE_COMPACT_BUFFER
    if snippet == "codex":
        return math.ceil(first / CODEX_COMPACT_SHARE) + answer
    return first + answer


@dataclass(frozen=True)
class ClientFit:
    """Which model a coding agent's set-up names, or why there is none."""

    model: ConnectModel | None  # None: no model here can run the client
    note: str = ""  # plain words for the student: why this model, or why it won't work


def client_fits(models: list[ConnectModel]) -> dict[str, ClientFit]:
    """Per coding agent: the first model (in page order) that holds what the client needs
    (context_needed); a note when that is not the first model, a plain "won't work" when none is."""
    if not models:
        return {snippet: ClientFit(None) for snippet in FIRST_REQUEST_TOKENS}
    named = models[0]
    biggest = max(models, key=lambda m: m.usable_context)
    fits: dict[str, ClientFit] = {}
    for snippet, (client, _) in FIRST_REQUEST_TOKENS.items():
        usable = [m for m in models if m.usable_context >= context_needed(snippet, m)]
        if usable and usable[0] is named:
            fits[snippet] = ClientFit(named)
        elif usable:
            fits[snippet] = ClientFit(usable[0], (
                f"Set up with `{usable[0].id}`: `{named.id}` ({named.usable_context:,} tokens) is too small for "
                f"{client}, which needs about {context_needed(snippet, named):,}."))
        else:
            subject, holder = (("this model", f"`{named.id}` holds") if len(models) == 1
                               else ("any model here", f"the largest, `{biggest.id}`, holds"))
            fits[snippet] = ClientFit(None, (
                f"Won't work with {subject}: {client}'s first request is bigger than the model's memory, once "
                f"{client} keeps room for the answer{' and for summarising a long session' if snippet != 'copilot_cli' else ''} "
                f"(it needs about {context_needed(snippet, biggest):,} tokens; {holder} {biggest.usable_context:,}). "
                f"Ask your teacher for the agents profile (workers with a long context)."))
    return fits


@dataclass(frozen=True)
class Windows:
    """What the page says about each client's window, next to its set-up."""

    fits: dict[str, ClientFit]
    claude_compact_at: int | None  # tokens of conversation; None: no set-up
    codex_compact_at: int | None
    vscode_tight: list[str]  # models whose entry cannot leave room for VS Code 1.133's over-count
    vscode_overcount: int = VSCODE_OVERCOUNT_TOKENS
    vscode_overcount_version: str = VSCODE_OVERCOUNT_VERSION


def windows(models: list[ConnectModel]) -> Windows:
    fits = client_fits(models)
    claude, codex = fits["claude_code"].model, fits["codex"].model
    return Windows(fits=fits, claude_compact_at=claude_code_compact_at(claude) if claude else None,
                   codex_compact_at=codex_compact_limit(codex) if codex else None,
                   vscode_tight=[m.id for m in models if not vscode_overcount_fits(m)])


def context_warnings(models: list[ConnectModel]) -> dict[str, str]:
    """Per coding agent whose set-up does not name the first model, why (see client_fits)."""
    return {snippet: fit.note for snippet, fit in client_fits(models).items() if fit.note}


def _custom_endpoint(site: str, models: list[ConnectModel], key: str, api_type: str, route: str) -> str:
    entry = {
        "name": "OCS Intelligence",
        "vendor": "customendpoint",
        "apiKey": key,
        "apiType": api_type,
        "models": [
            {"id": m.id, "name": f"OCS {m.id}", "url": f"{site}{route}", "toolCalling": m.tools, "vision": False,
             "maxInputTokens": vscode_max_input_tokens(m), "maxOutputTokens": m.max_output_tokens}
            for m in models
        ] or [{"id": FALLBACK_MODEL, "name": "OCS", "url": f"{site}{route}", "toolCalling": True, "vision": False,
               "maxInputTokens": 4096, "maxOutputTokens": 1024}],
    }
    return json.dumps([entry], indent=2)


def _copilot_cli(site: str, model: ConnectModel | None, key: str) -> str:
    return "\n".join([
        "export COPILOT_OFFLINE=true",
        f"export COPILOT_PROVIDER_BASE_URL={site}/v1",
        "export COPILOT_PROVIDER_TYPE=openai",
        "export COPILOT_PROVIDER_WIRE_API=completions",
        f"export COPILOT_PROVIDER_API_KEY={key}",
        f"export COPILOT_MODEL={model.id if model else FALLBACK_MODEL}",
        *([f"export COPILOT_PROVIDER_MAX_PROMPT_TOKENS={model.max_input_tokens}",
           f"export COPILOT_PROVIDER_MAX_OUTPUT_TOKENS={model.max_output_tokens}"] if model else []),
        'copilot -p "Say hello"',
    ])


def _claude_code(site: str, model: ConnectModel | None, key: str) -> str:
    name = model.id if model else FALLBACK_MODEL
    return "\n".join([
        f"export ANTHROPIC_BASE_URL={site}",
        f"export ANTHROPIC_AUTH_TOKEN={key}",
        f"export ANTHROPIC_MODEL={name}",
        f"export ANTHROPIC_DEFAULT_HAIKU_MODEL={name}",
        f"export CLAUDE_CODE_SUBAGENT_MODEL={name}",
        *([f"export CLAUDE_CODE_MAX_CONTEXT_TOKENS={model.usable_context}",
           f"export CLAUDE_CODE_AUTO_COMPACT_WINDOW={model.usable_context}",
           f"export CLAUDE_CODE_MAX_OUTPUT_TOKENS={model.max_output_tokens}"] if model else []),
        "claude",
    ])


def _codex(site: str, model: ConnectModel | None, key: str) -> str:
    return "\n".join([
        "# ~/.codex/config.toml",
        f'model = "{model.id if model else FALLBACK_MODEL}"',
        'model_provider = "ocs"',
        *([f"model_context_window = {model.usable_context}",
           f"model_auto_compact_token_limit = {codex_compact_limit(model)}"] if model else []),
        "",
        "[model_providers.ocs]",
        'name = "OCS Intelligence"',
        f'base_url = "{site}/v1"',
        'env_key = "OCS_API_KEY"',
        'wire_api = "responses"',
        "",
        "# then, in your shell, inside your project (Codex runs only in a git repository):",
        f"export OCS_API_KEY={key}",
        "git init -q   # once, if the project is not a git repository yet",
        'codex exec "Say hello"',
    ])


def setups(*, site: str, models: list[ConnectModel], key: str = KEY_PLACEHOLDER) -> dict[str, str]:
    """Every snippet the page shows, by name. Each coding agent's set-up names the model
    client_fits chose for it, with that model's window."""
    model = models[0].id if models else FALLBACK_MODEL
    fits = client_fits(models)
    return {
        "base_url": f"{site}/v1",
        "vscode_chat": _custom_endpoint(site, models, key, "chat-completions", "/v1/chat/completions"),
        "vscode_responses": _custom_endpoint(site, models, key, "responses", "/v1/responses"),
        "vscode_messages": _custom_endpoint(site, models, key, "messages", "/v1/messages"),
        "vscode_setting": VSCODE_BYOK_SETTING,
        "copilot_cli": _copilot_cli(site, fits["copilot_cli"].model, key),
        "claude_code": _claude_code(site, fits["claude_code"].model, key),
        "codex": _codex(site, fits["codex"].model, key),
        "ollama_url": f"{site}/ollama/{key}",
        "curl": "\n".join([
            f"curl -N {site}/v1/chat/completions \\",
            f'  -H "Authorization: Bearer {key}" -H "Content-Type: application/json" \\',
            f"""  -d '{{"model": "{model}", "stream": true, "messages": [{{"role": "user", "content": "Hi"}}]}}'""",
        ]),
        "openai_python": "\n".join([
            "from openai import OpenAI",
            "",
            f'client = OpenAI(base_url="{site}/v1", api_key="{key}")',
            f'reply = client.chat.completions.create(model="{model}",',
            '                                       messages=[{"role": "user", "content": "Hi"}])',
            "print(reply.choices[0].message.content)",
        ]),
        "anthropic_python": "\n".join([
            "import anthropic",
            "",
            f'client = anthropic.Anthropic(base_url="{site}", api_key="{key}")',
            f'message = client.messages.create(model="{model}", max_tokens=256,',
            '                                  messages=[{"role": "user", "content": "Hi"}])',
            "print(message.content[0].text)",
        ]),
    }
