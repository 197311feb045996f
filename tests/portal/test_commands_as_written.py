"""The README's everyday commands run as written (issue 52, item 3): with the checkout's virtual
environment, and the links they print open the site the teacher runs, on its port."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command, get_commands

from portal.site_address import site_url_record

README = Path(settings.BASE_DIR) / "README.md"


def _everyday_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Everyday commands"):]
    section = section[:section.index("\n## ", 5)]
    return re.findall(r"^\| `([^`]+)`", section, flags=re.MULTILINE)


def test_every_everyday_command_names_the_venv_python_and_a_real_command() -> None:
    commands = _everyday_commands()
    assert len(commands) > 10
    known = get_commands()
    for line in commands:
        assert line.startswith(".venv/bin/python "), line  # the system python has no Django
        if " manage.py " in line:
            assert line.split(" manage.py ")[1].split()[0] in known, line
    assert Path(settings.BASE_DIR, "Makefile").read_text().count("VENV ?= .venv") == 1


@pytest.mark.django_db
def test_import_students_prints_links_on_the_demos_port(tmp_path: Path, settings) -> None:  # noqa: ANN001
    settings.VAR_DIR = tmp_path
    settings.OCS_SITE_URL = ""
    site_url_record(url="http://127.0.0.1:8052")
    csv_file = tmp_path / "class.csv"
    csv_file.write_text("username,email,name\nfay,,Fay Lee\n")
    out, err = io.StringIO(), io.StringIO()
    call_command("import_students", str(csv_file), stdout=out, stderr=err)
    assert "\thttp://127.0.0.1:8052/accounts/set-password/" in out.getvalue()
    assert "127.0.0.1:8052" in err.getvalue() and ":8000" not in out.getvalue()
    settings.OCS_SITE_URL = "https://ai.school.example"
    out = io.StringIO()
    call_command("create_teacher", "ray", stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith("https://ai.school.example/accounts/set-password/")
    out = io.StringIO()
    call_command("create_teacher", "ray", "--site", "http://10.0.0.5:9000/", stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith("http://10.0.0.5:9000/accounts/set-password/")
