"""Host names and addresses: whether a broker is on loopback (source addresses in 127/8 reach
only such a broker)."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from gevent import socket

__all__ = ["is_loopback", "resolve_host"]


@lru_cache(maxsize=64)
def resolve_host(host: str) -> str:
    """The IPv4 address of a host, or the name itself when it does not resolve."""
    try:
        return str(ipaddress.ip_address(host))  # a literal: no resolver, no yield under gevent
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
