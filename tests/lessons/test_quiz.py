"""Check questions: each student's own stable order of choices, every attempt recorded, the
teacher sees attempts and first-try correctness, and right answers spread over the positions."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from lessons.syllabus import load_catalogue
from lessons.models import Answer
from lessons.quiz import choice_order

CATALOGUE = load_catalogue()


def test_the_order_is_stable_per_student_and_differs_between_students() -> None:
    q = CATALOGUE.questions[0]
    assert choice_order(question_id=q.id, user_id=7, choices=3) == choice_order(question_id=q.id, user_id=7, choices=3)
    assert choice_order(question_id=q.id, user_id=None, choices=3) == [0, 1, 2]
    orders = {tuple(choice_order(question_id=q.id, user_id=uid, choices=3)) for uid in range(1, 40)}
    assert len(orders) >= 4  # of the six orders of three choices
    assert all(sorted(order) == [0, 1, 2] for order in orders)


def test_where_the_right_answer_lands_is_spread_for_one_student() -> None:
    landed = Counter(choice_order(question_id=q.id, user_id=5, choices=len(q.choices)).index(q.answer)
                     for q in CATALOGUE.questions)
    assert len(landed) >= 2 and max(landed.values()) < len(CATALOGUE.questions)


def test_the_catalogue_spreads_right_answers_over_the_positions() -> None:
    positions = Counter(q.answer for q in CATALOGUE.questions)
    width = max(len(q.choices) for q in CATALOGUE.questions)
    assert max(positions.values()) <= len(CATALOGUE.questions) // width + 1, positions


@pytest.mark.django_db
def test_the_page_shows_my_order_and_posts_the_catalogue_index(client, student, teacher, taught_class) -> None:  # noqa: ANN001
    lesson = CATALOGUE.lesson("api")
    assert lesson is not None
    question = lesson.questions[0]
    client.force_login(student)
    html = client.get("/lessons/api/").content.decode()
    form = html.split(f'id="question-{question.id}"', 1)[1].split("</form>", 1)[0]
    shown = [int(v) for v in re.findall(r'name="choice" value="(\d+)"', form)]
    assert shown == choice_order(question_id=question.id, user_id=student.id, choices=len(question.choices))
    wrong = (question.answer + 1) % len(question.choices)
    client.post(f"/lessons/api/questions/{question.id}/", {"choice": wrong})
    client.post(f"/lessons/api/questions/{question.id}/", {"choice": wrong})
    client.post(f"/lessons/api/questions/{question.id}/", {"choice": question.answer})
    second = lesson.questions[1]
    client.post(f"/lessons/api/questions/{second.id}/", {"choice": second.answer})
    answer = Answer.objects.get(user=student, question=question.id)
    assert answer.correct and answer.attempts == 3 and answer.first_try_correct is False

    client.force_login(teacher)
    table = client.get("/lessons/teacher/").content.decode()
    row = table.split('data-student="alice"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="attempts-cell">4</td>' in row and '<td class="first-try-cell">1/2</td>' in row
    csv_text = client.get("/lessons/teacher/progress.csv").content.decode()
    header, alice = csv_text.splitlines()[0].split(","), next(
        line for line in csv_text.splitlines() if ",alice," in line).split(",")
    record = dict(zip(header, alice))
    assert (record["answer_attempts"], record["right_first_try"], record["questions_answered"]) == ("4", "1", "2")
