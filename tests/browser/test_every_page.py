"""The pages test_portal.py's accessibility walk does not reach — the lessons, Ground 0,
research, a class and a student, the set-password and error pages — at laptop and phone widths:
axe-core finds nothing serious or critical, and no page scrolls sideways (issue 21, item 5)."""
from __future__ import annotations

import pytest

from tests.browser.conftest import LAPTOP, PHONE, sign_in
from tests.browser.test_portal import _violations
from tests.research.test_planner_checks import load_history

pytestmark = pytest.mark.backend_neutral  # once, in the embedded pass

OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
# When a page does scroll sideways: the widest elements that stick out, and whether the site's
# stylesheet applied, so a failure says which element to fix.
WIDEST = """() => {
  const limit = document.documentElement.clientWidth;
  const out = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > limit + 1)
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string'
      ? '.' + e.className.split(' ').join('.') : '') + ' ' + Math.round(e.getBoundingClientRect().width) + 'px');
  const css = [...document.styleSheets].map(s => { try { return s.href + ':' + s.cssRules.length; }
    catch (err) { return s.href + ':unreadable'; } });
  return {elements: out.slice(0, 6), stylesheets: css};
}"""


def test_the_rest_of_the_site_passes_axe_and_fits_a_phone(gateway, worker, teacher, student, taught_class,
                                                          new_page) -> None:  # noqa: ANN001
    from accounts.models import User
    from lessons.syllabus import load_catalogue
    from portal.services import set_password_path

    from research.models import Baseline
    from tests.research.test_class_replay_accounts import _replay_run
    from tests.research.test_plan_rigs import tiny_rig_plan

    baseline = Baseline.objects.create(worker_name="rig1-a", status="done", rehearsal=True, steps=[
        {"kind": "engine", "status": "done", "run_ids": [], "note": "",
         "result": {"argv": ["-p", "20"], "rows": [{"n_prompt": 20, "n_gen": 0, "split_mode": "layer", "avg_ts": 71.5}]}},
        {"kind": "cold", "status": "done", "run_ids": [], "note": "",
         "result": {"time_to_healthy_s": 0.6, "first_generation": True, "decodes_before": 0}},
        {"kind": "speculative", "status": "skipped", "run_ids": [], "result": {},
         "note": "the worker has no draft model or n-gram mode"}])
    replay = _replay_run()  # its tables and charts, on a phone too
    tiny_rig_plan()  # "Plan the rigs" shows the newest stored search
    load_history()  # the planner checks (migration 0015's rows; a transactional test may have flushed them)
    newcomer = User.objects.create(username="newcomer")
    newcomer.set_unusable_password()
    newcomer.save()
    paths = [*[f"/lessons/{lesson.slug}/" for lesson in load_catalogue().lessons], "/lessons/", "/lessons/progress/",
             "/lessons/summary/", "/lessons/teacher/", "/ground0/", "/research/", "/research/compare/",
             "/research/start/", "/research/plan/", "/research/rigs/", f"/research/baselines/{baseline.pk}/",
             f"/research/runs/{replay.pk}/", "/research/checks/", "/research/checks/pass-20/",
             f"/teacher/classes/{taught_class.id}/", f"/teacher/students/{student.id}/", "/no/such/page/"]
    problems: dict[str, list[str]] = {}
    for label, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
        anonymous = new_page(viewport=viewport)
        anonymous.goto(gateway.url + set_password_path(user=newcomer))
        page = new_page(viewport=viewport)
        sign_in(page, gateway.url, "teacher", "pw-teacher-1")
        for path in paths:
            page.goto(f"{gateway.url}{path}")
            found = _violations(page)
            overflow = page.evaluate(OVERFLOW)
            if overflow > 0:
                found.append(f"page scrolls sideways by {overflow}px: {page.evaluate(WIDEST)}")
            if found:
                problems[f"{path} {label}"] = found
        found = _violations(anonymous) + ([f"scrolls by {o}px"] if (o := anonymous.evaluate(OVERFLOW)) > 0 else [])
        if found:
            problems[f"set-password {label}"] = found
    assert not problems, problems


def test_the_class_pages_pass_axe_for_a_student_the_teacher_and_a_teacher_of_another_class(
        gateway, worker, teacher, student, taught_class, new_page) -> None:  # noqa: ANN001
    """Issue 52: the landing page (a paused class, a student over a budget, the workers line,
    recent actions), a class and a student's page, each at both widths, for the teacher and for
    a teacher of another class; the student's home with its next steps and budgets."""
    from accounts.models import Classroom
    from accounts.services import class_pause, key_issue, limits_set, user_ensure
    from tests.browser.conftest import SCREENSHOTS
    from tests.browser.test_classroom import chat

    other = user_ensure(username="turing", role="teacher", password="pw-turing-1")[0]
    their_room = Classroom.objects.create(name="9C")
    their_room.teachers.add(other)
    _key, raw = key_issue(user=student)
    assert chat(gateway.url, raw).status_code == 200
    limits_set(target=taught_class, actor=teacher, tokens_per_day=30)  # alice is near or over it now
    class_pause(classroom=taught_class, actor=teacher, message="Exam until 10:30: no AI")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    walks = [("alice", "pw-alice-1", ["/", "/usage/", "/connect/"]),
             ("teacher", "pw-teacher-1", ["/teacher/", f"/teacher/classes/{taught_class.id}/",
                                          f"/teacher/students/{student.id}/"]),
             ("turing", "pw-turing-1", ["/teacher/", f"/teacher/classes/{their_room.id}/"])]
    problems: dict[str, list[str]] = {}
    for label, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
        for username, password, paths in walks:
            page = new_page(viewport=viewport)
            sign_in(page, gateway.url, username, password)
            for path in paths:
                page.goto(f"{gateway.url}{path}")
                name = f"issue52-{username}-{path.strip('/').replace('/', '-') or 'home'}-{label}"
                page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
                found = _violations(page)
                if (overflow := page.evaluate(OVERFLOW)) > 0:
                    found.append(f"page scrolls sideways by {overflow}px: {page.evaluate(WIDEST)}")
                if found:
                    problems[f"{username} {path} {label}"] = found
    assert not problems, problems
