"""The address guard: a webhook goes only to global unicast addresses outside the IANA special-purpose
networks (``REFUSED``), unless its topic sets ``allow_private`` (docs/topics.md, "The address guard")."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from .endpoint import Endpoint
from .errors import WebhookError, WebhookRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_FAMILIES = frozenset({socket.AF_INET, socket.AF_INET6})


def _networks(*specs: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(spec) for spec in specs)


# The guard's tables, written out rather than taken from ``ipaddress``'s ``is_global`` and
# ``is_private``, which differ between Python versions. An address passes only if it is global
# unicast (GLOBAL_UNICAST) and in none of the REFUSED networks (the IANA special-purpose address
# registries: https://www.iana.org/assignments/iana-ipv4-special-registry and iana-ipv6-special-registry).
# IPv4 embedded in IPv6 (mapped, 6to4, NAT64) is judged as that IPv4 address.
GLOBAL_UNICAST = _networks(
    "0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3",  # IPv4 unicast: 0.0.0.0 to 223.255.255.255
    "2000::/3",  # IPv6 global unicast
)  # fmt: skip
REFUSED: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(spec), reason)
    for spec, reason in (
        ("169.254.169.254/32", "an instance metadata"),
        ("fd00:ec2::254/128", "an instance metadata"),
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignment (192.0.0.0/24)"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # 255.255.255.255 included
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignment (2001::/23: Teredo, ORCHID, benchmarking)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "private (unique local)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class Address:
    """One resolved address: what ``socket.connect`` takes, and the IP it is."""

    family: socket.AddressFamily
    sockaddr: tuple[Any, ...]  # (ip, port) or (ip, port, flowinfo, scope_id)
    ip: IPAddress


def resolve(host: str, port: int) -> list[Address]:
    """The TCP addresses of ``host`` (one DNS lookup). Raises ``WebhookError`` when it has none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise WebhookError(f"cannot resolve {host}: {exc.strerror or exc}") from None
    except (OSError, UnicodeError) as exc:
        raise WebhookError(f"cannot resolve {host}: {exc}") from None
    addresses: list[Address] = []
    for family, _, _, _, sockaddr in infos:
        if family not in _FAMILIES:  # an IPv6 stack's scoped address is "fe80::1%eth0"
            continue
        address = Address(family, tuple(sockaddr), ipaddress.ip_address(str(sockaddr[0]).partition("%")[0]))
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise WebhookError(f"cannot resolve {host}: no IPv4 or IPv6 address")
    return addresses


def refusal(ip: IPAddress) -> str | None:
    """Why the guard refuses ``ip`` (``"loopback"``, ``"private"``, ...), or None for a public one."""
    embedded = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if embedded is not None:
        reason = refusal(embedded)
        return None if reason is None else f"{reason} (embedded in IPv6)"
    for network, reason in REFUSED:
        if ip in network:
            return reason
    if not any(ip in network for network in GLOBAL_UNICAST):
        return "not global unicast"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``ip`` stands for: IPv4-mapped (::ffff:a.b.c.d), 6to4 (2002:AABB:CCDD::),
    NAT64 (64:ff9b::a.b.c.d); None for any other."""
    if ip in _MAPPED or ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    return None


def vet(endpoint: Endpoint, addresses: list[Address]) -> None:
    """Raises ``WebhookRefused`` if any of ``addresses`` is refused."""
    for address in addresses:
        reason = refusal(address.ip)
        if reason is not None:
            shown = "" if endpoint.host == str(address.ip) else f" resolves to {address.ip},"
            raise WebhookRefused(
                f"{endpoint.origin}: refused:{shown} {reason} address; set allow_private on the topic to allow "
                "non-public addresses"
            )
