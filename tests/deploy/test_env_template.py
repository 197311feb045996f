"""deploy/ocs.env.example against the code: every variable the code reads is in it, explained;
nothing in it is unknown to the code; and its active lines make a production configuration
that Django's deployment checks accept."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from tests.deploy.deploy_files import ENV_TEMPLATE, ROOT, base_name, template_entries, variables_read_by_code

# Variables another branch is adding to ocsweb/settings.py; each is documented here already.
# Remove a name once its change is merged: from then on it is checked like the others.
ANNOUNCED: dict[str, str] = {}  # settings another change is about to add: none now
# Read by the code but not settings of an installation.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE"}


def test_the_scan_finds_what_settings_reads() -> None:
    read = variables_read_by_code()
    # A few spelled-out anchors, so a scan that finds nothing cannot pass the tests below.
    for name in ("OCS_ENV", "DATABASE_URL", "REDIS_URL", "OCS_MAX_BODY_BYTES", "OCS_LLAMA_SERVER"):
        assert name in read, name


def test_every_variable_the_code_reads_is_in_the_template() -> None:
    documented = {base_name(name) for name, *_ in template_entries(ENV_TEMPLATE.read_text())}
    missing = {name: where for name, where in variables_read_by_code().items()
               if name not in documented and name not in NOT_SETTINGS}
    assert not missing, f"read by the code but not in deploy/ocs.env.example: {missing}"


def test_every_variable_in_the_template_is_read_by_the_code() -> None:
    read = set(variables_read_by_code()) | set(ANNOUNCED)
    unknown = sorted({base_name(name) for name, *_ in template_entries(ENV_TEMPLATE.read_text())} - read)
    assert not unknown, f"in deploy/ocs.env.example but read nowhere: {unknown}"


def test_every_variable_in_the_template_is_explained() -> None:
    entries = template_entries(ENV_TEMPLATE.read_text())
    assert len(entries) >= 40
    unexplained = [name for name, _value, _active, comment in entries
                   if not any(len(line.split()) >= 3 for line in comment)]
    assert not unexplained, f"no explanation above: {unexplained}"


def test_each_variable_appears_once() -> None:
    names = [name for name, *_ in template_entries(ENV_TEMPLATE.read_text())]  # NAME and NAME_FILE may both be
    assert sorted(names) == sorted(set(names)), "a variable is listed twice"


def test_every_setting_is_in_the_configuration_reference() -> None:
    reference = (ROOT / "docs" / "configuration.md").read_text()
    missing = sorted(name for name in variables_read_by_code() if name not in NOT_SETTINGS
                     and f"`{name}`" not in reference)
    assert not missing, f"not in docs/configuration.md: {missing}"


def test_the_template_is_a_production_configuration_django_accepts(tmp_path: Path) -> None:
    """The active lines, with the secret files filled in (SQLite standing in for RDS), pass
    `manage.py check --deploy` with OCS_ENV=production: no warning at all."""
    secret_file = tmp_path / "secret_key"
    secret_file.write_text(secrets.token_urlsafe(50))
    database_file = tmp_path / "database_url"
    database_file.write_text(f"sqlite:///{tmp_path / 'ocs.sqlite3'}\n")
    replacements = {"OCS_SECRET_KEY_FILE": str(secret_file), "DATABASE_URL_FILE": str(database_file),
                    "OCS_VAR_DIR": str(tmp_path / "var")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCS_") and k not in {"DATABASE_URL", "REDIS_URL"}}
    active = {name: value for name, value, is_active, _ in template_entries(ENV_TEMPLATE.read_text()) if is_active}
    for name in replacements:
        assert name in active, f"{name} is no longer an active line of the template"
    env.update(active)
    env.update(replacements)
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_ocs_manage_runs_commands_with_the_installed_environment_file(tmp_path: Path) -> None:
    """deploy/ocs-manage sources the env file as the units read it (the template with its secret
    files filled in) and runs manage.py; what it runs sees the production settings."""
    secret_file = tmp_path / "secret_key"
    secret_file.write_text(secrets.token_urlsafe(50))
    database_file = tmp_path / "database_url"
    database_file.write_text(f"sqlite:///{tmp_path / 'ocs.sqlite3'}\n")
    text = ENV_TEMPLATE.read_text()
    for old, new in (("/etc/ocs/secret_key", str(secret_file)), ("/etc/ocs/database_url", str(database_file)),
                     ("OCS_VAR_DIR=/var/lib/ocs", f"OCS_VAR_DIR={tmp_path / 'var'}")):
        assert old in text
        text = text.replace(old, new)
    env_file = tmp_path / "ocs.env"
    env_file.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCS_") and k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OCS_ENV_FILE=str(env_file), OCS_HOME=str(ROOT), OCS_PYTHON=sys.executable, OCS_MANAGE_AS_ME="1")
    result = subprocess.run(["bash", str(ROOT / "deploy" / "ocs-manage"), "diffsettings", "--all"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "SESSION_COOKIE_SECURE = True" in result.stdout  # OCS_ENV=production took effect
    assert "ALLOWED_HOSTS = ['ai.school.example']" in result.stdout
    assert str(tmp_path / "ocs.sqlite3") in result.stdout  # DATABASE_URL_FILE was read
