"""A teacher's recorded actions (AuditEvent rows) as sentences a person reads on the dashboard:
"You imported 2 students into Year 10", "Ms Ray set Year 10's limit to 30 requests a minute".
Pure: the row's fields in, a sentence out; an action it does not know is still shown, plainly."""
from __future__ import annotations

import re
from dataclasses import dataclass

LIMIT_WORDS = {
    "requests_per_minute": ("{v} requests a minute", "requests a minute"),
    "tokens_per_day": ("{v} tokens a day", "tokens a day"),
    "tokens_per_week": ("{v} tokens a week", "tokens a week"),
    "tokens_per_term": ("{v} tokens a term", "tokens a term"),
    "concurrency": ("{v} requests at once", "requests at once"),
    "allowed_models": ("only the models {v}", "models allowed"),
    "allowed_pools": ("only the pools {v}", "pools allowed"),
    "fair_weight": ("a share weight of {v}", "share weight"),
    "access_expires_at": ("access until {v}", "end of access"),
}
GROUND0 = {"ground0_tick": "ticked the Ground 0 deliverable {s}", "ground0_untick": "unticked the Ground 0 "
           "deliverable {s}", "ground0_owner_set": "made {d} the owner of {s} on Ground 0",
           "ground0_owner_clear": "cleared the owner of {s} on Ground 0", "ground0_sprint_set": "set the sprint {s}"}
SIMPLE = {
    "class.created": "created the class {c}", "class.archived": "archived the class {c}",
    "class.restored": "brought back the class {c}", "class.resumed": "resumed {c}",
    "student.enabled": "enabled {s}'s account", "student.disabled": "disabled {s}'s account: their keys stopped",
    "student.sign_in_unlocked": "unlocked {s}'s sign-in", "student.password_link": "made a new set-password link "
    "for {s}", "worker.drained": "drained the worker {s}", "worker.disabled": "disabled the worker {s}",
    "worker.enabled": "enabled the worker {s}",
}


@dataclass(frozen=True)
class Actor:
    id: int
    name: str


def _number(text: str) -> str:
    return f"{int(text):,}" if text.isdigit() else text


def _limits(detail: str) -> str:
    """"requests_per_minute=30, tokens_per_day=inherit" -> "30 requests a minute, tokens a day as inherited"."""
    parts = []
    for field, _, value in (item.partition("=") for item in detail.split(", ") if item):
        given, noun = LIMIT_WORDS.get(field, (field.replace("_", " ") + " {v}", field.replace("_", " ")))
        parts.append(f"{noun} back to the default" if value == "inherit" else given.format(v=_number(value)))
    return ", ".join(parts)


def _of(subject: str) -> str:
    """Whose limit: "class Year 10" -> "Year 10's"; "alice key ocs-ab…" -> "alice's key ocs-ab…"."""
    if subject.startswith("class "):
        return subject.removeprefix("class ") + "'s"
    if " key " in subject:
        owner, _, key = subject.partition(" key ")
        return f"{owner}'s key {key}"
    return subject + "'s"


def _imported(subject: str, detail: str) -> str:
    found = re.match(r"(\d+) new, (\d+) updated", detail)
    new, updated = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    total = new + updated
    where = "no class" if subject == "no class" else subject.removeprefix("class ")
    students = f"{total} student{'s' if total != 1 else ''}"
    extra = "" if not updated else f" ({new} new, {updated} already had an account)"
    return f"imported {students} into {where}{extra}"


def sentence(*, action: str, subject: str, detail: str, actor: Actor | None, viewer_id: int) -> str:
    """One audit row in words, starting with who did it ("You" for the viewer)."""
    who = "The command line" if actor is None else "You" if actor.id == viewer_id else actor.name
    room = subject.removeprefix("class ")
    if action == "students.imported":
        did = _imported(subject, detail)
    elif action == "limits.changed":
        changes = _limits(detail)
        did = f"set {_of(subject)} limit{'s' if ', ' in detail else ''} to {changes}" if changes else \
            f"changed {_of(subject)} limits"
    elif action == "class.paused":
        did = f"paused {room} {detail}" if detail else f"paused {room}"
    elif action == "class.timetable":
        did = f"changed {room}'s weekly pauses: {detail}"
    elif action == "class.term":
        did = f"set {room}'s term to {detail}" if detail != "no term" else f"cleared {room}'s term"
    elif action == "class.self_enrolment":
        did = f"turned self-enrolment {detail or 'on'} for {room}"
    elif action == "class.renamed":
        did = f"renamed {detail.removeprefix('was ')} to {room}"
    elif action == "student.moved":
        did = f"moved {subject} {detail}"
    elif action == "student.self_enrolled":
        return f"{subject} joined by school sign-in ({detail})"
    elif action == "key.revoked":
        did = f"revoked {subject}'s key {detail}"
    elif action == "budget.granted":
        did = f"gave {subject} " + re.sub(r"^\d+", lambda m: _number(m.group(0)), detail)
    elif action == "budget.reset":
        did = f"reset {subject}'s budget {detail}"
    elif action in ("teacher.created", "teacher.classes"):
        made = "added the teacher" if action == "teacher.created" else "gave the teacher"
        did = f"{made} {subject}" + (f" the classes {detail.replace('class ', '')}" if detail else "")
    elif action == "worker.moved":
        did = f"moved the worker {subject}" + (f": {detail}" if detail else "")
    elif action == "research.run_started":
        did = f"started a research run on {subject} ({detail})"
    elif action in SIMPLE:
        did = SIMPLE[action].format(c=room, s=subject)
    elif action in GROUND0:
        did = GROUND0[action].format(s=subject, d=detail)
    else:
        did = f"{action.replace('.', ' ').replace('_', ' ')} {subject}" + (f" ({detail})" if detail else "")
    return f"{who} {did}"
