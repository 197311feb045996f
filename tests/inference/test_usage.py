from __future__ import annotations

import json

from core.private_access import private_access_allowed
from inference.usage import Usage, UsageSniffer


def usage_of(answer: dict) -> Usage:  # what dispatch does with a whole (parsed) answer
    usage = Usage()
    usage.absorb(answer)
    return usage


def counts(usage: Usage) -> tuple[int, int]:
    return usage.prompt_tokens, usage.completion_tokens


def test_usage_from_openai_anthropic_and_llama_timings() -> None:
    assert counts(usage_of({"usage": {"prompt_tokens": 31, "completion_tokens": 12}})) == (31, 12)
    assert counts(usage_of({"usage": {"input_tokens": 9, "output_tokens": 4}})) == (9, 4)
    timings = {"choices": [], "timings": {"prompt_n": 2, "cache_n": 30, "predicted_n": 7,
                                          "prompt_per_second": 812.5, "predicted_per_second": 84.2}}
    usage = usage_of(timings)
    assert counts(usage) == (32, 7) and usage.cached_tokens == 30 and usage.total == 39
    assert (usage.prompt_per_second, usage.predicted_per_second) == (812.5, 84.2)
    nothing = usage_of({"choices": []})  # an answer that reports no counts
    assert counts(nothing) == (0, 0) and not nothing.reported


def test_the_sniffer_reads_only_the_events_that_report_usage() -> None:
    usage = Usage()
    sniffer = UsageSniffer(usage)
    sniffer.feed(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n')
    assert counts(usage) == (0, 0)
    sniffer.feed(b'event: message_start\ndata: {"type": "message_start", "message": {"usage": '
                 b'{"input_tokens": 20, "output_tokens": 0}}}\n\n')
    sniffer.feed(b'event: message_delta\ndata: {"type": "message_delta", "usage": {"output_tokens": 5}}\n\n')
    assert counts(usage) == (20, 5) and sniffer.usage is usage


def test_private_access_needs_a_private_address_without_a_proxy_or_the_token() -> None:
    nets = ["127.0.0.0/8", "100.64.0.0/10"]
    check = lambda **kw: private_access_allowed(**{"forwarded_for": None, "authorization": "", "token": "",  # noqa: E731
                                                   "networks": nets, **kw})
    assert check(remote_addr="127.0.0.1") and check(remote_addr="100.64.3.9")
    assert not check(remote_addr="203.0.113.7") and not check(remote_addr="garbage")
    assert not check(remote_addr="127.0.0.1", forwarded_for="203.0.113.7")  # came through the public proxy
    assert check(remote_addr="203.0.113.7", authorization="Bearer s3cret", token="s3cret")
    assert not check(remote_addr="203.0.113.7", authorization="Bearer wrong", token="s3cret")
    assert not check(remote_addr="203.0.113.7", authorization="Bearer ", token="")


def test_the_tool_is_known_from_the_headers_each_client_really_sends() -> None:
    """Headers as captured from the pinned clients (tests/fixtures/clients)."""
    from inference.client_tools import client_tool

    assert client_tool({"User-Agent": "claude-cli/2.1.197 (external, sdk-cli)"}) == "claude-code"
    assert client_tool({"User-Agent": "codex_exec/0.171.0 (Debian 12.0.0; x86_64)", "Originator": "codex_exec"}) == "codex"
    assert client_tool({"User-Agent": "OpenAI/JS 5.20.1", "X-Interaction-Type": "conversation-user",
                        "X-Initiator": "user"}) == "copilot"
    assert client_tool({"User-Agent": "GitHubCopilotChat/0.30.0"}) == "copilot"
    assert client_tool({"User-Agent": "OpenAI/JS 5.20.1"}) == ""
    assert client_tool({"User-Agent": "curl/8.0"}, path="/ollama/xyz/v1/chat/completions") == "copilot"


def test_anthropic_prompt_tokens_include_those_read_from_the_cache() -> None:
    """A follow-up request whose prompt mostly came from the worker's cache: Anthropic reports
    the cached part apart from input_tokens; the request log counts the whole prompt."""
    from inference.usage import Usage

    usage = Usage()
    usage.absorb({"type": "message_start", "message": {"usage": {
        "input_tokens": 20, "cache_read_input_tokens": 4380, "output_tokens": 0}}})
    assert (usage.prompt_tokens, usage.cached_tokens) == (4400, 4380)


def test_a_stream_counts_the_content_events_it_relays_and_nothing_else() -> None:
    sniffer = UsageSniffer()
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},  # the opening: no token
        {"choices": [{"index": 0, "delta": {"content": "I"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": "{\"a"}}]}}]},
        {"choices": [{"index": 0, "text": "-"}]},  # the completions route
        {"choices": [{"index": 0, "delta": {"content": ""}}]},  # empty: no token
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "timings": {"predicted_n": 4}},
    ]
    stream = b"".join(b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events)
    sniffer.feed(stream[:150])  # cut anywhere: an event split between two reads is counted once at most
    sniffer.feed(stream[150:] + b"data: [DONE]\n\n")
    assert 3 <= sniffer.usage.relayed_tokens <= 4 and sniffer.usage.completion_tokens == 4
    whole = UsageSniffer()
    whole.feed(stream)
    assert whole.usage.relayed_tokens == 4
