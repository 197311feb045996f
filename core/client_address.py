"""The real client address of a request behind the HTTPS proxy. Pure: no Django.

X-Forwarded-For is a list the client starts and every proxy appends to
(`client, proxy1, proxy2`); anyone can write its left part. Only hops added by proxies we run
can be believed, so the real client is the rightmost hop that is not one of our proxies
(OCS_TRUSTED_PROXIES). A request that does not come from a trusted proxy is its own client, and
any X-Forwarded-For it carries is a claim nobody vouches for.

A proxy that names the client in a header of its own (Cloudflare's `CF-Connecting-IP`, which
cloudflared passes on from Cloudflare's edge) is believed the same way: only when the setting
names that header (OCS_CLIENT_ADDRESS_HEADER) and the request comes from a trusted proxy (the
tunnel's cloudflared on loopback); from anyone else it is ignored.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from functools import lru_cache

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@lru_cache(maxsize=32)
def parse_networks(networks: tuple[str, ...]) -> tuple[Network, ...]:
    """Addresses or networks ("127.0.0.1", "10.0.0.0/8", "::1"); ValueError names a bad one."""
    parsed = []
    for network in networks:
        try:
            parsed.append(ipaddress.ip_network(network.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{network!r} is not an IP address or network") from None
    return tuple(parsed)


def parse_address(raw: str) -> Address | None:
    """An IP address as a proxy writes it: bare, or with a port ("1.2.3.4:5678", "[::1]:443")."""
    text = raw.strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def address_in(address: Address | None, networks: Iterable[Network]) -> bool:
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address.version == network.version and address in network for network in networks)


def client_address(*, remote_addr: str, forwarded_for: str | None, trusted_proxies: tuple[str, ...],
                   client_header: str | None = None) -> str | None:
    """The client's address, or None when it cannot be known:
    - the peer is a trusted proxy and `client_header` (the value of the header the setting
      names, e.g. CF-Connecting-IP) is an address: that address;
    - the peer is not a trusted proxy: the peer, unless it sent X-Forwarded-For (then it relays
      for someone it does not name credibly: unknown);
    - the peer is a trusted proxy: the rightmost hop of X-Forwarded-For that is not a trusted
      proxy; None if the proxy named nobody (or wrote something that is not an address); the
      leftmost hop if every hop is a trusted proxy.
    """
    trusted = parse_networks(trusted_proxies)
    peer = parse_address(remote_addr)
    hops = [hop.strip() for hop in (forwarded_for or "").split(",") if hop.strip()]
    if not address_in(peer, trusted):
        if hops:
            return None
        return str(peer) if peer is not None else None
    if client_header:
        named = parse_address(client_header)
        if named is not None:
            return str(named)
    if not hops:
        return None
    for hop in reversed(hops):
        address = parse_address(hop)
        if address is None:
            return None
        if not address_in(address, trusted):
            return str(address)
    first = parse_address(hops[0])
    return str(first) if first is not None else None


def meta_key(header: str) -> str:
    """The WSGI/ASGI environ key of a header name: "CF-Connecting-IP" -> "HTTP_CF_CONNECTING_IP"."""
    return "HTTP_" + header.strip().upper().replace("-", "_")


def request_client_address(meta: Mapping[str, object], *, trusted_proxies: tuple[str, ...],
                           client_header_name: str = "") -> str | None:
    """client_address() of a request's META (REMOTE_ADDR, X-Forwarded-For and the header the
    setting names), or None when it cannot be known."""
    header_value = meta.get(meta_key(client_header_name)) if client_header_name else None
    forwarded = meta.get("HTTP_X_FORWARDED_FOR")
    return client_address(remote_addr=str(meta.get("REMOTE_ADDR") or ""),
                          forwarded_for=str(forwarded) if forwarded is not None else None,
                          trusted_proxies=trusted_proxies,
                          client_header=str(header_value) if header_value is not None else None)
