"""Reading a class list: CSV with columns username, email, name. Pure: no Django.

A header row is optional (recognised when its first cell is "username"). Usernames are
lower-cased and must be 1-150 characters of letters, digits and @.+-_ (Django's rule); email and
name may be empty. Every problem is reported with its line number; a file with any problem
imports nothing."""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

USERNAME_RE = re.compile(r"^[\w.@+-]{1,150}$")
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
MAX_ROWS = 2000


@dataclass(frozen=True)
class StudentRow:
    line: int
    username: str
    email: str
    first_name: str
    last_name: str


class CsvProblem(ValueError):
    """The file cannot be imported; `problems` lists every line that is wrong."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_students_csv(text: str) -> list[StudentRow]:
    rows: list[StudentRow] = []
    problems: list[str] = []
    seen: set[str] = set()
    emails_seen: dict[str, int] = {}  # lower-cased email -> its line
    if "\x00" in text:
        raise CsvProblem(["the file is not a CSV text file (it contains NUL bytes); save it as 'CSV UTF-8'"])
    try:
        lines = list(csv.reader(io.StringIO(text.lstrip("\ufeff"))))
    except csv.Error as error:
        raise CsvProblem([f"the file is not valid CSV: {error}"]) from None
    for line, cells in enumerate(lines, start=1):
        cells = [cell.strip() for cell in cells]
        if not any(cells):
            continue
        if line == 1 and cells[0].lower() == "username":
            continue
        if len(rows) >= MAX_ROWS:
            problems.append(f"more than {MAX_ROWS} students in one file")
            break
        username = cells[0].lower()
        email = cells[1] if len(cells) > 1 else ""
        name = cells[2] if len(cells) > 2 else ""
        if len(cells) > 3:
            problems.append(f"line {line}: expected 3 columns (username, email, name), got {len(cells)}")
            continue
        if not USERNAME_RE.match(username):
            problems.append(f"line {line}: {cells[0]!r} is not a valid username "
                            "(letters, digits and @ . + - _ only, up to 150)")
            continue
        if email and not EMAIL_RE.match(email):
            problems.append(f"line {line}: {email!r} is not an email address")
            continue
        if username in seen:
            problems.append(f"line {line}: {username} appears twice")
            continue
        if email and email.lower() in emails_seen:
            problems.append(f"line {line}: {email} is also on line {emails_seen[email.lower()]}; "
                            "an email address belongs to one student")
            continue
        seen.add(username)
        if email:
            emails_seen[email.lower()] = line
        first, _, last = name.partition(" ")
        rows.append(StudentRow(line=line, username=username, email=email, first_name=first[:150],
                               last_name=last.strip()[:150]))
    if problems:
        raise CsvProblem(problems)
    if not rows:
        raise CsvProblem(["the file has no students (expected lines of: username, email, name)"])
    return rows
