"""From a MESSAGE event to what the harness is handed: message bodies and broker stamps.

The decoding is the protocol's (pulsar_protocol.payload and .stamps); this runs for every
delivery, so it skips work a fan-out repeats: one entry reaches every consumer as identical
bytes, on one connection one frame after another, or on thousands of connections in any order.
One decoder serves every connection of a process (drivers.pulsar.pool), and it remembers the
entries and stamps it decoded recently, not just the last: a client that fell behind reads each
socket at a different entry, and decoding again whenever the entry changed from one socket to
the next made it fall further behind (10,000 consumers, one connection each: message_bodies
and broker_stamps were 13 % of a worker, py-spy, docs/benchmarks.md).
"""

from __future__ import annotations

from drivers.base import BrokerStamps
from pulsar_protocol.payload import message_bodies
from pulsar_protocol.stamps import decode_stamps

__all__ = ["DeliveryDecoder", "broker_stamps", "message_bodies"]


def broker_stamps(entry_metadata: bytes) -> BrokerStamps:
    """Stage timestamps from BrokerEntryMetadata; a real Pulsar fills only broker_ms."""
    return BrokerStamps(*decode_stamps(entry_metadata))


MEMORY = 256
"""Entries, and stamps, a decoder remembers (forgotten all at once when full)."""


class DeliveryDecoder:
    """message_bodies and broker_stamps with a memory of what they decoded recently. The very
    same objects come back for equal bytes, so the deliveries of one message are grouped by
    identity (drivers.net.deliveries)."""

    __slots__ = ("verify", "_section", "_bodies", "_by_entry", "_stamps")

    def __init__(self, verify: bool) -> None:
        self.verify = verify
        self._section = b""
        self._bodies: list[bytes] = []
        self._by_entry: dict[object, tuple[bytes, list[bytes]]] = {}
        self._stamps: dict[bytes, BrokerStamps] = {}

    def bodies(self, section: bytes, entry: object = None) -> list[bytes]:
        """The message bodies of a payload section; `entry` names it (its ledger and entry
        ids) for the memory, which then still compares the bytes (a memcmp beats protobuf;
        equal bytes decode equally, and were verified already). Without a name, only the
        last section is remembered."""
        if entry is None:
            if section != self._section:
                self._bodies = message_bodies(section, self.verify)
                self._section = section
            return self._bodies
        known = self._by_entry.get(entry)
        if known is not None and (known[0] is section or known[0] == section):
            return known[1]
        bodies = message_bodies(section, self.verify)
        if len(self._by_entry) >= MEMORY:
            self._by_entry.clear()
        self._by_entry[entry] = (section, bodies)
        return bodies

    def stamps(self, entry_metadata: bytes | None) -> BrokerStamps | None:
        if entry_metadata is None:
            return None
        known = self._stamps.get(entry_metadata)  # a few dozen bytes: hashed, not decoded
        if known is None:
            known = broker_stamps(entry_metadata)
            if len(self._stamps) >= MEMORY:
                self._stamps.clear()
            self._stamps[entry_metadata] = known
        return known
