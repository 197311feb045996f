"""OpenAI legacy completions (POST /v1/completions). Pure: no Django.

One prompt per request: llama-server runs a separate generation for each prompt of an array,
which would hold one slot and one token reservation for N answers, so an array of several
prompts is refused (an array of token ids is one prompt). Allow-listed like chat.
"""
from __future__ import annotations

from typing import Any

from core.errors import invalid_request
from inference.protocols import openai_chat
from inference.protocols.base import Call, Plan, Protocol, Target
from inference.validation import check_optional_int, check_stream, parse_json_object, require_model

WORKER_PATH = "/v1/completions"
FORWARDED = ("model", "prompt", "stream", "stream_options", "temperature", "top_p", "stop", "presence_penalty",
             "frequency_penalty", "seed", "logprobs", "ignore_eos")


def _check_prompt(prompt: Any) -> None:
    if prompt is None:
        raise invalid_request("Missing required parameter: 'prompt'.", param="prompt")
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < 2**31 for p in prompt):
            return  # one prompt, as token ids
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return
        if all(isinstance(p, str) for p in prompt):
            raise invalid_request("Send one prompt per request: an array of several prompts is not supported here.",
                                  param="prompt")
    raise invalid_request("`prompt` must be a string, or an array of token ids.", param="prompt")


def parse(raw: bytes) -> Call:
    body = parse_json_object(raw)
    model = require_model(body)
    _check_prompt(body.get("prompt"))
    stream = check_stream(body)
    openai_chat.check_shared_options(body)
    check_optional_int(body, "best_of", minimum=1, maximum=1)
    check_optional_int(body, "logprobs", minimum=0, maximum=5)
    return Call(model=model, stream=stream, body=body, size=len(raw), max_tokens=body.get("max_tokens"))


def plan(call: Call, target: Target) -> Plan:
    body = {name: call.body[name] for name in FORWARDED if call.body.get(name) is not None}
    body["model"] = call.model
    body["max_tokens"] = target.max_tokens
    if isinstance(body["prompt"], list) and len(body["prompt"]) == 1 and isinstance(body["prompt"][0], str):
        body["prompt"] = body["prompt"][0]
    return Plan(path=WORKER_PATH, body=body)


PROTOCOL = Protocol(client="openai", keepalive=openai_chat.KEEPALIVE, parse=parse, plan=plan,
                    error_status=openai_chat.error_status, error_body=openai_chat.error_body,
                    error_event=openai_chat.error_event)
