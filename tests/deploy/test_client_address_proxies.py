"""Failed sign-ins with random usernames from one address leave every student able to sign in,
behind each shipped way in (issue 22): nginx (deploy/nginx/ocs.conf) reached directly, nginx
behind the Cloudflare Tunnel (cloudflared on loopback sending CF-Connecting-IP), and a tunnel
straight to the gateway (OCS_CLIENT_ADDRESS_HEADER=CF-Connecting-IP). Real nginx, real gateway
process, on loopback; a "direct" client connects from 127.0.0.2, which is not the tunnel's
127.0.0.1, so its CF-Connecting-IP must count for nothing.

OCS_LOGIN_MAX_FAILURES=1 scales every bound down (a pair locks after 1, a username after 10, an
address is slowed after 10), so 12 failures cross them all with 12 password hashes per way in, not 60."""
from __future__ import annotations

import re
import secrets
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import Gateway, start_gateway, stop_process
from tests.deploy.proxy import HOST, RunningNginx, prepare_nginx

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral, pytest.mark.django_db(transaction=True)]

FAILURES = 12  # past every scaled bound (10)
TUNNEL, DIRECT = "127.0.0.1", "127.0.0.2"


@dataclass
class WaysIn:
    gateway: Gateway
    nginx: RunningNginx


@pytest.fixture(scope="module")
def ways_in(django_db_blocker, tmp_path_factory) -> Iterator[WaysIn]:  # noqa: ANN001
    tmp = tmp_path_factory.mktemp("ways-in")
    with django_db_blocker.unblock():
        gateway = start_gateway(tmp / "gateway.log", OCS_TRUSTED_PROXIES="127.0.0.1",
                                OCS_CLIENT_ADDRESS_HEADER="CF-Connecting-IP", OCS_LOGIN_MAX_FAILURES="1",
                                OCS_ALLOWED_HOSTS=f"{HOST},127.0.0.1",
                                OCS_LOGIN_SLOWDOWN_MAX_S="0.05")
    nginx = RunningNginx(prepare_nginx(tmp, gateway_port=gateway.port))
    try:
        yield WaysIn(gateway, nginx)
    finally:
        nginx.stop()
        stop_process(gateway.process)


def browser(base_url: str, *, source: str, cafile: Path | None = None) -> httpx.Client:
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(cafile)) if cafile else False
    return httpx.Client(base_url=base_url, timeout=60, trust_env=False, verify=verify,
                        transport=httpx.HTTPTransport(local_address=source, verify=verify),
                        headers={"Host": HOST})


def sign_in(http: httpx.Client, username: str, password: str, *, client_header: str | None = None) -> str:
    """"in", "wrong" or "refused", as the portal's sign-in page answers."""
    headers = {"CF-Connecting-IP": client_header} if client_header else {}
    page = http.get("/accounts/login/", headers=headers)
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert found, (page.status_code, page.text[:300])
    token = found.group(1)
    answer = http.post("/accounts/login/", headers=headers,
                       data={"username": username, "password": password, "csrfmiddlewaretoken": token})
    if answer.status_code == 302:
        return "in"
    assert answer.status_code == 200, answer.text[:500]
    if "Too many failed sign-ins" in answer.text:
        return "refused"
    assert "do not match" in answer.text
    return "wrong"


def attack(make_client, client_header: str | None) -> None:  # noqa: ANN001
    with make_client() as attacker:
        for _ in range(FAILURES):
            assert sign_in(attacker, f"u{secrets.token_hex(4)}", "wrong", client_header=client_header) == "wrong"


def test_through_nginx_reached_directly(ways_in, student, other_student) -> None:  # noqa: ANN001
    def direct() -> httpx.Client:
        return browser(ways_in.nginx.prepared.https_url, source=DIRECT, cafile=ways_in.nginx.prepared.cert)

    attack(direct, client_header="203.0.113.5")  # a forged tunnel header, from a direct client
    with direct() as http:
        assert sign_in(http, "alice", "pw-alice-1") == "in"  # same address as the attacker
    # The forged header named nobody real: the attacker's own address (127.0.0.2) carries the lock.
    with direct() as http:
        assert sign_in(http, "bob", "wrong", client_header="198.51.100.1") == "wrong"
    with direct() as http:
        assert sign_in(http, "bob", "pw-bob-1", client_header="198.51.100.2") == "refused"


def test_through_nginx_behind_the_cloudflare_tunnel(ways_in, student, other_student) -> None:  # noqa: ANN001
    def tunnel() -> httpx.Client:
        return browser(ways_in.nginx.prepared.https_url, source=TUNNEL, cafile=ways_in.nginx.prepared.cert)

    attack(tunnel, client_header="203.0.113.66")  # every request is 127.0.0.1: one student attacking
    with tunnel() as http:
        assert sign_in(http, "alice", "pw-alice-1", client_header="203.0.113.66") == "in"
    # Each student is told apart by the tunnel's header: a lock earned at one address stays there.
    with tunnel() as http:
        assert sign_in(http, "bob", "wrong", client_header="203.0.113.66") == "wrong"
        assert sign_in(http, "bob", "pw-bob-1", client_header="203.0.113.66") == "refused"
    with tunnel() as http:
        assert sign_in(http, "bob", "pw-bob-1", client_header="198.51.100.7") == "in"


def test_through_a_tunnel_straight_to_the_gateway(ways_in, student, other_student) -> None:  # noqa: ANN001
    def tunnel() -> httpx.Client:
        return browser(ways_in.gateway.url, source=TUNNEL)

    attack(tunnel, client_header="203.0.113.77")
    with tunnel() as http:
        assert sign_in(http, "alice", "pw-alice-1", client_header="203.0.113.77") == "in"
    with tunnel() as http:
        assert sign_in(http, "bob", "wrong", client_header="203.0.113.77") == "wrong"
        assert sign_in(http, "bob", "pw-bob-1", client_header="203.0.113.77") == "refused"
    with tunnel() as http:
        assert sign_in(http, "bob", "pw-bob-1", client_header="198.51.100.8") == "in"
    # From a peer that is not the tunnel the header is ignored: the peer itself is the client.
    with browser(ways_in.gateway.url, source=DIRECT) as http:
        assert sign_in(http, "alice", "wrong", client_header="198.51.100.9") == "wrong"
    with browser(ways_in.gateway.url, source=DIRECT) as http:
        assert sign_in(http, "alice", "pw-alice-1", client_header="198.51.100.10") == "refused"


def test_metrics_through_the_tunnel_need_the_token_as_from_anywhere_on_the_internet(ways_in) -> None:  # noqa: ANN001
    """Behind the tunnel every request comes from loopback; /metrics must judge the real client,
    not cloudflared's 127.0.0.1 (OCS_METRICS_NETWORKS holds loopback)."""
    with browser(ways_in.nginx.prepared.https_url, source=TUNNEL, cafile=ways_in.nginx.prepared.cert) as http:
        assert http.get("/metrics", headers={"CF-Connecting-IP": "203.0.113.66"}).status_code == 403
        assert http.get("/metrics").status_code == 200  # a process on the VM itself, through nginx
    with browser(ways_in.gateway.url, source=TUNNEL) as http:
        assert http.get("/metrics", headers={"CF-Connecting-IP": "203.0.113.66"}).status_code == 403
