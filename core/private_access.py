"""Who may read operational endpoints such as /metrics: a client on the private network, or a
staff token. Pure: no Django."""
from __future__ import annotations

import hmac

from core.client_address import address_in, client_address, parse_address, parse_networks

# Loopback and NetBird's CGNAT range (100.64.0.0/10), where the rigs and the monitoring live.
DEFAULT_PRIVATE_NETWORKS = ("127.0.0.0/8", "::1/128", "100.64.0.0/10")


def private_access_allowed(
    *, remote_addr: str, forwarded_for: str | None, authorization: str, token: str, networks: list[str],
    trusted_proxies: tuple[str, ...] = (), client_header: str | None = None,
) -> bool:
    """The staff token admits anyone. Otherwise the real client (core.client_address)
    must be known and inside `networks`: a request through a trusted proxy is judged by the
    address the proxy names, never by the proxy's own (loopback) address; one that carries
    X-Forwarded-For from a sender that is not a trusted proxy, or comes from a trusted proxy that
    names nobody, has no known client and is refused."""
    if token:
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
            return True
    client = client_address(remote_addr=remote_addr, forwarded_for=forwarded_for, trusted_proxies=trusted_proxies,
                            client_header=client_header)
    if client is None:
        return False
    return address_in(parse_address(client), parse_networks(tuple(networks)))
