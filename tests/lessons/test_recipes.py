"""Lesson recipes carry this site's address, the student's model and the key placeholder that the
page's script fills in; prose and other words are left alone."""
from __future__ import annotations

import pytest

from lessons.recipes import KEY_PLACEHOLDER, fill_recipes
from lessons.render import render_markdown
from portal.connect import KEY_PLACEHOLDER as CONNECT_PLACEHOLDER


def test_the_placeholder_is_the_one_connect_uses() -> None:
    assert KEY_PLACEHOLDER == CONNECT_PLACEHOLDER


def test_only_whole_words_inside_code_are_filled() -> None:
    html = render_markdown("Use HOST here.\n\n```\nexport ANTHROPIC_BASE_URL=HOST\nexport ANTHROPIC_API_KEY=KEY\n"
                           "curl HOST/v1 -d '{\"model\": \"MODEL\"}'\n```\n\nInline `HOST/ollama/KEY` and `MODELS`.")
    filled = fill_recipes(html, site="https://ai.school.example/", model="qwen<3>")
    assert "Use HOST here." in filled  # prose is prose
    assert "ANTHROPIC_BASE_URL=https://ai.school.example\n" in filled
    assert f"ANTHROPIC_API_KEY={KEY_PLACEHOLDER}" in filled
    assert "&quot;qwen&lt;3&gt;&quot;" in filled or "\"qwen&lt;3&gt;\"" in filled  # escaped, never raw
    assert f"<code data-snippet>https://ai.school.example/ollama/{KEY_PLACEHOLDER}</code>" in filled
    assert "<code>MODELS</code>" in filled


def test_without_a_model_the_placeholder_stays() -> None:
    filled = fill_recipes(render_markdown("`COPILOT_MODEL=MODEL`"), site="http://x", model=None)
    assert "COPILOT_MODEL=MODEL" in filled


@pytest.mark.django_db
def test_a_lesson_page_fills_recipes_for_the_signed_in_student(client, student) -> None:  # noqa: ANN001
    from fleet.services import worker_register

    worker_register(name="w1", base_url="http://127.0.0.1:9/", model_id="smollm2-135m-instruct",
                    pool_name="production", slots=2, context_length=4096, state="healthy")
    client.force_login(student)
    html = client.get("/lessons/editors/").content.decode()
    body = html.split('id="lesson-body"', 1)[1]
    assert "export ANTHROPIC_BASE_URL=http://testserver" in body
    assert "ANTHROPIC_MODEL=smollm2-135m-instruct" in body
    assert f"ANTHROPIC_AUTH_TOKEN={KEY_PLACEHOLDER}" in body
    assert 'id="recipe-key-note"' in html and "lessons/recipes.js" in html


@pytest.mark.django_db
def test_a_not_yet_message_appears_once(client, student) -> None:  # noqa: ANN001
    client.force_login(student)
    page = client.post("/lessons/editors/steps/first-editor-request/", follow=True).content.decode()
    assert page.count("Not yet:") == 1


