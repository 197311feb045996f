"""API key format, generation and hashing. Pure: no Django.

A key is  ocs-<prefix>-<secret>:
- prefix: 10 characters [a-z0-9] (~51 bits), not secret; shown in the portal, used for lookup;
- secret: 40 characters [A-Za-z0-9] (~238 bits) from the OS CSPRNG.
Only sha256(full key) is stored. A fast hash is right here: the key is random and long, so no
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
KEY_RE = re.compile(rf"^ocs-([a-z0-9]{{{PREFIX_LENGTH}}})-([A-Za-z0-9]{{{SECRET_LENGTH}}})$")


@dataclass(frozen=True)
class NewKey:
    raw: str
    prefix: str
    secret_hash: str


def generate_key() -> NewKey:
    prefix = "".join(secrets.choice(PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))
    secret = "".join(secrets.choice(SECRET_ALPHABET) for _ in range(SECRET_LENGTH))
    raw = f"ocs-{prefix}-{secret}"
    return NewKey(raw=raw, prefix=prefix, secret_hash=hash_key(raw))


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def parse_prefix(raw: str) -> str | None:
    """The lookup prefix of a well-formed key, or None for anything that is not one."""
    match = KEY_RE.match(raw)
    return match.group(1) if match else None


def hash_matches(raw: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(raw), stored_hash)
