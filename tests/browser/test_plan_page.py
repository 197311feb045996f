"""The "Plan a class" page in a real browser (issue 20, "Done when"): a teacher picks a stored
calibration from the form, gets the same answer line as `plan_class` on the same input, the table
and the plot; a class without an agent is refused on the form, not with an error page."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from research.models import Calibration
from research.planner.cost import CostModel
from tests.browser.conftest import sign_in

pytestmark = pytest.mark.backend_neutral  # once, in the embedded pass

# Slow enough that the larger classes wait longer than the target: the answer is not the largest size.
MEDIUM = CostModel(prefill_s_per_token=0.002, decode_s_per_token=0.02, decode_s_per_extra_slot=0.004,
                   request_overhead_s=0.02)


def test_a_teacher_plans_a_class_in_the_browser_and_gets_plan_classs_answer(gateway, transactional_db, teacher,
                                                                          new_page) -> None:  # noqa: ANN001
    calibration = Calibration.objects.create(source="runs", cost=MEDIUM.as_dict(), slots=2, context=8192,
                                             label="browser check")
    out = StringIO()
    call_command("plan_class", "--calibration", str(calibration.pk), "--mix", "agent:2,chat:1", "--students",
                 "1,3,6,12", "--workers", "1", "--target-p95", "3", "--duration", "60", "--scale", "0.1",
                 "--seed", "1", "--replicates", "1", stdout=out)
    expected = out.getvalue().strip().splitlines()[-1]
    largest = expected.rsplit(":", 1)[1].strip()
    assert expected.startswith("largest class with agent p95 TTFT ≤ 3") and largest in {"1", "3", "6"}

    page = new_page()
    sign_in(page, gateway.url, "teacher", "pw-teacher-1")
    page.goto(gateway.url + "/research/plan/")
    page.select_option("#id_calibration", str(calibration.pk))
    for field, value in {"mix": "agent:2,chat:1", "students": "1,3,6,12", "workers": "1", "target_p95": "3",
                         "duration": "60", "scale": "0.1", "seed": "1", "replicates": "1"}.items():
        page.fill(f"#id_{field}", value)
    page.click("#plan-form button[type=submit]")
    answer = page.locator("#plan-answer").inner_text()
    # the same class size as the command's answer, said as a sentence
    assert answer.startswith(f"With this set-up a class of {largest} waits about"), answer
    assert page.locator("table tbody tr").count() == 4  # a row per class size
    assert page.locator("figure svg").count() == 1 and page.locator("figure svg").is_visible()

    page.fill("#id_mix", "chat:3")
    page.click("#plan-form button[type=submit]")
    assert "needs an agent persona" in page.content()
    assert page.locator("#plan-answer").count() == 0 and page.locator("figure svg").count() == 0
