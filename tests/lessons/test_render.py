"""Lesson Markdown is rendered safely: whatever a file holds, nothing in it runs."""
from __future__ import annotations

from html.parser import HTMLParser

from lessons.render import render_markdown


class Elements(HTMLParser):
    """Every element and its attributes, as a browser would parse them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def assert_inert(html: str) -> None:
    for tag, attrs in Elements(html).found:
        assert tag not in {"script", "iframe", "object", "embed", "style", "img", "svg", "form"}, tag
        assert not any(name.startswith("on") or name == "style" for name in attrs), attrs
        assert not (attrs.get("href") or "").lower().startswith(("javascript:", "data:")), attrs


def test_a_script_tag_is_shown_as_text_not_run() -> None:
    html = render_markdown("Hello\n\n<script>alert('x')</script>\n")
    assert_inert(html)
    assert "&lt;script&gt;alert" in html


def test_raw_html_attributes_and_javascript_links_are_inert() -> None:
    html = render_markdown('<img src=x onerror="alert(1)">\n\n[click](javascript:alert(1)) '
                           '[ok](https://example.org)\n\n<a href="x" onclick="alert(1)">a</a>\n\n'
                           '<svg onload=alert(1)></svg> <iframe src="https://evil.example"></iframe>')
    assert_inert(html)
    assert '<a href="https://example.org" rel="noopener noreferrer">ok</a>' in html


def test_markdown_structure_survives() -> None:
    html = render_markdown("# Title\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n```sh\ncurl -N x\n```\n\n**bold** `code`")
    assert "<h2>Title</h2>" in html  # the page owns <h1>
    assert "<table>" in html and "<td>1</td>" in html
    assert '<pre tabindex="0"><code>curl -N x' in html  # tabindex: a block that scrolls is reachable by keyboard
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
