"""Helpers shared by the tests of deploy/: where things are, and readers for its file formats.

No Django here: the env-template checks read the code's environment variables from its source."""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "deploy"
ENV_TEMPLATE = DEPLOY / "ocs.env.example"
NGINX_SITE = DEPLOY / "nginx" / "ocs.conf"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
CODE_DIRS = ("ocsweb", "accounts", "fleet", "inference", "research")
ENV_READERS = {"env_str", "env_int", "env_float", "env_bool", "env_list", "env_networks", "env_choice",
               "env_http_url"}
VARIABLE_LINE = re.compile(r"^#?([A-Z][A-Z0-9_]*)=(.*)$")


def variables_read_by_code() -> dict[str, str]:
    """Every environment variable the application reads, with the file that reads it: calls of
    the typed readers (core/env.py) and os.environ.get / os.getenv with a literal name."""
    found: dict[str, str] = {}
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            if "migrations" in path.parts or path.name == "env.py":
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                first = node.args[0]
                if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                    continue
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                environ_get = (isinstance(func, ast.Attribute) and func.attr == "get"
                               and ast.unparse(func.value) in {"os.environ", "environ"})
                if name in ENV_READERS or name == "getenv" or environ_get:
                    found.setdefault(first.value, str(path.relative_to(ROOT)))
    return found


def template_entries(text: str) -> list[tuple[str, str, bool, list[str]]]:
    """(name, value, active, comment lines just above) for each NAME=value or #NAME=value line.
    NAME_FILE right under NAME shares NAME's explanation."""
    entries = []
    comment: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        match = VARIABLE_LINE.match(line)
        if match:
            name = match.group(1)
            if not comment and entries and base_name(entries[-1][0]) == base_name(name):
                comment = entries[-1][3]
            entries.append((name, match.group(2), not line.startswith("#"), comment))
            comment = []
        elif line.startswith("#"):
            comment = comment + [line.lstrip("#").strip()]
        else:
            comment = []
    return entries


def base_name(variable: str) -> str:
    """NAME for NAME_FILE (a secret read from a file, core/env.py), else the name itself."""
    return variable[: -len("_FILE")] if variable.endswith("_FILE") else variable


def nginx_binary() -> str:
    """The nginx executable, installed by scripts/ensure_nginx.sh if it is missing."""
    found = shutil.which("nginx") or (Path("/usr/sbin/nginx").exists() and "/usr/sbin/nginx")
    if not found:
        subprocess.run(["bash", str(ROOT / "scripts" / "ensure_nginx.sh")], check=True, timeout=900)
        found = shutil.which("nginx") or "/usr/sbin/nginx"
    return str(found)
