"""Lesson Markdown to HTML that is safe to put in a page. Pure: no Django.

Invariant: whatever a lesson file holds, the output contains no script, no event handler
attribute, no `javascript:` URL and no style: markdown-it renders with raw HTML escaped, and
nh3 (the Ammonia sanitizer) then keeps only an allow-list of tags and attributes.
"""
from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")

ALLOWED_TAGS = {
    "a", "abbr", "blockquote", "br", "code", "del", "em", "h2", "h3", "h4", "hr", "li", "ol", "p", "pre",
    "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {"a": {"href", "title"}, "td": {"style"}, "th": {"style"}}
ALLOWED_STYLE = {"text-align"}


def render_markdown(text: str) -> str:
    """Safe HTML for `text`. Headings `#` in a lesson become <h2> (the page owns <h1>)."""
    html = _MARKDOWN.render(text)
    html = html.replace("<h1>", "<h2>").replace("</h1>", "</h2>")
    cleaned = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        filter_style_properties=ALLOWED_STYLE,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
    )
    # After cleaning (these attributes are ours, never the text's): a code block or a table that
    # scrolls sideways on a phone is reachable by keyboard.
    return (cleaned.replace("<pre>", '<pre tabindex="0">')
            .replace("<table>", '<div class="table-wrap" tabindex="0" role="region" aria-label="Table, scrolls '
                                'sideways on small screens"><table>')
            .replace("</table>", "</table></div>"))
