"""The teacher's pages under /teacher/ (staff only): classes and students, imports, limits,
keys, usage with CSV export, the request log, and the live fleet view. Every action goes
through a service that audits it."""
from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from accounts.access import staff_required
from accounts.audit import acting_user, audit_record
from accounts.key_cache import site_defaults
from accounts.limits.budgets import budget_grant, budget_reset
from accounts.limits.resolution import NUMERIC, UNSET, resolve
from accounts.login_throttle import locked_usernames, login_clear
from accounts.models import AuditEvent, ClassPauseWindow, Classroom, User
from accounts.pause import next_time_of_day
from accounts.school_sign_in import classroom_set_self_enrolment, school_config
from accounts.selectors import (
    classes_in_use,
    classes_visible_to,
    keys_visible_to,
    pause_status,
    sees_everyone,
    student_policy,
    students_visible_to,
)
from accounts.services import (
    class_pause,
    class_pause_window_add,
    class_pause_window_remove,
    class_resume,
    class_set_chat,
    class_term_set,
    classroom_archive,
    classroom_create,
    classroom_rename,
    classroom_set_weight,
    key_revoke,
    limits_set,
    student_move,
    user_set_active,
)
from fleet.models import Worker
from fleet.services import worker_disable, worker_drain, worker_enable, worker_move
from inference.models import RequestLog
from inference.selectors import class_daily_usage
from portal import selectors
from portal.audit_words import Actor, sentence
from portal.csv_import import CsvProblem, parse_students_csv
from portal.fleet_status import fleet_status
from portal.forms import (
    BudgetForm,
    ClassNameForm,
    ImportStudentsForm,
    LimitsForm,
    MoveWorkerForm,
    PauseForm,
    PauseWindowForm,
    RequestFilterForm,
    ShareWeightForm,
    TermForm,
)
from portal.services import ImportedStudent, set_password_path, students_import
from portal.stats import bar_heights, day_chart
from portal.views import site_root

View = Callable[..., HttpResponse]
REQUESTS_PER_PAGE = 50


def _form_errors(form: forms.Form) -> str:
    """A refused form's errors as one line for a message: "field error; other error"."""
    return "; ".join(" ".join(str(e) for e in errors) for errors in form.errors.values())


def _viewer(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # staff_required ran first
    return user


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise Http404("no such class") from None


def _limits_initial(target: Classroom | User) -> dict[str, Any]:
    return {name: getattr(target, name) for name in LimitsForm.base_fields}


def _inherited(target: Classroom | User) -> dict[str, str]:
    """What each limit field left empty on `target` takes: for a student, their class's value
    or the site default; for a class, the site default."""
    policy = resolve(defaults=site_defaults(), classroom=target.classroom if isinstance(target, User) else None,
                     student=UNSET if isinstance(target, User) else target, key=UNSET)
    room = target.classroom if isinstance(target, User) else None
    texts = {name: "no cap" if value is None else f"{value:,}"
             for name in NUMERIC if name in LimitsForm.base_fields
             for value in [getattr(policy.student, name)]}
    texts["allowed_models"] = (room.allowed_models if room and room.allowed_models else "all")
    texts["allowed_pools"] = (room.allowed_pools if room and room.allowed_pools else "all")
    return texts


def audit_lines(events: list[AuditEvent], viewer: User) -> list[tuple[AuditEvent, str]]:
    """Audit rows with their sentence ("You imported 2 students into Year 10")."""
    return [(event, sentence(action=event.action, subject=event.subject, detail=event.detail, viewer_id=viewer.id,
                             actor=None if event.actor is None else Actor(
                                 event.actor.id, event.actor.get_full_name() or event.actor.username)))
            for event in events]


@staff_required
def index(request: HttpRequest) -> HttpResponse:
    """The teacher's day at a glance: each class today against yesterday, who is near a limit,
    pauses (with Resume and Pause), the workers in a line, and recent actions in words."""
    viewer = _viewer(request)
    rooms = classes_in_use(viewer)
    admin = sees_everyone(viewer)
    unassigned = User.objects.filter(role=User.Role.STUDENT, classroom__isnull=True).count() if admin else 0
    audit = AuditEvent.objects.select_related("actor")
    return render(request, "teacher/index.html", {
        "classes": selectors.classes_today(rooms), "unassigned": unassigned,
        "archived": list(classes_visible_to(viewer).filter(archived_at__isnull=False).order_by("name")),
        "near_limit": selectors.students_near_limit(rooms)[:20],
        "near_percent": selectors.NEAR_LIMIT_PERCENT,
        "workers": selectors.workers_in_one_line(),
        "pause_form": PauseForm(), "class_form": ClassNameForm(),
        "audit": audit_lines(list((audit if admin else audit.filter(actor=viewer))[:10]), viewer),
    })


@staff_required
@require_POST
def class_create(request: HttpRequest) -> HttpResponse:
    form = ClassNameForm(request.POST)
    if not form.is_valid():
        messages.error(request, "No class made: " + _form_errors(form))
        return redirect("portal:teacher")
    try:
        room = classroom_create(name=form.cleaned_data["name"], actor=acting_user(request))
    except ValueError as problem:
        messages.error(request, str(problem))
        return redirect("portal:teacher")
    messages.success(request, f"Class {room.name} is made. Add students from a student's page (Move to a class) "
                              "or by importing a class list.")
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_rename(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    form = ClassNameForm(request.POST)
    try:
        if not form.is_valid():
            raise ValueError("Not renamed: " + _form_errors(form))
        changed = classroom_rename(classroom=room, name=form.cleaned_data["name"], actor=acting_user(request))
        messages.success(request, f"Renamed: the class is now {room.name}." if changed else "Nothing changed.")
    except ValueError as problem:
        messages.error(request, str(problem))
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_archive(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    archive = request.POST.get("archived") != "0"
    classroom_archive(classroom=room, archived=archive, actor=acting_user(request))
    messages.success(request, f"Class {room.name} is archived: it leaves your dashboard; its history stays and "
                              "its students keep their accounts." if archive else f"Class {room.name} is back.")
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def student_move_view(request: HttpRequest, user_id: int) -> HttpResponse:
    """Move a student to another class: a teacher between classes they teach, an admin anywhere."""
    viewer = _viewer(request)
    person = get_object_or_404(students_visible_to(viewer), id=user_id)
    wanted = request.POST.get("classroom", "")
    if wanted == "none" and sees_everyone(viewer):
        target = None
    else:
        target = get_object_or_404(classes_in_use(viewer), id=_int(wanted))
    try:
        moved = student_move(student=person, classroom=target, actor=acting_user(request))
    except ValueError as problem:
        messages.error(request, str(problem))
    else:
        where = target.name if target else "no class"
        messages.success(request, f"{person.username} is now in {where}: its limits and pauses apply from their "
                                  "next request." if moved else "Nothing changed.")
    return redirect("portal:teacher-student", user_id=person.id)


@staff_required
def classroom(request: HttpRequest, class_id: int | None = None) -> HttpResponse:
    viewer = _viewer(request)
    room = get_object_or_404(classes_visible_to(viewer), id=class_id) if class_id is not None else None
    if room is None and not sees_everyone(viewer):
        raise Http404("Students in no class are the admin's.")
    students = list(selectors.students_of(room).select_related("classroom"))
    today = selectors.today_totals([s.id for s in students])
    # The roll-ups hold the days before today; today comes from the request log, as in the table.
    local_today = timezone.localdate()
    daily = [(day, d["prompt_tokens"] + d["completion_tokens"], d["requests"]) for d in class_daily_usage(room)
             if (day := date.fromisoformat(d["day"])) < local_today] if room else []
    daily.append((local_today, sum(t["tokens"] for t in today.values()), sum(t["requests"] for t in today.values())))
    return render(request, "teacher/class.html", {
        "room": room, "rows": [(s, today.get(s.id, {"requests": 0, "tokens": 0})) for s in students],
        "chart": day_chart(daily),
        "limits_form": LimitsForm(initial=_limits_initial(room), inherited=_inherited(room)) if room else None,
        "pause": pause_status(room) if room else None,
        "near_limit": selectors.near_limit(students)[:20] if room else [],
        "term_form": TermForm(initial={"term_starts": room.term_starts, "term_ends": room.term_ends}) if room else None,
        "pause_form": PauseForm(), "window_form": PauseWindowForm(),
        "windows": list(room.pause_windows.all()) if room else [],
        "weight_form": ShareWeightForm(initial={"fair_weight": room.fair_weight}) if room else None,
        "school_sign_in": school_config() is not None,
        "chat_share": selectors.chat_share(room) if room else None, "chat_share_days": selectors.CHAT_SHARE_DAYS,
    })


@staff_required
def student(request: HttpRequest, user_id: int) -> HttpResponse:
    viewer = _viewer(request)
    person = get_object_or_404(students_visible_to(viewer).select_related("classroom"), id=user_id)
    days = selectors.usage_days(person)
    lock = locked_usernames().get(person.username)
    return render(request, "teacher/student.html", {
        "sign_in_locked_until": datetime.fromtimestamp(lock[1], tz=UTC) if lock else None,
        "person": person, "keys": list(selectors.keys_of(person)), "policy": student_policy(person),
        "days": days, "chart": day_chart([(d.day, d.tokens, d.requests) for d in days]),
        "recent": list(selectors.recent_requests(person, limit=10)),
        "limits_form": LimitsForm(initial=_limits_initial(person), inherited=_inherited(person)),
        "budgets": selectors.budgets_shown([person])[person.id], "budget_form": BudgetForm(),
        "move_targets": list(classes_in_use(viewer).filter(is_replay=False).order_by("name")),
        "may_unassign": sees_everyone(viewer),
        "link": request.session.pop("set_password_link", None) if request.session.get(
            "set_password_link_for") == person.id else None,
    })


@staff_required
@require_POST
def student_set_active(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(students_visible_to(_viewer(request)), id=user_id)
    if person.is_staff:
        messages.error(request, "Staff accounts are managed in the admin.")
    else:
        active = request.POST.get("active") == "1"
        user_set_active(user=person, active=active, actor=acting_user(request))
        messages.success(request, f"{person.username} is {'enabled' if active else 'disabled: their keys stop working now'}.")
    return redirect("portal:teacher-student", user_id=person.id)


@staff_required
@require_POST
def student_sign_in_unlock(request: HttpRequest, user_id: int) -> HttpResponse:
    """Lifts every sign-in lock of the student (a classmate's wrong passwords from the school's
    address lock them out from there). Audited."""
    person = get_object_or_404(students_visible_to(_viewer(request)), id=user_id)
    login_clear(username=person.username)
    audit_record(actor=acting_user(request), action="student.sign_in_unlocked", subject=person.username)
    messages.success(request, f"{person.username} can sign in again from every network.")
    return redirect("portal:teacher-student", user_id=person.id)


@staff_required
@require_POST
def student_link(request: HttpRequest, user_id: int) -> HttpResponse:
    """A new one-time set-password link, shown once on the student's page."""
    person = get_object_or_404(students_visible_to(_viewer(request)), id=user_id)
    if person.is_staff:
        messages.error(request, "Staff accounts are managed in the admin.")
        return redirect("portal:teacher-student", user_id=person.id)
    audit_record(actor=acting_user(request), action="student.password_link", subject=person.username)
    request.session["set_password_link"] = site_root(request) + set_password_path(user=person)
    request.session["set_password_link_for"] = person.id
    return redirect("portal:teacher-student", user_id=person.id)


def _apply_limits(request: HttpRequest, target: Classroom | User) -> bool:
    form = LimitsForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Limits not saved: " + "; ".join(
            f"{form.fields[name].label}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items()))
        return False
    changes = {name: form.cleaned_data[name] for name in form.fields}
    changed = limits_set(target=target, actor=acting_user(request), **changes)
    messages.success(request, f"Saved ({', '.join(changed)})." if changed else "Nothing changed.")
    return True


@staff_required
@require_POST
def student_limits(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(students_visible_to(_viewer(request)), id=user_id)
    _apply_limits(request, person)
    return redirect("portal:teacher-student", user_id=person.id)


@staff_required
@require_POST
def student_budget(request: HttpRequest, user_id: int, action: str) -> HttpResponse:
    """action "grant": a one-off extra allowance; "reset": what the period used back to zero."""
    person = get_object_or_404(students_visible_to(_viewer(request)), id=user_id)
    form = BudgetForm(request.POST)
    if not form.is_valid() or action not in ("grant", "reset") or (action == "grant" and not form.cleaned_data["tokens"]):
        messages.error(request, "Nothing changed: choose a budget" + (" and a number of tokens." if action == "grant"
                                                                         else "."))
        return redirect("portal:teacher-student", user_id=person.id)
    period = form.cleaned_data["period"]
    try:
        if action == "grant":
            budget_grant(student=person, period=period, tokens=form.cleaned_data["tokens"], actor=acting_user(request))
            messages.success(request, f"{person.username} has {form.cleaned_data['tokens']} extra tokens this {period}.")
        else:
            used = budget_reset(student=person, period=period, actor=acting_user(request))
            messages.success(request, f"Reset: the {used} tokens {person.username} used this {period} no longer count.")
    except ValueError as problem:
        messages.error(request, str(problem))
    return redirect("portal:teacher-student", user_id=person.id)


@staff_required
@require_POST
def class_limits(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    _apply_limits(request, room)
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_weight(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    form = ShareWeightForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Share weight not saved: " + " ".join(
            str(e) for errors in form.errors.values() for e in errors))
    elif classroom_set_weight(classroom=room, weight=form.cleaned_data["fair_weight"], actor=acting_user(request)):
        messages.success(request, f"Saved: share weight {room.fair_weight:g}.")
    else:
        messages.success(request, "Nothing changed.")
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_self_enrolment(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    on = request.POST.get("on") == "1"
    classroom_set_self_enrolment(classroom=room, on=on, actor=acting_user(request))
    messages.success(request, f"New school accounts now join {room.name}." if on else
                     "Self-enrolment is off: school accounts that match no student are refused.")
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_chat(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    on = request.POST.get("on") == "1"
    class_set_chat(classroom=room, enabled=on, actor=acting_user(request))
    messages.success(request, f"The chat page is on for {room.name}." if on else
                     f"The chat page is off for {room.name}: open chat pages are refused from their next message.")
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_term(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    form = TermForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Term not saved: " + _form_errors(form))
    else:
        changed = class_term_set(classroom=room, starts=form.cleaned_data["term_starts"],
                                 ends=form.cleaned_data["term_ends"], actor=acting_user(request))
        messages.success(request, "Term saved." if changed else "Nothing changed.")
    return redirect("portal:teacher-class", class_id=room.id)


def _back(request: HttpRequest, room: Classroom) -> HttpResponse:
    """To the dashboard when the button was pressed there, else to the class's page."""
    if request.POST.get("back") == "dashboard":
        return redirect("portal:teacher")
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_pause_view(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    form = PauseForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not paused: " + _form_errors(form))
        return _back(request, room)
    now = timezone.localtime()
    data = form.cleaned_data
    until = (now + timedelta(minutes=data["minutes"]) if data["minutes"]
             else next_time_of_day(data["until"], now) if data["until"] else None)
    class_pause(classroom=room, actor=acting_user(request), until=until, message=data["message"])
    messages.success(request, f"Class {room.name} is paused " + (
        f"until {timezone.localtime(until):%H:%M}." if until else "until you resume it.")
        + " Answers already running finish.")
    return _back(request, room)


@staff_required
@require_POST
def class_resume_view(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    class_resume(classroom=room, actor=acting_user(request))
    messages.success(request, f"Class {room.name} is resumed: its students are served again.")
    return _back(request, room)


@staff_required
@require_POST
def class_window_add(request: HttpRequest, class_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    form = PauseWindowForm(request.POST)
    if form.is_valid():
        try:
            class_pause_window_add(classroom=room, actor=acting_user(request), **form.cleaned_data)
        except ValueError as problem:
            messages.error(request, str(problem))
        else:
            messages.success(request, "Added to the timetable.")
    else:
        messages.error(request, "Not added: " + _form_errors(form))
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def class_window_remove(request: HttpRequest, class_id: int, window_id: int) -> HttpResponse:
    room = get_object_or_404(classes_visible_to(_viewer(request)), id=class_id)
    window = get_object_or_404(ClassPauseWindow, id=window_id, classroom=room)
    class_pause_window_remove(window=window, actor=acting_user(request))
    messages.success(request, "Removed from the timetable.")
    return redirect("portal:teacher-class", class_id=room.id)


@staff_required
@require_POST
def key_revoke_view(request: HttpRequest, key_id: int) -> HttpResponse:
    key = get_object_or_404(keys_visible_to(_viewer(request)), id=key_id)
    key_revoke(key=key, actor=acting_user(request))
    messages.success(request, f"Revoked {key.display} of {key.user.username}.")
    return redirect("portal:teacher-student", user_id=key.user_id)


@staff_required
@require_http_methods(["GET", "POST"])
def import_students(request: HttpRequest) -> HttpResponse:
    form = ImportStudentsForm(request.POST or None, request.FILES or None)
    imported, problems, status = None, [], 200
    if request.method == "POST":
        if form.is_valid():
            try:
                rows = parse_students_csv(form.cleaned_data["file"])
                imported = students_import(rows=rows, classroom_name=form.cleaned_data["classroom"] or None,
                                           actor=acting_user(request),
                                           initial_passwords=form.cleaned_data["initial_passwords"])
            except CsvProblem as problem:
                problems, status = problem.problems, 400
            except ValueError as problem:
                problems, status = [str(problem)], 400
        else:
            status = 400
    site = site_root(request)
    response = render(request, "teacher/import.html", {
        "form": form, "imported": imported, "problems": problems, "site": site,
        "links_csv": _links_csv(imported or [], site)}, status=status)
    if imported:
        response["Cache-Control"] = "no-store"
    return response


def _links_csv(imported: list[ImportedStudent], site: str) -> str:
    """username, link, initial password: for the teacher to download (generated into the page,
    never stored)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["username", "set_password_link", "initial_password"])
    for student in imported:
        writer.writerow([student.username, "" if student.initial_password else site + student.set_password_path,
                         student.initial_password or ""])
    return out.getvalue()


@staff_required
def usage(request: HttpRequest) -> HttpResponse:
    viewer = _viewer(request)
    scope = students_visible_to(viewer)
    if request.GET.get("class"):
        scope = scope.filter(classroom=get_object_or_404(classes_visible_to(viewer), id=_int(request.GET["class"])))
    users = None if sees_everyone(viewer) and not request.GET.get("class") else scope
    if request.GET.get("format") == "csv" and request.GET.get("per") == "day":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="usage-per-day-{timezone.localdate()}.csv"'
        writer = csv.writer(response)
        writer.writerow(["day", "username", "class", "requests", "prompt_tokens", "completion_tokens"])
        for row in selectors.usage_per_day(users=users):
            writer.writerow([row["day"].isoformat(), row["username"], row["classroom"], row["requests"],
                             row["prompt_tokens"], row["completion_tokens"]])
        return response
    people = selectors.usage_by_person(users=users)
    classes = selectors.usage_by_class(people)
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="usage-{timezone.localdate()}.csv"'
        writer = csv.writer(response)
        first_day, last_day = timezone.localdate() - timedelta(days=30), timezone.localdate()
        writer.writerow(["username", "class", "requests", "prompt_tokens", "completion_tokens", "from", "to"])
        for person in people:
            writer.writerow([person["username"], person["classroom"], person["requests"], person["prompt_tokens"],
                             person["completion_tokens"], first_day.isoformat(), last_day.isoformat()])
        return response
    top = [float(p["prompt_tokens"] + p["completion_tokens"]) for p in people[:20]]
    return render(request, "teacher/usage.html", {
        "people": people, "classes": classes, "chart": list(zip(people[:20], bar_heights(top, height=100)))})


def _filtered_requests(form: RequestFilterForm) -> Any:
    rows = RequestLog.objects.select_related("user").order_by("-at")
    if not form.is_valid():
        return rows.none()
    data = form.cleaned_data
    if data["student"]:
        rows = rows.filter(user__username__icontains=data["student"].strip())
    if data["classroom"]:
        rows = rows.filter(user__classroom__name__iexact=data["classroom"].strip())
    if data["model"]:
        rows = rows.filter(model=data["model"].strip())
    if data["worker"]:
        rows = rows.filter(worker_name=data["worker"].strip())
    status = data["status"]
    if status == "ok":
        rows = rows.filter(status__lt=400)
    elif status == "error":
        rows = rows.filter(status__gte=400)
    elif status:
        rows = rows.filter(status=int(status))
    if data["since"]:
        rows = rows.filter(at__gte=data["since"])
    if data["until"]:
        rows = rows.filter(at__lt=data["until"])
    return rows


@staff_required
def requests(request: HttpRequest) -> HttpResponse:
    form = RequestFilterForm(request.GET or None)
    rows = _filtered_requests(form) if request.GET else RequestLog.objects.select_related("user").order_by("-at")
    viewer = _viewer(request)
    if not sees_everyone(viewer):
        rows = rows.filter(user__in=students_visible_to(viewer))
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="requests.csv"'
        writer = csv.writer(response)
        writer.writerow(["at", "username", "model", "worker", "status", "error_code", "prompt_tokens",
                         "completion_tokens", "ttft_ms", "total_ms", "tokens_per_s"])
        for row in rows[:10000]:
            writer.writerow([row.at.isoformat(), row.user.username if row.user else "", row.model, row.worker_name,
                             row.status, row.error_code, row.prompt_tokens, row.completion_tokens, row.ttft_ms,
                             row.total_ms, round(row.tokens_per_s, 1) if row.tokens_per_s is not None else ""])
        return response
    page = Paginator(rows, REQUESTS_PER_PAGE, allow_empty_first_page=True).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "teacher/requests.html", {"form": form if request.GET else RequestFilterForm(),
                                                     "page": page, "query": query.urlencode()})


@staff_required
def fleet(request: HttpRequest) -> HttpResponse:
    return render(request, "teacher/fleet.html", {"status": async_to_sync(fleet_status)()})


WORKER_ACTIONS = {"drain": worker_drain, "disable": worker_disable, "enable": worker_enable}


@staff_required
@require_POST
def worker_action(request: HttpRequest, worker_id: int, action: str) -> HttpResponse:
    worker = get_object_or_404(Worker.objects.select_related("pool"), id=worker_id)
    actor = acting_user(request)
    if action == "move":
        form = MoveWorkerForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Choose a pool that exists.")
        else:
            pool = form.cleaned_data["pool"]
            worker_move(worker=worker, pool=pool, actor=actor)
            messages.success(request, f"{worker.name} is now in pool {pool.name}.")
    elif action in WORKER_ACTIONS:
        changed = WORKER_ACTIONS[action](worker=worker, actor=actor)
        messages.success(request, f"{worker.name}: {action} done." if changed else f"{worker.name}: nothing to do.")
    else:
        messages.error(request, f"Unknown action {action!r}.")
    return redirect("portal:teacher-fleet")

