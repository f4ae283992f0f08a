"""Name resolution for every outbound check (webhook subscriptions here; the runtime's egress guard and
notification channels through runtime/outbound.py): one getaddrinfo, every address kept, so a check
sees all the addresses a connection could reach."""

from __future__ import annotations

import ipaddress
import socket

from ..core.egress import IPAddress

__all__ = ["resolve"]


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to (an IP literal is itself); OSError when it does not resolve."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in out:
            out.append(address)
    return out
