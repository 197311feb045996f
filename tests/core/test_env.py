from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.env import (
    ConfigError,
    env_bool,
    env_choice,
    env_http_url,
    env_int,
    env_str,
    parse_database_url,
    parse_redis_url,
)

ROOT = Path(__file__).resolve().parents[2]


def test_env_bool_accepts_common_spellings_and_names_the_variable_on_garbage() -> None:
    assert env_bool("X", False, environ={"X": "Yes"}) is True
    assert env_bool("X", True, environ={"X": "off"}) is False
    assert env_bool("X", True, environ={}) is True
    with pytest.raises(ConfigError, match="OCS_DEBUG='maybe'"):
        env_bool("OCS_DEBUG", False, environ={"OCS_DEBUG": "maybe"})


def test_env_choice_takes_one_of_its_choices_and_names_the_variable_otherwise() -> None:
    assert env_choice("OCS_FAIR_POLICY", "tokens", ("tokens", "requests"), environ={}) == "tokens"
    assert env_choice("OCS_FAIR_POLICY", "tokens", ("tokens", "requests"), environ={"OCS_FAIR_POLICY": "requests"}) \
        == "requests"
    with pytest.raises(ConfigError, match="OCS_FAIR_POLICY='fifo': expected one of tokens, requests"):
        env_choice("OCS_FAIR_POLICY", "tokens", ("tokens", "requests"), environ={"OCS_FAIR_POLICY": "fifo"})


def test_env_int_rejects_non_integers_and_values_below_minimum() -> None:
    assert env_int("N", 3, environ={"N": " 7 "}) == 7
    with pytest.raises(ConfigError, match="N='seven' is not an integer"):
        env_int("N", 3, environ={"N": "seven"})
    with pytest.raises(ConfigError, match="N=0 must be at least 1"):
        env_int("N", 3, minimum=1, environ={"N": "0"})


def test_env_http_url_takes_an_address_and_refuses_what_could_smuggle_a_target() -> None:
    assert env_http_url("U", "http://127.0.0.1:8000", environ={}) == "http://127.0.0.1:8000"
    assert env_http_url("U", "x", environ={"U": "https://ocs.school.example/ "}) == "https://ocs.school.example"
    for bad in ("127.0.0.1:8000", "ftp://host", "http://", "http://h/?next=evil", "http://u:p@h", "http://h/#x"):
        with pytest.raises(ConfigError, match="U="):
            env_http_url("U", "http://127.0.0.1:8000", environ={"U": bad})


def test_secret_can_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    assert env_str("OCS_SECRET_KEY", environ={"OCS_SECRET_KEY_FILE": str(secret)}) == "s3cr3t"
    with pytest.raises(ConfigError, match="OCS_SECRET_KEY_FILE"):
        env_str("OCS_SECRET_KEY", environ={"OCS_SECRET_KEY_FILE": str(tmp_path / "missing")})


def test_postgres_url_is_parsed_into_django_settings() -> None:
    conf = parse_database_url("DATABASE_URL", "postgres://ocs:p%40ss@db.internal:6543/ocs?sslmode=require")
    django = conf.as_django()
    assert django["ENGINE"] == "django.db.backends.postgresql"
    assert (django["NAME"], django["USER"], django["PASSWORD"]) == ("ocs", "ocs", "p@ss")
    assert (django["HOST"], django["PORT"]) == ("db.internal", "6543")
    assert django["OPTIONS"] == {"sslmode": "require"}


def test_sqlite_url_and_bad_urls() -> None:
    assert parse_database_url("DATABASE_URL", "sqlite:////srv/ocs/db.sqlite3").as_django()["NAME"] == "/srv/ocs/db.sqlite3"
    with pytest.raises(ConfigError, match="DATABASE_URL.*scheme"):
        parse_database_url("DATABASE_URL", "mysql://root@localhost/ocs")
    with pytest.raises(ConfigError, match="no database name"):
        parse_database_url("DATABASE_URL", "postgres://root@localhost")
    with pytest.raises(ConfigError, match=r"\*\*\*"):  # the password is not echoed back
        parse_database_url("DATABASE_URL", "mysql://root:hunter2@localhost/ocs")
    with pytest.raises(ConfigError, match="REDIS_URL"):
        parse_redis_url("REDIS_URL", "http://localhost:6379")


def _start_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OCS_", "DATABASE_URL", "REDIS_URL"))}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env={**clean, "DJANGO_SETTINGS_MODULE": "ocsweb.settings"}, capture_output=True, text=True,
    )


def test_bad_database_url_stops_startup_naming_the_variable(tmp_path: Path) -> None:
    result = _start_settings({"DATABASE_URL": "mongodb://x/y", "OCS_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_a_shared_prefix_k_a_student_and_one_classmate_could_reach_stops_startup(tmp_path: Path) -> None:
    for k in ("1", "2"):
        result = _start_settings({"OCS_SHARED_PREFIX_K": k, "OCS_VAR_DIR": str(tmp_path)})
        assert result.returncode != 0 and f"OCS_SHARED_PREFIX_K={k}" in result.stderr
    for k in ("0", "3"):
        assert _start_settings({"OCS_SHARED_PREFIX_K": k, "OCS_VAR_DIR": str(tmp_path)}).returncode == 0


def test_production_refuses_to_start_without_secret_key_or_hosts(tmp_path: Path) -> None:
    no_secret = _start_settings({"OCS_ENV": "production", "OCS_ALLOWED_HOSTS": "ai.school.example",
                                 "OCS_VAR_DIR": str(tmp_path)})
    assert no_secret.returncode != 0 and "OCS_SECRET_KEY" in no_secret.stderr
    no_hosts = _start_settings({"OCS_ENV": "production", "OCS_SECRET_KEY": "x" * 40, "OCS_VAR_DIR": str(tmp_path)})
    assert no_hosts.returncode != 0 and "OCS_ALLOWED_HOSTS" in no_hosts.stderr
    ok = _start_settings({"OCS_ENV": "production", "OCS_SECRET_KEY": "x" * 40,
                          "OCS_ALLOWED_HOSTS": "ai.school.example", "OCS_VAR_DIR": str(tmp_path)})
    assert ok.returncode == 0, ok.stderr


def test_only_the_test_suite_trades_the_password_hash_for_speed(tmp_path: Path) -> None:
    """The suite hashes with MD5 (ocsweb/settings.py); a school's passwords never are."""
    read = "import django; django.setup(); from django.conf import settings; print(settings.PASSWORD_HASHERS[0])"
    hashers = {}
    for env in ({"OCS_ENV": "production", "OCS_SECRET_KEY": "x" * 40, "OCS_ALLOWED_HOSTS": "ai.school.example"},
                {"OCS_ENV": "development"}, {"OCS_ENV": "test"}):
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OCS_", "DATABASE_URL", "REDIS_URL"))}
        result = subprocess.run([sys.executable, "-c", read], cwd=ROOT, capture_output=True, text=True,
                                env={**clean, **env, "OCS_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "ocsweb.settings"})
        hashers[env["OCS_ENV"]] = result.stdout.strip()
    assert hashers == {"production": "django.contrib.auth.hashers.PBKDF2PasswordHasher",
                       "development": "django.contrib.auth.hashers.PBKDF2PasswordHasher",
                       "test": "django.contrib.auth.hashers.MD5PasswordHasher"}


def test_check_deploy_is_clean_under_production_settings(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OCS_", "DATABASE_URL", "REDIS_URL"))}
    clean.update(OCS_ENV="production", OCS_SECRET_KEY="k" * 20 + "Q7!x" * 10, OCS_ALLOWED_HOSTS="ai.school.example",
                 OCS_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="ocsweb.settings")
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            cwd=ROOT, env=clean, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
