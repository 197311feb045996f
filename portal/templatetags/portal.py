"""Template filters for numbers shown to people (core/numbers.py does the rounding)."""
from __future__ import annotations

import re
from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from core.numbers import ms_text, percent_of, rate_text, share_text, tokens_text

register = template.Library()
register.filter("tokens", tokens_text)
register.filter("rate", rate_text)
register.filter("ms", ms_text)
register.filter("percent", percent_of)
register.filter("share", share_text)


@register.filter
def ago(moment: datetime | None) -> str:
    """"just now" under a minute (never "0 minutes ago"), else "5 minutes ago", "2 days ago"."""
    if moment is None:
        return "never"
    if timezone.now() - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"


@register.filter
def short(value: int | float | None) -> str:
    """A bar's label that fits above it: 950 -> "950", 8,269 -> "8.3k", 2,500,000 -> "2.5M"."""
    if not value:
        return "0"
    number = float(value)
    if number >= 1_000_000:
        return f"{number / 1_000_000:.1f}M".replace(".0M", "M")
    if number >= 1_000:
        return f"{number / 1_000:.1f}k".replace(".0k", "k")
    return f"{round(number)}"


@register.filter
def code_spans(text: str) -> SafeString:
    """Plain text whose `backticked` names are code: escaped, then each pair of backticks made
    <code> (the page showed the backticks themselves)."""
    escaped = str(escape(text))
    return mark_safe(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))  # noqa: S308 - escaped above
