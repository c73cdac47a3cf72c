"""Kernel receive timestamps on a TCP socket (Linux `SO_TIMESTAMPING`, software RX stamps).

With them, each read off a consumer socket has two times: when the kernel received the bytes
(the control message of `recvmsg`) and when the client read them (the reader's clock read).
Their difference is the client's own delay, which a busy load generator would otherwise add to
the broker's latency. For TCP the kernel reports the receive time of the last segment the read
returned, so for a read that gathers several segments the earlier ones look a little later than
they arrived (the client delay is then slightly under-counted, never invented).

Elsewhere (another platform, a socket family without stamps, a kernel that refuses the option)
there is no kernel time: `enable` says so, or `kernel_time_us` returns 0, and the caller falls
back to the read time.
"""

from __future__ import annotations

import socket
import struct
import sys
from collections.abc import Iterable
from typing import Any

from results_contract.clock import now_us

__all__ = ["ANCILLARY_SIZE", "enable", "kernel_time_us", "read_into"]

SO_TIMESTAMPING = getattr(socket, "SO_TIMESTAMPING", 37)
SCM_TIMESTAMPING = SO_TIMESTAMPING  # the control message's type is the option's number
SOF_TIMESTAMPING_RX_SOFTWARE = 1 << 3
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
ANCILLARY_SIZE = 1024
"""recvmsg's room for control messages (SCM_TIMESTAMPING is three timespecs, 48 bytes)."""

_TIMESPEC = struct.Struct("=qq")  # the first of the three: the software stamp
_SOL_SOCKET = socket.SOL_SOCKET


def enable(sock: Any) -> bool:
    """Ask the kernel to stamp what `sock` receives; False where it cannot (not Linux, or the
    option refused)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(
            socket.SOL_SOCKET,
            SO_TIMESTAMPING,
            SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE,
        )
    except OSError:
        return False
    return True


def kernel_time_us(ancillary: Iterable[tuple[int, int, bytes]]) -> int:
    """The kernel's receive time (epoch µs, realtime clock) from recvmsg's control messages;
    0 when they hold none."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPING and len(data) >= 16:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return seconds * 1_000_000 + nanoseconds // 1000
    return 0


def read_into(raw: Any, room: Any, stamping: bool) -> tuple[int, int, int]:
    """One non-blocking read of the OS socket `raw` into `room`: (bytes read, read time,
    kernel receive time or 0), the read time one clock read for everything the read returned.
    Raises BlockingIOError when nothing waits (another reader drained it)."""
    if stamping:
        nbytes, ancillary, _, _ = raw.recvmsg_into([room], ANCILLARY_SIZE)
        if len(ancillary) == 1:  # the one control message asked for: no loop, no call
            level, kind, data = ancillary[0]
            if level == _SOL_SOCKET and kind == SCM_TIMESTAMPING and len(data) >= 16:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data)
                return nbytes, now_us(), seconds * 1_000_000 + nanoseconds // 1000
        return nbytes, now_us(), kernel_time_us(ancillary)
    nbytes = raw.recv_into(room)
    return nbytes, now_us(), 0
