"""The set-ups on /connect/, filled in with this site's address, the live models and a key.
Pure: no Django. The shapes follow docs/clients.md (each is exercised by an integration test
there); change both together.

`site` is the site's root without a trailing slash (https://ai.school.example); `key` is the
student's key or KEY_PLACEHOLDER, which the page's script replaces in the browser with a key
the student has just created (the server never renders a raw key here)."""
from __future__ import annotations

import json
from dataclasses import dataclass

KEY_PLACEHOLDER = "PASTE-YOUR-KEY-HERE"
FALLBACK_MODEL = "MODEL-ID"


@dataclass(frozen=True)
class ConnectModel:
    id: str
    usable_context: int  # tokens one request may hold (prompt + answer)
    max_output_tokens: int
    tools: bool

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


def context_warnings(models: list[ConnectModel]) -> dict[str, str]:
    """Per snippet, a warning when the model it names cannot hold that client's first request:
    with the model that can, or what to ask the teacher for."""
    if not models:
        return {}
    named = models[0]
    warnings = {}
    for snippet, (client, needed) in FIRST_REQUEST_TOKENS.items():
        if named.usable_context >= needed:
            continue
        fits = [m for m in models if m.usable_context >= needed]
        advice = (f"Use `{fits[0].id}` ({fits[0].usable_context:,} tokens) instead." if fits
                  else "No model here holds it yet: ask your teacher for the agents profile (workers with a long "
                       "context).")
        warnings[snippet] = (f"{client}'s first request is about {needed:,} tokens, more than `{named.id}` holds "
                             f"({named.usable_context:,} tokens per request). {advice}")
    return warnings


def _custom_endpoint(site: str, models: list[ConnectModel], key: str, api_type: str, route: str) -> str:
    entry = {
        "name": "OCS Intelligence",
        "vendor": "customendpoint",
        "apiKey": key,
        "apiType": api_type,
        "models": [
            {"id": m.id, "name": f"OCS {m.id}", "url": f"{site}{route}", "toolCalling": m.tools, "vision": False,
             "maxInputTokens": m.max_input_tokens, "maxOutputTokens": m.max_output_tokens}
            for m in models
        ] or [{"id": FALLBACK_MODEL, "name": "OCS", "url": f"{site}{route}", "toolCalling": True, "vision": False,
               "maxInputTokens": 4096, "maxOutputTokens": 1024}],
    }
    return json.dumps([entry], indent=2)


def setups(*, site: str, models: list[ConnectModel], key: str = KEY_PLACEHOLDER) -> dict[str, str]:
    """Every snippet the page shows, by name."""
    model = models[0].id if models else FALLBACK_MODEL
    first = models[0] if models else None
    return {
        "base_url": f"{site}/v1",
        "vscode_chat": _custom_endpoint(site, models, key, "chat-completions", "/v1/chat/completions"),
        "vscode_responses": _custom_endpoint(site, models, key, "responses", "/v1/responses"),
        "vscode_messages": _custom_endpoint(site, models, key, "messages", "/v1/messages"),
        "copilot_cli": "\n".join([
            "export COPILOT_OFFLINE=true",
            f"export COPILOT_PROVIDER_BASE_URL={site}/v1",
            "export COPILOT_PROVIDER_TYPE=openai",
            "export COPILOT_PROVIDER_WIRE_API=completions",
            f"export COPILOT_PROVIDER_API_KEY={key}",
            f"export COPILOT_MODEL={model}",
            *([f"export COPILOT_PROVIDER_MAX_PROMPT_TOKENS={first.max_input_tokens}",
               f"export COPILOT_PROVIDER_MAX_OUTPUT_TOKENS={first.max_output_tokens}"] if first else []),
            'copilot -p "Say hello"',
        ]),
        "claude_code": "\n".join([
            f"export ANTHROPIC_BASE_URL={site}",
            f"export ANTHROPIC_AUTH_TOKEN={key}",
            f"export ANTHROPIC_MODEL={model}",
            f"export ANTHROPIC_DEFAULT_HAIKU_MODEL={model}",
            f"export CLAUDE_CODE_SUBAGENT_MODEL={model}",
            "claude",
        ]),
        "codex": "\n".join([
            "# ~/.codex/config.toml",
            f'model = "{model}"',
            'model_provider = "ocs"',
            "",
            "[model_providers.ocs]",
            'name = "OCS Intelligence"',
            f'base_url = "{site}/v1"',
            'env_key = "OCS_API_KEY"',
            'wire_api = "responses"',
            "",
            "# then, in your shell:",
            f"export OCS_API_KEY={key}",
            'codex exec "Say hello"',
        ]),
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
