"""Deliveries of one receive pass, handed to the harness grouped by message.

The same message reaches many consumers: every consumer of a connection as identical frames
(a broadcast), every subscription on a connection in a frame of its own with its own stamps
(the Shared baseline: one subscription per consumer), or one frame on each of thousands of
sockets (one connection per consumer). Whatever the path, a pass (one read on a connection, or
every socket the reactor found ready) gathers them here by message, and hands each message to
the harness once: `deliveries_received(payload, indexes, reads)` when the callback has it
(drivers.base.BatchConsumerCallback: parsed once, latencies recorded with counts), else one
`messages_received` per read. A message is known by identity: the codecs hand back the very
same bytes object for a payload equal to the one before on their connection, and `add` makes a
payload equal to the one added before it (from another socket) that very object, with one
memcmp instead of a parse.

A connection's own deliveries stay in the order they came: one joins the group of its message
only if the connection added nothing to a later group in the pass (a redelivery of an older
message after a newer one starts a group of its own), so the harness still sees every
reordering on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drivers.base import BrokerStamps, ConsumerCallback
from drivers.net.reactor import reactor

__all__ = ["Deliveries", "ReadDeliveries", "deliveries_for"]


class _Group:
    __slots__ = ("payload", "indexes", "reads")

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.indexes: list[int] = []
        self.reads: list[list[Any]] = []
        """[deliveries, receive_us, kernel_us, stamps] of each read, covering `indexes` in
        order."""


class Deliveries:
    """`add` during a pass, `flush` at its end (and before anything that must not overtake a
    delivery). `on_first` is called when a pass's first delivery comes (to have `flush` run at
    the end of the pass)."""

    __slots__ = (
        "_callback",
        "_batched",
        "_groups",
        "_by_payload",
        "_last_of",
        "_on_first",
        "_last_payload",
    )

    def __init__(
        self, callback: ConsumerCallback, on_first: Callable[[], None] = lambda: None
    ) -> None:
        self._callback = callback
        self._batched = getattr(callback, "deliveries_received", None)
        self._groups: list[_Group] = []
        self._by_payload: dict[int, int] = {}
        """id(payload) → position of its latest group in `_groups`."""
        self._last_of: dict[object, int] = {}
        """Connection → position of the latest group it added to (its order must hold)."""
        self._on_first = on_first
        self._last_payload = b""

    def add(
        self,
        source: object,
        payload: bytes,
        indexes: list[int],
        receive_us: int,
        kernel_us: int,
        stamps: BrokerStamps | None = None,
    ) -> None:
        """Deliveries of `payload` to the consumers `indexes`, read by connection `source` at
        `receive_us` (the kernel's receive time `kernel_us`, 0 if unknown), with `stamps`."""
        groups = self._groups
        if not groups:
            self._on_first()
        known = self._last_payload
        if payload is not known:
            if payload == known:  # read on another socket: one message all the same
                payload = known
            else:
                self._last_payload = payload
        at = self._by_payload.get(id(payload))
        if at is None or groups[at].payload is not payload or self._last_of.get(source, -1) > at:
            at = self._by_payload[id(payload)] = len(groups)
            groups.append(_Group(payload))
        self._last_of[source] = at
        group = groups[at]
        group.indexes += indexes
        reads = group.reads
        if reads:
            last = reads[-1]
            if last[1] == receive_us and last[2] == kernel_us and last[3] is stamps:
                last[0] += len(indexes)
                return
        reads.append([len(indexes), receive_us, kernel_us, stamps])

    def flush(self) -> None:
        """Hand over everything gathered, message by message, in the order they first came."""
        groups = self._groups
        if not groups:
            return
        self._groups = []
        self._by_payload.clear()
        self._last_of.clear()
        batched, received = self._batched, self._callback.messages_received
        for group in groups:
            if batched is not None:
                batched(group.payload, group.indexes, group.reads)
                continue
            at = 0
            for count, receive_us, kernel_us, stamps in group.reads:
                received(
                    group.indexes[at : at + count], group.payload, receive_us, stamps, kernel_us
                )
                at += count


_SHARED: dict[int, Deliveries] = {}


def deliveries_for(callback: ConsumerCallback) -> Deliveries:
    """The process's Deliveries for `callback` (every connection of a driver hands its
    deliveries to the same one), handed over at the end of each pass of the receive engine."""
    found = _SHARED.get(id(callback))
    if found is None or found._callback is not callback:

        def at_end_of_pass() -> None:
            reactor().after_pass(shared, shared.flush)

        shared = _SHARED[id(callback)] = Deliveries(callback, at_end_of_pass)
        found = shared
    return found


class ReadDeliveries:
    """One connection's view of the process's Deliveries, for a codec that hands out one
    delivery at a time (the peer drivers): `begin` each read with its times, `add` each
    delivery, `flush` before anything that must not overtake one."""

    __slots__ = ("_source", "_shared", "_receive_us", "_kernel_us")

    def __init__(self, source: object, callback: ConsumerCallback) -> None:
        self._source = source
        self._shared = deliveries_for(callback)
        self._receive_us = 0
        self._kernel_us = 0

    def begin(self, receive_us: int, kernel_us: int) -> None:
        """A new read: its deliveries carry these times."""
        self._receive_us, self._kernel_us = receive_us, kernel_us

    def add(self, index: int, payload: bytes) -> None:
        # Peers carry no broker stage stamps: the harness records e2e and the kernel time.
        self._shared.add(self._source, payload, [index], self._receive_us, self._kernel_us)

    def flush(self) -> None:
        self._shared.flush()
