"""Template filters for numbers shown to people (core/numbers.py does the rounding)."""
from __future__ import annotations

from django import template

from core.numbers import ms_text, percent_of, rate_text, tokens_text

register = template.Library()
register.filter("tokens", tokens_text)
register.filter("rate", rate_text)
register.filter("ms", ms_text)
register.filter("percent", percent_of)
