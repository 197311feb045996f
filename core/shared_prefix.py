"""A prompt prefix many students send, reusable across them only once k distinct students sent it.
Pure: no I/O (the counts live in the live state, the files on the workers: inference/shared_prefix.py).

Every request of a coding agent begins with its client's system prompt (the Copilot CLI's is ~5,400
tokens, and on a rig every first turn on a worker computes it again). Cache isolation
(core/slot_owners.py) forbids reusing one student's prompt for another, because the reuse shows in
the returned counts and in the time to first token. This module is the one exception, and its rule:

- Only the request's leading system (or developer) message is ever shared, cut into blocks of
  BLOCK_CHARS characters. Block i is named by a keyed hash of blocks 0..i (a chain), so a name says
  nothing of the text and a block is only ever "the same" as another when all text before it is too.
- The gateway counts, per block name, the distinct students who sent it (the live state, with a
  TTL). The public prefix of a request is its longest run of leading blocks each sent by at least
  k students (`OCS_SHARED_PREFIX_K`; 0, the default, turns it off; under MIN_K it is refused: with
  k = 2 a prober and one classmate make a block public, so a prober could confirm a guess of one
  classmate's block). A trailing part shorter than a block is never public.
- Only the public prefix's text is ever computed into a shared slot file, so what another student can
  find in the cache (by counts or by timing) is at most text that k distinct students, the prober
  included, sent as the start of their system prompt: a prober learns that k - 1 others sent it,
  never what one classmate alone wrote. Text that k - 1 others did send (a system prompt the teacher
  handed out) is no secret from the class by this rule; choose k above the size of any group whose
  shared text must stay private, and above the number of accounts one person could use.
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any

BLOCK_CHARS = 1024  # ~250-300 tokens of English or JSON
MAX_BLOCKS = 128  # 128 kB of system prompt: more than any client sends today
MIN_PUBLIC_BLOCKS = 2  # a shorter public prefix is not worth a slot-file round trip
LEADING_ROLES = ("system", "developer")
MIN_K = 3


def leading_message(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(role, text) of the chat body's first message when it is a system or developer message
    whose content is a string, else None (a request without one shares nothing)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return None
    first = messages[0]
    role, content = first.get("role"), first.get("content")
    if role not in LEADING_ROLES or not isinstance(content, str):
        return None
    return role, content


def block_names(text: str, secret: bytes) -> list[str]:
    """The chained, keyed names of `text`'s whole blocks (at most MAX_BLOCKS)."""
    names: list[str] = []
    previous = b""
    for index in range(min(len(text) // BLOCK_CHARS, MAX_BLOCKS)):
        block = text[index * BLOCK_CHARS:(index + 1) * BLOCK_CHARS].encode()
        digest = hmac.new(secret, previous + block, hashlib.sha256).digest()[:16]
        names.append(digest.hex())
        previous = digest
    return names


def public_blocks(senders: Sequence[int], k: int) -> int:
    """How many leading blocks are public: each sent by at least k distinct students (k >= MIN_K).
    Fewer than MIN_PUBLIC_BLOCKS counts as none."""
    if k < MIN_K:
        return 0
    count = 0
    for seen in senders:
        if seen < k:
            break
        count += 1
    return count if count >= MIN_PUBLIC_BLOCKS else 0


def public_text(text: str, blocks: int) -> str:
    return text[:blocks * BLOCK_CHARS]
