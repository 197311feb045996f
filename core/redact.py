"""Keeps API keys out of log lines.

Keys look like ocs-<prefix>-<secret> (rig tokens ocsrig-…, workers' keys ocswk-…). The filter replaces the secret part wherever it appears
(bearer headers, x-api-key values, /ollama/<key>/ paths, exception text), keeping the prefix so
an operator can still tell which key was involved; any other /ollama/<segment> (a mistyped key)
is replaced whole. settings.LOGGING puts the filter on every handler, Django's loggers included.
"""
from __future__ import annotations

import logging
import re

KEY_PATTERN = re.compile(r"\b(ocs(?:rig|wk)?-[a-z0-9]{10})-[A-Za-z0-9]{20,}")
# Whatever else sits where Copilot puts the key (a key with a typo is still nearly a secret).
OLLAMA_PATH_PATTERN = re.compile(r"(/ollama/)(?!ocs-[a-z0-9]{10}-\[redacted\](?:[/\s\"']|$))[^/\s\"'?]+")


def _key_redacted(match: re.Match[str]) -> str:
    return f"{match.group(1)}-[redacted]"


def _path_redacted(match: re.Match[str]) -> str:
    return f"{match.group(1)}[redacted]"


def redact(text: str) -> str:
    # Functions, not r"\1…" templates: a template is compiled by importing `re` from C, which fails
    # at interpreter shutdown, when an unclosed connection's __del__ still logs through this filter.
    return OLLAMA_PATH_PATTERN.sub(_path_redacted, KEY_PATTERN.sub(_key_redacted, text))


class RedactKeysFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg = cleaned
            record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
