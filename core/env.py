"""Typed readers for settings that come from the environment.

Every reader fails loudly with ConfigError naming the variable, so a bad value stops start-up
with a message an operator can act on instead of a confusing error later. A secret can also be
given as NAME_FILE (the path of a file holding it), as Docker and systemd credentials do.
No Django imports here: tests import this module without settings.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from urllib.parse import parse_qs, unquote, urlsplit


class ConfigError(Exception):
    """A configuration value is missing or malformed; the message names the variable."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None) -> str | None:
    environ = os.environ if environ is None else environ
    if name in environ:
        return environ[name]
    file_name = environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={file_name!r} cannot be read: {exc.strerror}") from exc
    return default


def env_http_url(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    """An http(s) address with a host and nothing after it but a path (no query, no fragment,
    no credentials), without its trailing slash."""
    raw = (env_str(name, environ=environ) or "").strip() or default
    parts = urlsplit(raw)
    if parts.scheme not in {"http", "https"} or not parts.hostname or parts.query or parts.fragment \
            or parts.username or parts.password:
        raise ConfigError(f"{name}={raw!r} is not an http(s) address like http://127.0.0.1:8000")
    return raw.rstrip("/")


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    raw = env_str(name, environ=environ)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(
    name: str, default: int, *, minimum: int | None = None, environ: Mapping[str, str] | None = None
) -> int:
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def env_float(
    name: str, default: float, *, minimum: float | None = None, environ: Mapping[str, str] | None = None
) -> float:
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str], *, environ: Mapping[str, str] | None = None) -> list[str]:
    raw = env_str(name, environ=environ)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...], *,
               environ: Mapping[str, str] | None = None) -> str:
    """One of `choices`, exactly as written."""
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip() not in choices:
        raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return raw.strip()


def env_networks(name: str, default: list[str], *, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list of IP addresses or networks ("127.0.0.1, 10.0.0.0/8, ::1")."""
    import ipaddress

    networks = env_list(name, default, environ=environ)
    for network in networks:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise ConfigError(f"{name}: {network!r} is not an IP address or network (e.g. 127.0.0.1, 10.0.0.0/8)") from None
    return networks


@dataclass(frozen=True)
class DatabaseConfig:
    engine: str
    name: str
    user: str = ""
    password: str = ""
    host: str = ""
    port: str = ""
    options: dict[str, str] | None = None

    def as_django(self) -> dict[str, object]:
        if self.engine == "sqlite":
            return {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": self.name,
                # WAL lets the gateway read while a management command or test writes.
                "OPTIONS": {
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                    "transaction_mode": "IMMEDIATE",
                    "timeout": 20,
                },
                "TEST": {"NAME": str(Path(self.name).with_name("test-" + Path(self.name).name))},
                # Kept open, as on PostgreSQL: the hot path's cache reloads (once a second under
                # load) would otherwise open a new connection each time.
                "CONN_MAX_AGE": 60,
            }
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.name,
            "USER": self.user,
            "PASSWORD": self.password,
            "HOST": self.host,
            "PORT": self.port,
            "OPTIONS": dict(self.options or {}),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }


def parse_database_url(name: str, raw: str) -> DatabaseConfig:
    """postgres://user:pass@host:port/db?sslmode=require, sqlite:////absolute/path.sqlite3 or
    sqlite:///relative/path.sqlite3 (the usual database-URL convention)."""
    parts = urlsplit(raw)
    if parts.scheme == "sqlite":
        path = unquote(parts.path)[1:]
        if not path:
            raise ConfigError(f"{name}={raw!r}: sqlite URL needs a file path, e.g. sqlite:////srv/ocs/db.sqlite3")
        return DatabaseConfig(engine="sqlite", name=path)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ConfigError(f"{name}={_redact_url(raw)!r}: scheme must be postgres:// or sqlite:///")
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigError(f"{name}={_redact_url(raw)!r}: no database name after the host")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{name}={_redact_url(raw)!r}: port is not a number") from None
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    return DatabaseConfig(
        engine="postgresql",
        name=database,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        host=parts.hostname or "",
        port=str(port or ""),
        options=options,
    )


def parse_redis_url(name: str, raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ConfigError(f"{name}={_redact_url(raw)!r}: scheme must be redis://, rediss:// or unix://")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{name}={_redact_url(raw)!r}: no host")
    try:
        parts.port
    except ValueError:
        raise ConfigError(f"{name}={_redact_url(raw)!r}: port is not a number") from None
    return raw


def _redact_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.password:
        return raw.replace(f":{parts.password}@", ":***@")
    return raw
