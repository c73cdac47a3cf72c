"""Deliveries of one read, handed to the harness grouped (drivers.base.ConsumerCallback).

A broadcast reaches every subscriber of a connection with identical bytes, one after another
in the same read; the codecs hand back the very same bytes object for a payload equal to the
one before (a memcmp instead of a copy), so a run of them is one `messages_received` with
their consumer indexes, and the harness parses and records the message once. Every delivery
of a read carries that read's clock and kernel times.
"""

from __future__ import annotations

from drivers.base import ConsumerCallback


class DeliveryGroup:
    __slots__ = ("_callback", "_payload", "_indexes", "_receive_us", "_kernel_us")

    def __init__(self, callback: ConsumerCallback) -> None:
        self._callback = callback
        self._payload: bytes | None = None
        self._indexes: list[int] = []
        self._receive_us = 0
        self._kernel_us = 0

    def begin(self, receive_us: int, kernel_us: int) -> None:
        """A new read: its deliveries carry these times."""
        self._receive_us, self._kernel_us = receive_us, kernel_us

    def add(self, index: int, payload: bytes) -> None:
        if payload is not self._payload:
            if self._indexes:
                self.flush()
            self._payload = payload
        self._indexes.append(index)

    def flush(self) -> None:
        """Hand over what is grouped (at the end of each read, and before anything that must
        not overtake a delivery)."""
        indexes = self._indexes
        if not indexes:
            return
        self._indexes = []
        assert self._payload is not None
        # Peers carry no broker stage stamps: the harness records e2e and the kernel time.
        self._callback.messages_received(
            indexes, self._payload, self._receive_us, None, self._kernel_us
        )
