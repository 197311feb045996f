"""docs/contracts.md stays true to the code: every route the gateway serves is listed, and the
commands and settings it names exist."""
from __future__ import annotations

import re

from django.core.management import get_commands
from django.urls import URLPattern, URLResolver, get_resolver

from tests.deploy.deploy_files import ROOT, variables_read_by_code

CONTRACTS = ROOT / "docs" / "contracts.md"


def documented_form(route: str) -> str:
    """`ollama/<str:key>/api/tags` as the page writes it: `/ollama/<key>/api/tags`."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", route)


def lean_routes() -> list[str]:
    """The routes of the lean path (the API and the probes), `(?P<key>[^/]+)` written `<key>`;
    its catch-alls (404s) left out."""
    from inference.routes import ROUTES
    from ocsweb.probes import ROUTES as PROBES

    routes = [*ROUTES.exact, *PROBES.exact]
    for pattern, _ in [*ROUTES.patterns, *PROBES.patterns]:
        if ".*" not in pattern.pattern:
            routes.append(re.sub(r"\(\?P<(\w+)>\[\^/\]\+\)", r"<\1>", pattern.pattern))
    return routes


def served_routes() -> list[str]:
    routes = lean_routes()
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver):  # admin/
            routes.append(documented_form(str(entry.pattern)))
        elif isinstance(entry, URLPattern) and not str(entry.pattern).startswith("^"):  # regex catch-alls: 404s
            routes.append(documented_form(str(entry.pattern)))
    return routes


def test_every_route_of_the_gateway_is_in_the_contracts() -> None:
    text = CONTRACTS.read_text()
    routes = served_routes()
    assert "/ollama/<key>/api/tags" in routes and "/v1/messages" in routes  # the scan sees the API
    missing = [route for route in routes if f"`{route}`" not in text]
    assert not missing, f"served but not in docs/contracts.md: {missing}"


def test_settings_named_in_the_contracts_exist() -> None:
    named = set(re.findall(r"`(OCS_[A-Z_]+)`", CONTRACTS.read_text()))
    assert named, "the page names no setting"
    assert named <= set(variables_read_by_code()), named - set(variables_read_by_code())


def test_commands_named_in_the_contracts_exist() -> None:
    named = set(re.findall(r"manage\.py (\w+)", CONTRACTS.read_text()))
    assert {"verify_path", "create_rig"} <= named
    assert named <= set(get_commands()), named - set(get_commands())
