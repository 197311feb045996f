"""The floors of the codebase (docs/architecture.md, "Layers"): every arrow points down.

An arrow is an import (at module level or inside a function: an import moved into a function to
dodge a cycle is still a cycle; `importlib.import_module("app.x")` too) or a model named by
string ("fleet.Pool" in a foreign key). Starting the site as a process (`-m ocsweb.gateway` in
research's bench) is not an import.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top. An app may use the ones before it, never one after it.
LAYERS = ["core", "fleet", "accounts", "inference", "research", "lessons", "portal", "ocsweb"]
MODEL_REFERENCE = re.compile(r"([a-z]+)\.[A-Z]\w*")


def _called(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def arrows_of(path: Path) -> list[tuple[str, int]]:
    """(target app, line) for each reference this file makes to an app of LAYERS."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "migrations" not in path.parts:
            if match := MODEL_REFERENCE.fullmatch(node.value):
                found.append((match.group(1), node.lineno))
        elif isinstance(node, ast.Call) and _called(node) in {"import_module", "__import__"} and node.args:
            if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((node.args[0].value.split(".")[0], node.lineno))
    return [(target, line) for target, line in found if target in LAYERS]


def upward_arrows(root: Path = ROOT) -> list[str]:
    wrong = []
    for app in LAYERS:
        for path in sorted((root / app).rglob("*.py")):
            for target, line in arrows_of(path):
                if LAYERS.index(target) > LAYERS.index(app):
                    wrong.append(f"{path.relative_to(root)}:{line}: {app} -> {target}")
    return wrong


def test_no_arrow_points_up() -> None:
    assert upward_arrows() == []


def test_the_check_sees_imports_inside_functions_and_string_foreign_keys(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "helper.py").write_text("def f():\n    from accounts.models import User\n")
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "models.py").write_text("owner = ForeignKey('accounts.User')\n")
    (tmp_path / "accounts").mkdir()
    (tmp_path / "accounts" / "views.py").write_text(
        "from ocsweb.settings import X\nfrom fleet.models import Pool\nm = import_module('inference.models')\n")
    assert upward_arrows(tmp_path) == [
        "core/helper.py:2: core -> accounts",
        "fleet/models.py:1: fleet -> accounts",
        "accounts/views.py:1: accounts -> ocsweb",
        "accounts/views.py:3: accounts -> inference",
    ]


def test_every_app_is_on_a_floor() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "scripts", "deploy", "docs"}
    assert packages <= set(LAYERS), f"place {packages - set(LAYERS)} in LAYERS and docs/architecture.md"


def test_one_decorator_guards_every_teacher_page() -> None:
    """lessons, research and the teacher's pages answer "not a teacher" the same way."""
    copies = [str(path.relative_to(ROOT)) for app in LAYERS for path in (ROOT / app).rglob("*.py")
              if "def staff_required" in path.read_text()]
    assert copies == ["accounts/access.py"]


# Where a worker slot is chosen, waited for and claimed: one package (docs/architecture.md,
# "Admission"), like llama-swap's scheduler. Its modules stay there, and no module elsewhere
# defines its rules again.
ADMISSION = ROOT / "inference" / "admission"
ADMISSION_MODULES = {"__init__.py", "fair_share.py", "first_come.py", "line.py", "live.py", "rules.py",
                     "shared_prefix.py", "slot_files.py", "slot_owners.py", "streamed.py"}
ADMISSION_DEFINITIONS = re.compile(
    r"^\s*(?:async\s+)?def\s+(claim_slot|confirm_slot|fair_join|fair_turn|fair_order|fair_served|fair_leave|"
    r"fair_renew|fair_charge|pick_slot|handover|acquire_slot|try_claim|prefix_senders|set_affinity)\b"
    r"|^(CLAIM_SLOT_LUA|CONFIRM_SLOT_LUA|JOIN_LUA|TURN_LUA|ORDER_LUA|SERVED_LUA)\s*=", re.MULTILINE)


def test_the_admission_package_holds_its_modules() -> None:
    assert {path.name for path in ADMISSION.glob("*.py")} == ADMISSION_MODULES


def test_no_module_outside_the_admission_package_defines_its_rules() -> None:
    strays = [f"{path.relative_to(ROOT)}: {match.group(1) or match.group(2)}"
              for app in LAYERS for path in sorted((ROOT / app).rglob("*.py"))
              if ADMISSION not in path.parents
              for match in ADMISSION_DEFINITIONS.finditer(path.read_text())]
    assert strays == []


def test_core_live_keeps_the_mechanism_only() -> None:
    """The live state's rules plug in from above (inference/admission/live.py,
    accounts/limits/live_quota.py); core/live.py keeps the connection, leases, suspects,
    generations, queue depths and the end's batch."""
    text = (ROOT / "core" / "live.py").read_text()
    assert len(text.splitlines()) < 500
    assert not re.search(r"def (admit|admit_seen|settle|tokens_used_sync|view|fair_\w+|claim_slot)\(", text)
