"""Who may read operational endpoints such as /metrics: the private network, or a staff token.
Pure: no Django."""
from __future__ import annotations

import hmac
import ipaddress

# Loopback and NetBird's CGNAT range (100.64.0.0/10), where the rigs and the monitoring live.
DEFAULT_PRIVATE_NETWORKS = ("127.0.0.0/8", "::1/128", "100.64.0.0/10")


def private_access_allowed(
    *, remote_addr: str, forwarded_for: str | None, authorization: str, token: str, networks: list[str]
) -> bool:
    """A request that came through the public HTTPS proxy carries X-Forwarded-For: it is
    public even though the proxy connects from loopback, so only the token admits it."""
    if token:
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
            return True
    if forwarded_for:
        return False
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(network, strict=False) for network in networks)
