"""The real client behind the HTTPS proxy, and who may read /metrics (issue 9, item 7)."""
from __future__ import annotations

import pytest

from core.client_address import client_address
from core.env import ConfigError, env_networks
from core.private_access import DEFAULT_PRIVATE_NETWORKS, private_access_allowed

PROXY = ("127.0.0.1", "10.1.0.0/16")


@pytest.mark.parametrize("remote, forwarded, expected", [
    ("127.0.0.1", "203.0.113.7", "203.0.113.7"),  # one trusted proxy
    ("127.0.0.1", "198.51.100.1, 203.0.113.7", "203.0.113.7"),  # the left part is the client's own claim
    ("127.0.0.1", "203.0.113.7, 10.1.2.3", "203.0.113.7"),  # two of our proxies in a row
    ("127.0.0.1", "100.64.0.5", "100.64.0.5"),
    ("127.0.0.1", "[2001:db8::1]:443", "2001:db8::1"),
    ("127.0.0.1", "203.0.113.7:51000", "203.0.113.7"),
    ("127.0.0.1", None, None),  # a trusted proxy that names nobody: unknown, not the proxy itself
    ("127.0.0.1", "not-an-address", None),
    ("127.0.0.1", "10.1.0.9, 127.0.0.1", "10.1.0.9"),  # every hop ours: the first
    ("203.0.113.9", "127.0.0.1", None),  # X-Forwarded-For from someone we do not trust
    ("203.0.113.9", None, "203.0.113.9"),
    ("::ffff:127.0.0.1", "203.0.113.7", "203.0.113.7"),
])
def test_the_client_is_the_rightmost_hop_that_is_not_a_trusted_proxy(remote, forwarded, expected) -> None:  # noqa: ANN001
    assert client_address(remote_addr=remote, forwarded_for=forwarded, trusted_proxies=PROXY) == expected


def test_with_no_trusted_proxy_x_forwarded_for_is_never_believed() -> None:
    assert client_address(remote_addr="127.0.0.1", forwarded_for="100.64.0.5", trusted_proxies=()) is None
    assert client_address(remote_addr="100.64.0.5", forwarded_for=None, trusted_proxies=()) == "100.64.0.5"


def allowed(remote: str, forwarded: str | None, *, authorization: str = "", proxies: tuple[str, ...] = PROXY) -> bool:
    return private_access_allowed(remote_addr=remote, forwarded_for=forwarded, authorization=authorization,
                                  token="staff-token", networks=list(DEFAULT_PRIVATE_NETWORKS),
                                  trusted_proxies=proxies)


def test_metrics_through_the_proxy_are_judged_by_the_real_client() -> None:
    assert not allowed("127.0.0.1", "203.0.113.7")  # public, through the proxy
    assert not allowed("127.0.0.1", "127.0.0.1, 203.0.113.7")  # a forged private hop does not help
    assert not allowed("127.0.0.1", None)  # the proxy named nobody: refused, not taken for loopback
    assert allowed("127.0.0.1", "100.64.0.5")  # the monitoring host on NetBird, through the proxy
    assert allowed("100.64.0.5", None)  # straight from NetBird
    assert not allowed("203.0.113.9", None)  # straight from the internet
    assert not allowed("100.64.0.5", "100.64.0.6", proxies=())  # relayed by a proxy nobody trusts
    assert allowed("127.0.0.1", "203.0.113.7", authorization="Bearer staff-token")
    assert not allowed("127.0.0.1", "203.0.113.7", authorization="Bearer wrong")


def test_bad_proxy_settings_stop_start_up_with_the_variable_named() -> None:
    assert env_networks("OCS_TRUSTED_PROXIES", [], environ={"OCS_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}) == [
        "127.0.0.1", "10.0.0.0/8"]
    with pytest.raises(ConfigError, match="OCS_TRUSTED_PROXIES"):
        env_networks("OCS_TRUSTED_PROXIES", [], environ={"OCS_TRUSTED_PROXIES": "proxy.local"})


@pytest.mark.django_db
def test_the_metrics_endpoint_uses_the_real_client_behind_the_trusted_proxy(settings) -> None:  # noqa: ANN001
    from django.test import Client

    settings.OCS = {**settings.OCS, "TRUSTED_PROXIES": ("127.0.0.1",), "METRICS_TOKEN": ""}
    proxy = Client(REMOTE_ADDR="127.0.0.1")
    assert proxy.get("/metrics").status_code == 403  # the proxy named nobody
    assert proxy.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.7").status_code == 403
    assert proxy.get("/metrics", HTTP_X_FORWARDED_FOR="100.64.0.5").status_code == 200
    assert Client(REMOTE_ADDR="100.64.0.5").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="203.0.113.7").get("/metrics").status_code == 403


@pytest.mark.parametrize("remote, header, forwarded, expected", [
    ("127.0.0.1", "203.0.113.7", None, "203.0.113.7"),  # cloudflared on loopback names the client
    ("127.0.0.1", "203.0.113.7", "127.0.0.1", "203.0.113.7"),  # the header wins over the hop list
    ("127.0.0.1", "garbage", "198.51.100.4", "198.51.100.4"),  # not an address: X-Forwarded-For as before
    ("203.0.113.9", "100.64.0.5", None, "203.0.113.9"),  # from a peer we do not trust: ignored
])
def test_a_client_header_is_believed_only_from_a_trusted_proxy(remote, header, forwarded, expected) -> None:  # noqa: ANN001
    assert client_address(remote_addr=remote, forwarded_for=forwarded, trusted_proxies=PROXY,
                          client_header=header) == expected


@pytest.mark.django_db
def test_metrics_behind_a_tunnel_to_the_gateway_are_judged_by_the_tunnels_client_header(settings) -> None:  # noqa: ANN001
    from django.test import Client

    settings.OCS = {**settings.OCS, "TRUSTED_PROXIES": ("127.0.0.1",), "METRICS_TOKEN": "",
                    "CLIENT_ADDRESS_HEADER": "CF-Connecting-IP"}
    tunnel = Client(REMOTE_ADDR="127.0.0.1")
    assert tunnel.get("/metrics", HTTP_CF_CONNECTING_IP="203.0.113.7").status_code == 403  # the internet
    assert tunnel.get("/metrics", HTTP_CF_CONNECTING_IP="100.64.0.5").status_code == 200


@pytest.mark.django_db
def test_the_local_metrics_scrape_is_not_redirected_to_https_in_production(settings, tmp_path) -> None:  # noqa: ANN001
    """ocsweb/settings.py's production switches: plain HTTP on a gateway port, as Prometheus on the
    VM scrapes it, gets the metrics; the portal is still redirected."""
    import json
    import os
    import subprocess
    import sys

    from django.test import Client

    from tests.conftest import ROOT

    production = {**os.environ, "OCS_ENV": "production", "OCS_SECRET_KEY": "s" * 40, "OCS_VAR_DIR": str(tmp_path),
                  "OCS_ALLOWED_HOSTS": "ai.school.example,127.0.0.1", "DJANGO_SETTINGS_MODULE": "ocsweb.settings"}
    read = subprocess.run(
        [sys.executable, "-c", "import json, ocsweb.settings as s; print(json.dumps([s.SECURE_SSL_REDIRECT, "
                               "s.SECURE_REDIRECT_EXEMPT, s.SECURE_PROXY_SSL_HEADER]))"],
        cwd=ROOT, env=production, capture_output=True, text=True, check=True, timeout=60)
    redirect, exempt, proxy_header = json.loads(read.stdout)
    settings.SECURE_SSL_REDIRECT, settings.SECURE_REDIRECT_EXEMPT = redirect, exempt
    settings.SECURE_PROXY_SSL_HEADER = tuple(proxy_header)
    settings.OCS = {**settings.OCS, "METRICS_TOKEN": ""}
    scrape = Client(REMOTE_ADDR="127.0.0.1")
    assert scrape.get("/metrics").status_code == 200
    assert scrape.get("/accounts/login/").status_code == 301
