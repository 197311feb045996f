"""The lessons' recipes (curl lines, environment variables, config files) filled in with this
site's address, a model the student may use and, in their browser, their key. Pure: no Django.

Lesson Markdown writes `HOST`, `MODEL` and `KEY` inside code; the rendered page gets the site's
root (as the browser reached it, like /connect/), the model, and the key placeholder that the
page's script replaces with a key the student created in this tab (sessionStorage, as /connect/
does: the server never renders a raw key). Only whole words inside <code> are replaced, so prose
keeps its meaning and `ANTHROPIC_API_KEY` stays itself.
"""
from __future__ import annotations

import re
from html import escape

# The same placeholder as portal/connect.py's KEY_PLACEHOLDER (tests/lessons pins the two together).
KEY_PLACEHOLDER = "PASTE-YOUR-KEY-HERE"
_CODE = re.compile(r"<code>(.*?)</code>", re.DOTALL)
_WORDS = re.compile(r"(?<![\w-])(HOST|MODEL|KEY)(?![\w-])")


def fill_recipes(html: str, *, site: str, model: str | None) -> str:
    """`html` (render_markdown's safe output) with HOST, MODEL and KEY in code filled in. A code
    element holding the key placeholder is marked `data-snippet` for the page's script. `model`
    None leaves MODEL as written (nobody signed in, or no model served)."""
    values = {"HOST": escape(site.rstrip("/")), "MODEL": escape(model) if model else "MODEL", "KEY": KEY_PLACEHOLDER}

    def code(match: re.Match[str]) -> str:
        inner = _WORDS.sub(lambda word: values[word.group(1)], match.group(1))
        return f"<code data-snippet>{inner}</code>" if KEY_PLACEHOLDER in inner else f"<code>{inner}</code>"

    return _CODE.sub(code, html)
