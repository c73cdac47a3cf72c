"""Plain TCP connections on one epoll of the listener's own, each with a transport of about
100 B, where uvloop's costs about 1.2 KB (issue 40: at most 2 KiB of broker memory a consumer
with a connection per consumer).

Measured with 10,000 idle connections to a minimal uvloop server (peak RSS above the base, a
connection, docs/benchmarks.md): `loop.create_server` 1,277 B; `loop.add_reader` per socket
(a UVPoll each) 683-796 B; one `select.epoll` for all, its own fd watched by the loop, 121 B.
uvloop's TCPTransport alone is 680 B (two sockaddr_storage, a uv_shutdown_t, a Py_buffer),
plus its uv_tcp_t, a Context copy, a bound `data_received`, an empty write list and a weak
reference in the loop. The kernel's epoll entry is kernel memory here as it is in libuv.

`EpollTransport` keeps asyncio's transport contract for what a protocol sees: connection_made,
data_received, eof_received, connection_lost once (soon after the close, with the error that
closed it or None), pause_writing above the high-water mark and resume_writing at the low one,
pause_reading/resume_reading, close after what is buffered is written, abort. TLS listeners,
and a platform without epoll, keep the loop's transports (broker.server.service decides).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import select
import socket
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("broker.connection")

EPOLL_AVAILABLE = hasattr(select, "epoll")

READ_SIZE = 64 * 1024
"""The most one read takes: under glibc's mmap threshold (128 KiB), so that its bytes come
from the heap. `os.read(fd, 256 KiB)` gave every read a mapping of its own (mmap, mremap to a
page, munmap): 9.9-14.5 us against 1.35 us a 60-byte read (best of 20 x 200, load 15)."""

READS_PER_TURN = 4
"""Reads of a connection a turn while each fills READ_SIZE: a publisher's SENDs are taken up
to 256 KiB a turn, as uvloop's read buffer took them."""

ACCEPTS_PER_TURN = 1024
"""Connections accepted a turn of the loop: a subscription storm's are taken in large bites
(libuv accepts until the backlog is empty), without holding the loop for all of them."""

ACCEPT_RETRY_S = 1.0
"""Out of file descriptors: accepting pauses this long (asyncio's ACCEPT_RETRY_DELAY), rather
than spinning on a listening socket that stays ready."""

EVENTS_PER_POLL = 1024
POLLS_PER_TURN = 16
"""Ready connections handled a turn: up to 16 polls of 1,024 (libuv polls up to 48 times a
turn while its 1,024 events come back full); the rest are taken in the next turn."""

_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_IN, _OUT = (select.EPOLLIN, select.EPOLLOUT) if EPOLL_AVAILABLE else (1, 4)
_FAILED = select.EPOLLHUP | select.EPOLLERR if EPOLL_AVAILABLE else 0
_READABLE, _WRITABLE = _IN | _FAILED, _OUT | _FAILED
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
"""Errors of a peer that went away: logged at debug level, as asyncio does."""


@functools.cache
def _limits(high: int | None, low: int | None) -> tuple[int, int]:
    """(low, high) water marks as asyncio sets them; one tuple for every connection given the
    same (the broker gives all the same)."""
    if high is None:
        high = 64 * 1024 if low is None else 4 * low
    if low is None:
        low = high // 4
    if not high >= low >= 0:
        raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
    return low, high


_DEFAULT_LIMITS = _limits(None, None)


class _Pending:
    """What the socket has not taken yet; a connection has one only while it waits to write
    (None otherwise: nothing kept between writes)."""

    __slots__ = ("buffers", "size", "paused")

    def __init__(self, buffers: list[Any], size: int) -> None:
        self.buffers = buffers
        self.size = size
        self.paused = False
        """The protocol was told pause_writing (above the high-water mark)."""


class EpollListener:
    """A listening socket, its connections registered in one epoll whose fd the loop watches.

    The listening socket is the caller's, bound, listening and non-blocking. `close()` stops
    accepting; the connections stay until they are closed (as asyncio.Server's close)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._epoll = select.epoll()
        self._by_fd: list[EpollTransport | None] = []
        """Each open connection at its fd (file descriptors are small and dense: a list slot
        is 8 B a connection, a dict entry and an int key about 80)."""
        self._open = 0
        self._serving = True
        self.sockets = (sock,)
        loop.add_reader(sock.fileno(), self._accept)
        loop.add_reader(self._epoll.fileno(), self._ready)

    def close(self) -> None:
        """Stop accepting; the epoll goes with the last connection."""
        if not self._serving:
            return
        self._serving = False
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        if not self._open:
            self._close_epoll()

    def _close_epoll(self) -> None:
        self._loop.remove_reader(self._epoll.fileno())
        self._epoll.close()

    # -- accepting -----------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("accepting a connection failed: %s", exc)
                    return
                log.error("accepting paused for %s s: %s", ACCEPT_RETRY_S, exc)
                self._loop.remove_reader(self._sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._resume_accepting)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio and uvloop
            self._start(sock.detach())

    def _resume_accepting(self) -> None:
        if self._serving:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _start(self, fd: int) -> None:
        table = self._by_fd
        if fd >= len(table):
            table.extend([None] * (fd + 1 - len(table)))
        protocol = self._factory()
        transport = EpollTransport(self, fd, protocol)
        table[fd] = transport
        self._open += 1
        self._epoll.register(fd, _IN)
        protocol.connection_made(transport)

    def _forget(self, fd: int) -> None:
        """`fd` is about to be closed: nothing of it is looked at again (a later file, or
        connection, may get the same number)."""
        self._by_fd[fd] = None
        self._open -= 1
        if not self._open and not self._serving:
            self._close_epoll()

    # -- ready connections ---------------------------------------------------------------
    def _ready(self) -> None:
        table, poll = self._by_fd, self._epoll.poll
        for _ in range(POLLS_PER_TURN):
            events = poll(0, EVENTS_PER_POLL)
            for fd, flags in events:
                transport = table[fd]
                if transport is None:
                    continue  # closed earlier in this batch
                try:
                    if flags & _WRITABLE and transport._out is not None:
                        transport._write_ready()
                    if flags & _READABLE and transport._mask & _IN:
                        transport._read_ready()
                except Exception as exc:  # the protocol's: this connection goes, not the others
                    transport._fatal(exc)
            if len(events) < EVENTS_PER_POLL:
                return

    def _watch(self, fd: int, old: int, new: int) -> None:
        """Ask epoll for `new` events of `fd` instead of `old` (none: not registered, so that a
        hang-up, reported whatever is asked, does not wake a connection that reads nothing)."""
        if not old:
            self._epoll.register(fd, new)
        elif not new:
            self._epoll.unregister(fd)
        else:
            self._epoll.modify(fd, new)


class EpollTransport(asyncio.Transport):
    """One accepted connection of an EpollListener: its fd, what it asks epoll for, and what
    waits to be written (None while nothing does)."""

    __slots__ = ("_fd", "_listener", "_protocol", "_mask", "_out", "_closing", "_limits")

    def __init__(self, listener: EpollListener, fd: int, protocol: asyncio.BaseProtocol) -> None:
        # BaseTransport's `_extra` is left unset: get_extra_info asks the socket.
        self._fd = fd
        self._listener = listener
        self._protocol: Any = protocol
        self._mask = _IN
        self._out: _Pending | None = None
        self._closing = False
        self._limits = _DEFAULT_LIMITS

    # -- asyncio.BaseTransport ------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """'peername' and 'sockname', asked of the socket (logs and admin stats; not kept)."""
        if name not in ("peername", "sockname") or self._fd < 0:
            return default
        sock = socket.socket(fileno=self._fd)
        try:
            return sock.getpeername() if name == "peername" else sock.getsockname()
        except OSError:
            return default
        finally:
            sock.detach()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """No more reads; close once what is buffered is written."""
        if self._closing:
            return
        self._closing = True
        if self._out is None:
            self._finish(None)
        else:
            self._set_mask(_OUT)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    # -- asyncio.ReadTransport ------------------------------------------------------------
    def is_reading(self) -> bool:
        return not self._closing and bool(self._mask & _IN)

    def pause_reading(self) -> None:
        if not self._closing:
            self._set_mask(self._mask & ~_IN)

    def resume_reading(self) -> None:
        if not self._closing:
            self._set_mask(self._mask | _IN)

    # -- asyncio.WriteTransport -----------------------------------------------------------
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._limits = _limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._limits

    def get_write_buffer_size(self) -> int:
        return self._out.size if self._out is not None else 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writelines([data])

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        """Write now what the socket takes, keep the rest (the buffers themselves: a payload
        shared by many connections is not copied) until epoll says it can take more."""
        if self._closing:
            return
        buffers = list_of_data if type(list_of_data) is list else list(list_of_data)
        out = self._out
        if out is not None:
            out.buffers.extend(buffers)
            out.size += sum(map(len, buffers))
            self._check_high(out)
            return
        rest = self._send(buffers)
        if rest is not None:
            out = self._out = _Pending(rest, sum(map(len, rest)))
            self._set_mask(self._mask | _OUT)
            self._check_high(out)

    def can_write_eof(self) -> bool:
        return False

    def abort(self) -> None:
        """Close now; what is buffered is dropped."""
        self._out = None
        self._closing = True
        self._finish(None)

    # -- inside ---------------------------------------------------------------------------
    def _send(self, buffers: list[Any]) -> list[Any] | None:
        """Write `buffers`; what the socket did not take (None: all taken, or the connection
        failed and is closing)."""
        fd = self._fd
        while True:
            chunk = buffers if len(buffers) <= _IOV_MAX else buffers[:_IOV_MAX]
            try:
                sent = os.writev(fd, chunk)
            except (BlockingIOError, InterruptedError):
                return buffers
            except OSError as exc:
                self._fatal(exc)
                return None
            if sent == sum(map(len, chunk)):
                if chunk is buffers:
                    return None
                buffers = buffers[len(chunk) :]
                continue
            return _unsent(buffers, sent)

    def _write_ready(self) -> None:
        out = self._out
        assert out is not None
        rest = self._send(out.buffers)
        if self._out is None:  # failed and closed meanwhile
            return
        if rest is None:
            self._out = None
            if self._closing:
                self._finish(None)
                return
            self._set_mask(self._mask & ~_OUT)
            if out.paused:
                self._protocol.resume_writing()
            return
        out.buffers, out.size = rest, sum(map(len, rest))
        if out.paused and out.size <= self._limits[0]:
            out.paused = False
            self._protocol.resume_writing()

    def _check_high(self, out: _Pending) -> None:
        if not out.paused and out.size > self._limits[1]:
            out.paused = True
            self._protocol.pause_writing()

    def _read_ready(self) -> None:
        for _ in range(READS_PER_TURN):
            try:
                data = os.read(self._fd, READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._fatal(exc)
                return
            if not data:
                self._set_mask(self._mask & ~_IN)  # nothing more will come
                if not self._protocol.eof_received():
                    self.close()
                return
            self._protocol.data_received(data)
            if len(data) < READ_SIZE or not self._mask & _IN or self._closing:
                return  # all read, or the protocol paused or closed

    def _set_mask(self, mask: int) -> None:
        old = self._mask
        if mask != old and self._fd >= 0:
            self._listener._watch(self._fd, old, mask)
            self._mask = mask

    def _fatal(self, exc: Exception) -> None:
        """The connection failed (the peer's error, or the protocol's): closed now."""
        if isinstance(exc, _GONE):
            log.debug("connection lost: %r", exc)
        else:
            log.error("closing a connection after an error", exc_info=exc)
        self._out = None
        self._closing = True
        self._finish(exc)

    def _finish(self, exc: Exception | None) -> None:
        """Close the fd and tell the protocol, soon, as asyncio does (once)."""
        fd = self._fd
        if fd < 0:
            return
        self._set_mask(0)
        self._fd = -1
        self._listener._forget(fd)
        os.close(fd)
        self._listener._loop.call_soon(self._protocol.connection_lost, exc)


def _unsent(buffers: list[Any], sent: int) -> list[Any]:
    """What is left of `buffers` after the first `sent` bytes (a partial write)."""
    for i, buf in enumerate(buffers):
        size = len(buf)
        if sent < size:
            head = memoryview(buf)[sent:] if sent else buf
            return [head, *buffers[i + 1 :]]
        sent -= size
    return []
