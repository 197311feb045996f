"""The commands in docs/deployment.md run: every `ocs-manage …` / `manage.py …` line names a real
command with options it accepts, and every `shell -c` one-liner executes against a database."""
from __future__ import annotations

import re
import shlex

import pytest
from django.core.management import call_command, get_commands, load_command_class

from tests.deploy.deploy_files import DEPLOY, ROOT

DOC = ROOT / "docs" / "deployment.md"
INVOCATION = re.compile(r"(?:ocs-manage|manage\.py) (\w.*)")


def invocations() -> list[list[str]]:
    """Each command line of the page, split as the shell would (up to a pipe or redirection)."""
    found = []
    for line in re.sub(r"\\\n\s*", " ", DOC.read_text()).splitlines():  # join continued lines
        for match in INVOCATION.finditer(line):
            text = re.split(r"\s(?:\||>|&&|#)\s|`", match.group(1))[0]
            text = re.sub(r'"\$\([^)]*\)"', "VALUE", text)  # "$(sudo cat …)" is one argument
            words = shlex.split(text.replace("…", "VALUE"))
            if words[1:] != ["VALUE"]:  # `verify_path …`: a mention of a command shown in full elsewhere
                found.append(words)
    return found


def test_the_page_has_the_commands_of_each_step() -> None:
    names = {words[0] for words in invocations()}
    assert {"migrate", "collectstatic", "check", "create_rig", "rig_agent", "fleet_monitor", "issue_key",
            "verify_path", "shell", "register_worker"} <= names, names


@pytest.mark.parametrize("words", invocations(), ids=lambda words: " ".join(words)[:60])
def test_each_command_and_its_options_exist(words: list[str]) -> None:
    name, args = words[0], words[1:]
    commands = get_commands()
    assert name in commands, f"no command {name!r}"
    parser = load_command_class(commands[name], name).create_parser("manage.py", name)
    parser.parse_args(args)  # exits (SystemExit) on an unknown option or a missing required one


@pytest.mark.django_db
def test_the_shell_one_liners_run() -> None:
    one_liners = [words[2] for words in invocations() if words[:2] == ["shell", "-c"]]
    assert len(one_liners) >= 3
    call_command("migrate", verbosity=0)
    for code in one_liners:
        call_command("shell", command=code)
    from accounts.models import User

    assert User.objects.get(username="teacher").role == "teacher"
    assert User.objects.get(username="pathcheck").role == "student"


def test_the_files_the_page_installs_exist() -> None:
    for path in re.findall(r"(?<![\w/-])deploy/[\w./@-]+\w", DOC.read_text()):
        if "*" not in path:
            assert (ROOT / path).exists(), path
    assert (DEPLOY / "systemd").is_dir()
