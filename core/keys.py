"""API key and rig token format, generation and hashing. Pure: no Django.

A student key is  ocs-<prefix>-<secret>, a rig agent's token  ocsrig-<prefix>-<secret>, a
worker's key (llama-server's --api-key-file, fleet/worker_keys.py) ocswk-<prefix>-<secret>; the
schemes never match each other, so a student key can never pass as a rig token or back.
- prefix: 10 characters [a-z0-9] (~51 bits), not secret; shown in the portal, used for lookup;
- secret: 40 characters [A-Za-z0-9] (~238 bits) from the OS CSPRNG.
Only sha256(full key) is stored for student keys and rig tokens (a worker's key is kept whole:
the gateway sends it). A fast hash is right here: the key is random and long, so no
dictionary or brute-force attack applies, and the gateway verifies it on every request.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
from dataclasses import dataclass

PREFIX_ALPHABET = string.ascii_lowercase + string.digits
SECRET_ALPHABET = string.ascii_letters + string.digits
PREFIX_LENGTH = 10
SECRET_LENGTH = 40
STUDENT_SCHEME = "ocs"
RIG_SCHEME = "ocsrig"
WORKER_SCHEME = "ocswk"


def _token_re(scheme: str) -> re.Pattern[str]:
    return re.compile(rf"^{scheme}-([a-z0-9]{{{PREFIX_LENGTH}}})-([A-Za-z0-9]{{{SECRET_LENGTH}}})$")


KEY_RE = _token_re(STUDENT_SCHEME)
_PATTERNS = {STUDENT_SCHEME: KEY_RE, RIG_SCHEME: _token_re(RIG_SCHEME)}


@dataclass(frozen=True)
class NewKey:
    raw: str
    prefix: str
    secret_hash: str


def generate_key(scheme: str = STUDENT_SCHEME) -> NewKey:
    prefix = "".join(secrets.choice(PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))
    secret = "".join(secrets.choice(SECRET_ALPHABET) for _ in range(SECRET_LENGTH))
    raw = f"{scheme}-{prefix}-{secret}"
    return NewKey(raw=raw, prefix=prefix, secret_hash=hash_key(raw))


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def parse_prefix(raw: str, scheme: str = STUDENT_SCHEME) -> str | None:
    """The lookup prefix of a well-formed token of `scheme`, or None for anything else."""
    match = _PATTERNS[scheme].match(raw)
    return match.group(1) if match else None


def prefix_of(shown: str) -> str:
    """The prefix in what a person types: "ab12cd34ef", "ocs-ab12cd34ef-…" or a whole key."""
    return shown.removeprefix(f"{STUDENT_SCHEME}-").split("-")[0]


def hash_matches(raw: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(raw), stored_hash)


def chat_session_fingerprint(session_key: str) -> str:
    """What a chat-page key records of its sign-in session (accounts.services.chat_key_issue):
    a sha256, never the session key itself."""
    return hashlib.sha256(f"ocs-chat:{session_key}".encode()).hexdigest()
