"""The chat page's way into the gateway (/chat/v1/chat/completions), pure: no Django.

The page (portal/chat.py) holds a short-lived key of its own in a cookie the gateway sets and
only the gateway reads: HttpOnly (no script on the page can read it, an injected one included),
SameSite=Strict and Path=/chat/ (a browser sends it only with requests that a page of this site
starts, and only to the chat page and this route; never to /v1/, where keys come in headers).
A request to this route must also carry the page's header (CHAT_HEADER) and an Origin of this
site: a page elsewhere cannot set a custom header without a CORS preflight, which this route never
grants, and its Origin would not match. With those checked, the key goes through the pipeline like
any other (inference/pipeline.py serve()): the same limits, budgets, pause, fair share and log.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

CHAT_COOKIE = "ocs_chat"
CHAT_COOKIE_PATH = "/chat/"
CHAT_HEADER = "X-OCS-Chat"
CHAT_ROUTE = "/chat/v1/chat/completions"


def chat_key_from_cookies(cookie_header: str) -> str | None:
    """The chat key in a Cookie header, if any (the first one named CHAT_COOKIE)."""
    for part in cookie_header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == CHAT_COOKIE and value.strip():
            return value.strip().strip('"')
    return None


def chat_request_refusal(headers: Mapping[str, str], *, trusted_origins: Iterable[str] = ()) -> str | None:
    """Why this request may not use the chat key, in words; None if it may. It must come from a
    page of this site: the chat header set, an Origin whose host (and port) is the Host the
    browser asked for, or one of `trusted_origins` (CSRF_TRUSTED_ORIGINS, for a proxy that
    rewrites Host), and no `Sec-Fetch-Site` other than same-origin."""
    if headers.get(CHAT_HEADER) != "1":
        return "This address answers only the site's own chat page."
    origin = (headers.get("Origin") or "").strip()
    fetch_site = (headers.get("Sec-Fetch-Site") or "same-origin").strip().lower()
    if not origin or origin == "null" or fetch_site != "same-origin":
        return "The chat page's key works only on this site's own chat page."
    host = (headers.get("Host") or "").strip().lower()
    if urlsplit(origin).netloc.lower() == host and host:
        return None
    if origin.rstrip("/") in {trusted.rstrip("/") for trusted in trusted_origins}:
        return None
    return "The chat page's key works only on this site's own chat page."
