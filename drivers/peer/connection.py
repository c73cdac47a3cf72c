"""One TCP connection to a peer broker under gevent: the socket half that every peer driver's
connection shares, measured at the wire as the native Pulsar driver's is.

No greenlet reads it: the process's receive engine (drivers.net.reactor) calls `on_readable`
when the socket has bytes, and the connection reads once, without blocking, whole buffers (up
to RECV_SIZE at once), with one clock read per recv and, on Linux, the kernel's receive time of
those bytes (SO_TIMESTAMPING, drivers.net.rx_timestamps), and hands the bytes with both times
to the subclass's sans-IO codec (`_on_data`), whose deliveries go to the pass's
drivers.net.deliveries: with thousands of consumers, one connection each, a greenlet woken per
socket per message was most of the client's cost.
Writes from many greenlets (subscribers, a producer, the reader's acknowledgements and pongs)
are queued and leave under one lock, in the order they were queued: `write_soon` coalesces
what a connect storm queues in one loop turn into one send. The engine never waits for a
socket: what the kernel does not take at once from its writes is left to the writer greenlet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent import socket
from gevent.event import AsyncResult, Event
from gevent.lock import Semaphore
from gevent.pool import Group

from drivers.base import DriverError
from drivers.net import rx_timestamps
from drivers.net.deliveries import ReadDeliveries
from drivers.net.reactor import reactor
from drivers.net.sockets import connect_socket, send_now
from drivers.peer.settings import check_service_url
from results_contract.clock import now_us

__all__ = ["PeerConnection", "RequestFailed", "now_us", "reach"]

log = logging.getLogger("drivers.peer")

RECV_SIZE = 256 * 1024


class RequestFailed(DriverError):
    """A request was refused, never answered, or its connection failed. str() is what the
    harness records for a failed subscribe, so it names no consumer."""


def reach(service_url: str, scheme: str, default_port: int, timeout: float) -> None:
    """A peer driver's check_reachable: the URL's scheme, then a TCP connect."""
    host, port = check_service_url(service_url, scheme, default_port)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise DriverError(
            f"broker at {service_url} is unreachable ({exc.strerror or exc}); start it, or drop "
            "client.serviceUrl from the driver file to have the harness start embeddedBroker"
        ) from None


class PeerConnection:
    """Subclasses implement `_hello` (what to send once connected), `_on_data` (bytes read,
    with their read and kernel times) and call `_set_ready` when the handshake is done."""

    _deliveries: ReadDeliveries
    """Set by each protocol's connection: where its codec's deliveries go."""

    def __init__(
        self,
        conn_id: int,
        host: str,
        port: int,
        group: Group,
        *,
        connect_timeout: float,
        on_closed: Callable[[PeerConnection], None] = lambda conn: None,
    ) -> None:
        self.id = conn_id
        self.host, self.port = host, port
        self.address = f"{host}:{port}"
        self.error: str | None = None
        """Why the connection is closed; None while it is open (or opening)."""
        self.kernel_timestamps = False
        """Whether the socket has kernel receive times and its latest read carried one."""
        self.carries_consumers = False
        """Set by the pool when it puts consumers here (drivers.net.reactor.hold_consumers)."""
        self._group = group
        self._connect_timeout = connect_timeout
        self._on_closed = on_closed
        self._sock: socket.socket | None = None
        self._ready: AsyncResult[None] = AsyncResult()
        self._out = bytearray()
        self._write_lock = Semaphore()
        self._write_wanted = Event()
        self._writer: gevent.Greenlet | None = None
        self._reactor = reactor()
        self._fd = -1
        self._raw: Any = None
        """The OS socket under gevent's wrapper (non-blocking), which the engine reads."""
        self._stamping = False
        self._room = memoryview(bytearray(0))

    @property
    def closed(self) -> bool:
        return self.error is not None

    # -- opening -------------------------------------------------------------------------------
    def open(self, source: str | None = None) -> None:
        """Connect and handshake within connectTimeoutSeconds; the outcome is for
        wait_ready(), so everyone waiting on this connection hears it."""
        deadline = time.monotonic() + self._connect_timeout
        via = f" from {source}" if source else ""
        try:
            try:
                sock = connect_socket(self.host, self.port, source, self._connect_timeout)
            except OSError as exc:
                self._fail(f"cannot connect to {self.address}{via}: {exc.strerror or exc}")
                return
            if self.error is not None:
                sock.close()
                return
            self.start(sock)
            self._ready.wait(max(0.0, deadline - time.monotonic()))
            if not self._ready.ready():
                self._fail(
                    f"cannot connect to {self.address}: no handshake in {self._connect_timeout:g} s"
                )
        finally:
            if not self._ready.ready():
                self._fail(f"opening the connection to {self.address} was interrupted")

    def start(self, sock: socket.socket) -> None:
        """Start the reader on a connected socket and say hello (tests pass a socketpair)."""
        self._sock = sock
        self._raw = getattr(sock, "_sock", sock)  # gevent's wrapper keeps the OS socket here
        self.kernel_timestamps = self._stamping = rx_timestamps.enable(sock)
        self._room = memoryview(bytearray(RECV_SIZE))
        self._fd = sock.fileno()
        self._reactor.add(self._fd, self)
        self._hello()

    def wait_ready(self) -> None:
        """Block until the handshake is done (open() settles it in time); raises
        RequestFailed if it failed."""
        self._ready.wait(2 * self._connect_timeout)
        if not self._ready.ready():
            raise RequestFailed(f"no handshake with {self.address}")
        self._ready.get()

    def _set_ready(self) -> None:
        if not self._ready.ready():
            self._ready.set(None)

    # -- writing -------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """Queue `data` behind what is queued and write it all now; RequestFailed when the
        connection is closed or the write fails."""
        self._queue(data)
        self._flush()

    def write_soon(self, data: bytes) -> None:
        """Queue `data`; the writer sends everything queued at its next turn, in one send."""
        self._queue(data)
        if self._writer is None:
            self._writer = self._group.spawn(self._write_loop)
        self._write_wanted.set()

    def _queue(self, data: bytes) -> None:
        if self.error is not None:
            raise RequestFailed(self.error)
        self._out += data

    def _write_loop(self) -> None:
        while True:
            self._write_wanted.wait()
            self._write_wanted.clear()
            try:
                self._flush()
            except RequestFailed:
                return

    def _flush_now(self) -> None:
        """`_flush` for the receive engine, which serves every connection of the process and
        so must not wait for one: one send() of what the kernel takes now; the rest, or all of
        it while another greenlet is writing, goes to the writer."""
        if not self._out:
            return
        if self._write_lock.locked() or self._raw is None:
            self.write_soon(b"")
            return
        self._before_flush()
        data, self._out = self._out, bytearray()
        try:
            sent = send_now(self._raw, data)
        except OSError as exc:
            self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
            raise RequestFailed(f"connection to {self.address} lost") from None
        if sent < len(data):
            self._out[:0] = data[sent:]
            self.write_soon(b"")

    def _flush(self) -> None:
        if not self._out:
            return
        with self._write_lock:
            self._before_flush()
            data, self._out = self._out, bytearray()
            sock = self._sock
            if not data or sock is None:
                return
            try:
                sent = sock.send(data)
                if sent < len(data):
                    sock.sendall(memoryview(data)[sent:])
            except OSError as exc:
                self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
                raise RequestFailed(f"connection to {self.address} lost") from None

    # -- reading -------------------------------------------------------------------------------
    def on_readable(self) -> None:
        """The engine's call: the socket has bytes (or its end). One recv into the
        connection's buffer, handed to the codec with its read and kernel times."""
        view, raw = self._room, self._raw
        kernel_us = 0
        try:
            try:
                nbytes, receive_us, kernel_us = rx_timestamps.read_into(raw, view, self._stamping)
                if self._stamping:
                    self.kernel_timestamps = kernel_us != 0
            except BlockingIOError:
                return  # woken for nothing: wait for the next
            if not nbytes:
                self._fail(f"connection closed by the broker at {self.address}")
                return
            self._on_data(view[:nbytes], receive_us, kernel_us)
            self._flush_now()
        except RequestFailed:
            return
        except OSError as exc:
            self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
        except Exception as exc:
            log.exception("connection %d: reader failed", self.id)
            self._fail(f"reader failed: {exc!r}")

    # -- the protocol's part ---------------------------------------------------------------------
    def _hello(self) -> None:
        """Queue what the protocol sends first (CONNECT); nothing by default."""

    def _on_data(self, data: memoryview, receive_us: int, kernel_us: int) -> None:
        raise NotImplementedError

    def _before_flush(self) -> None:
        """Add to what is queued just before it leaves (NATS: one PING behind a turn's SUBs)."""

    def _on_failed(self, error: RequestFailed) -> None:
        """Settle everything waiting on this connection with `error`."""

    # -- closing -------------------------------------------------------------------------------
    def close(self) -> None:
        self._fail("closed by the driver", lost=False)

    def _fail(self, reason: str, lost: bool = True) -> None:
        if self.error is not None:
            return
        self.error = reason
        error = RequestFailed(reason)
        if lost:
            log.warning("connection %d to %s: %s", self.id, self.address, reason)
        if not self._ready.ready():
            self._ready.set_exception(error)
        self._on_failed(error)
        if self._fd >= 0:
            self._reactor.remove(self._fd)
        if self._writer is not None and self._writer is not gevent.getcurrent():
            self._writer.kill(block=False)
        if self._sock is not None:
            self._sock.close()
        self._on_closed(self)
