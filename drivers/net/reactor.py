"""The receive engine: one greenlet per process drains every ready socket per wake.

A greenlet per socket, each woken by gevent for each read, costs a hub switch, a watcher and
a turn of the loop per socket per message: with one connection per consumer that was most of
the client's 83 µs per delivery (docs/benchmarks.md, "The receive engine"). Here the sockets
are registered with one level-triggered `select.epoll`; one greenlet waits for the epoll's own
descriptor to be readable through gevent's hub (so the rest of the process, subscribers,
timers, Locust, runs meanwhile), then asks the epoll which sockets are ready and calls each
one's reader, which reads what the socket holds without blocking (asyncio's
`_SelectorSocketTransport._read_ready` does the same: DESIGN.md, "Many sockets, one loop").
Work that is worth doing once per pass rather than once per socket (handing the pass's
deliveries to the harness grouped by message) runs at its end, through `after_pass`.

A reader must never block: it reads from the non-blocking socket under gevent's wrapper and
hands writes it cannot finish to a greenlet of its own. It may take as long as it needs (a
slowed harness), which then delays every socket of the process alike: the kernel's receive
times show that delay as the client's, not the broker's.
"""

from __future__ import annotations

import logging
import select
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import Protocol

import gevent
from gevent.hub import get_hub
from gevent.monkey import get_original

__all__ = ["Reactor", "Readable", "reactor"]

_epoll = get_original("select", "epoll")
"""The kernel's epoll (Linux), as before gevent's monkey-patching, which takes it out of
`select` in a Locust worker."""

log = logging.getLogger("drivers.net")

MAX_EVENTS = 256
"""Sockets handled per pass at most; then the loop turns, so a storm of ready sockets does not
hold up the other greenlets and the timers for its whole length (256 reads of 10 KB are a few
ms)."""


PASS_SECONDS = 0.02
"""A pass ends once its reads took this long, whatever is still ready (the epoll is level-
triggered: the next pass finds it). At a million consumers a worker's 5,000 connections each
bring an entry's 100 MESSAGEs: 256 of them in one pass are 25,600 deliveries, about 150 ms at
the 5.75 µs a delivery cost there (docs/benchmarks.md), past the client-bound limit on the
loop's lag (100 ms), while the timers (the ack flusher, the lag probe, the producer's
schedule) waited."""


class Readable(Protocol):
    carries_consumers: bool
    """Consumers receive on this socket (its pool put one there): held by `hold_consumers`."""

    def on_readable(self) -> None:
        """The socket has bytes (or an end, or an error): read once, without blocking."""


class Reactor:
    def __init__(self) -> None:
        self._epoll: select.epoll | None = None
        self._readers: dict[int, Readable] = {}
        self._after: dict[object, Callable[[], None]] = {}
        self._greenlet: gevent.Greenlet | None = None
        self._holding = False
        self._scratch = bytearray()

    def add(self, fd: int, reader: Readable) -> None:
        """Call `reader.on_readable()` whenever `fd` has something to read, until `remove`."""
        if self._epoll is None:
            self._epoll = _epoll()
        self._epoll.register(
            fd, 0 if self._holding and reader.carries_consumers else select.EPOLLIN
        )
        self._readers[fd] = reader
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def remove(self, fd: int) -> None:
        """Stop reading `fd` (before it is closed: a closed descriptor leaves the epoll by
        itself, but its number may come back as another socket's)."""
        if self._readers.pop(fd, None) is not None and self._epoll is not None:
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass  # closed already
        greenlet = self._greenlet
        if not self._readers and greenlet is not None and greenlet is not gevent.getcurrent():
            # Nothing left to read (when a reader leaves from within a pass, the pass ends it).
            self._greenlet = None
            greenlet.kill(block=False)

    def hold_consumers(self, held: bool) -> None:
        """Stop (or go back to) reading the sockets consumers receive on (OMB's paused
        consumers): what the broker sends them waits in the kernel and then at the broker,
        unacknowledged, while producers' sockets are read on (their receipts)."""
        self._holding = held
        epoll = self._epoll
        if epoll is None:
            return
        for fd, reader in self._readers.items():
            if reader.carries_consumers:
                epoll.modify(fd, 0 if held else select.EPOLLIN)

    def scratch(self, size: int) -> memoryview:
        """Room for one read of `size` bytes that a reader copies elsewhere at once (TLS's
        ciphertext, on its way into the decryptor): the readers run one after another, so
        one buffer serves them all, not one per socket."""
        if len(self._scratch) < size:
            self._scratch = bytearray(size)
        return memoryview(self._scratch)[:size]

    def after_pass(self, key: object, action: Callable[[], None]) -> None:
        """Run `action` once at the end of the current pass (once per key however often it is
        asked for)."""
        self._after[key] = action

    def _run(self) -> None:
        epoll = self._epoll
        assert epoll is not None
        hub = get_hub()
        watcher = hub.loop.io(epoll.fileno(), 1)  # 1: readable
        readers = self._readers
        try:
            while readers:
                # Through the hub before every pass, not gevent.sleep(0), which runs the other
                # greenlets that are ready but not the loop: timers (the ack flusher, the loop
                # lag probe, the producer's schedule) would wait for a moment with no socket
                # ready, which a burst to 10,000 sockets does not have for seconds.
                hub.wait(watcher)
                ready = epoll.poll(0, MAX_EVENTS)
                deadline = perf_counter() + PASS_SECONDS
                for fd, _ in ready:
                    reader = readers.get(fd)
                    if reader is not None:  # removed by a reader before it in this pass
                        try:
                            reader.on_readable()
                        except Exception:
                            log.exception("reader of descriptor %d failed", fd)
                            self.remove(fd)
                        if perf_counter() > deadline:
                            break  # the rest are still ready: the next pass reads them
                self._end_pass()
        finally:
            watcher.close()
            if self._greenlet is gevent.getcurrent():
                self._greenlet = None

    def _end_pass(self) -> None:
        """Run what the pass asked for (what it asks meanwhile runs too)."""
        while self._after:
            after, self._after = self._after, {}
            for action in after.values():
                try:
                    action()
                except Exception:
                    log.exception("end of a receive pass failed")


_REACTORS: weakref.WeakKeyDictionary[object, Reactor] = weakref.WeakKeyDictionary()


def reactor() -> Reactor:
    """This process's reactor (one per gevent hub: one per thread that runs greenlets)."""
    hub = get_hub()
    found = _REACTORS.get(hub)
    if found is None:
        found = _REACTORS[hub] = Reactor()
    return found
