"""Client sockets: connecting (from a chosen source address), and how many a process may hold.

A process holds fewer than 20,000 sockets here (DESIGN.md), so asking for more connections
than RLIMIT_NOFILE allows is an error that says what to change, not an EMFILE in the middle of
the connect storm. Ephemeral ports run out per (source address, destination): connections
spread over 127.0.0.2, 127.0.0.3, ... when asked, binding without a port
(IP_BIND_ADDRESS_NO_PORT) so the kernel picks it at connect time, per destination.
"""

from __future__ import annotations

import ipaddress
import resource
from typing import Any

from gevent import socket

__all__ = [
    "FD_MARGIN",
    "IP_BIND_ADDRESS_NO_PORT",
    "connect_socket",
    "socket_budget",
    "send_now",
    "source_address",
]

IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
FD_MARGIN = 256
"""File descriptors left for everything else in the process: logs, results, Locust's sockets."""
_FIRST_SOURCE = int(ipaddress.IPv4Address("127.0.0.2"))


def connect_socket(host: str, port: int, source: str | None, timeout: float) -> socket.socket:
    """A connected TCP socket, optionally from `source` (bind without a port: the kernel picks
    it at connect time, per destination, so each source address has its own port range)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if source is not None:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source, 0))
        sock.settimeout(timeout)
        sock.connect((host, port))
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def socket_budget() -> int:
    """Connections this process may open: the open-file limit minus FD_MARGIN."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(0, soft - FD_MARGIN)


def source_address(conn_id: int, spread: int) -> str | None:
    """127.0.0.2, 127.0.0.3, ... round robin over `spread` addresses; None when spread is 0."""
    if not spread:
        return None
    return str(ipaddress.IPv4Address(_FIRST_SOURCE + conn_id % spread))


def send_now(raw: Any, data: bytes | bytearray | memoryview) -> int:
    """One send() on the non-blocking OS socket `raw`: how much the kernel took now (0 when its
    buffer is full). The receive engine serves every connection of the process and so never
    waits for one; the rest is for the connection's writer. OSError (the peer gone) is raised."""
    try:
        return int(raw.send(data))
    except BlockingIOError:
        return 0
