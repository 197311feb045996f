"""The chat page's route checks, pure (inference/chat_page.py); the page itself: tests/portal/test_chat.py."""
from __future__ import annotations

from core.api_http import Headers
from inference.chat_page import CHAT_HEADER, chat_key_from_cookies, chat_request_refusal
from inference.client_tools import client_tool


def headers(**values: str) -> Headers:
    sent = {"Host": "ai.school.example", "Origin": "https://ai.school.example", CHAT_HEADER: "1"}
    sent.update(values)
    return Headers([(k.encode(), v.encode()) for k, v in sent.items() if v])


def test_the_sites_own_page_may_use_the_key() -> None:
    assert chat_request_refusal(headers()) is None
    assert chat_request_refusal(headers(**{"Sec-Fetch-Site": "same-origin"})) is None
    assert chat_request_refusal(headers(Host="AI.school.example")) is None


def test_a_request_from_anywhere_else_is_refused() -> None:
    assert chat_request_refusal(headers(**{CHAT_HEADER: ""})) is not None
    assert chat_request_refusal(headers(Origin="https://evil.example")) is not None
    assert chat_request_refusal(headers(Origin="https://ai.school.example.evil.example")) is not None
    assert chat_request_refusal(headers(Origin="")) is not None
    assert chat_request_refusal(headers(Origin="null")) is not None
    assert chat_request_refusal(headers(**{"Sec-Fetch-Site": "same-site"})) is not None
    assert chat_request_refusal(headers(Host="")) is not None


def test_a_proxy_that_rewrites_host_is_allowed_through_the_trusted_origins() -> None:
    behind = headers(Host="127.0.0.1:8000")
    assert chat_request_refusal(behind) is not None
    assert chat_request_refusal(behind, trusted_origins=["https://ai.school.example"]) is None


def test_the_key_is_read_from_the_cookie_header() -> None:
    assert chat_key_from_cookies("a=1; ocs_chat=ocs-abc-def; b=2") == "ocs-abc-def"
    assert chat_key_from_cookies("ocs_chat_other=x; sessionid=y") is None
    assert chat_key_from_cookies("") is None


def test_the_chat_route_is_logged_as_the_chat_page_whatever_its_headers_say() -> None:
    assert client_tool({"User-Agent": "claude-cli/2.0"}, path="/chat/v1/chat/completions") == "chat"
    assert client_tool({"User-Agent": "Mozilla/5.0"}, path="/v1/chat/completions") == ""
