"""From a MESSAGE event to what the harness is handed: message bodies and broker stamps.

The decoding is the protocol's (pulsar_protocol.payload and .stamps); this runs in a reader
greenlet for every delivery, so it skips work a broadcast repeats: one entry reaches every
consumer of a connection as identical bytes, one after another, so the bodies and stamps
decoded last are reused when the next frame carries the same bytes.
"""

from __future__ import annotations

from drivers.base import BrokerStamps
from pulsar_protocol.payload import message_bodies
from pulsar_protocol.stamps import decode_stamps

__all__ = ["DeliveryDecoder", "broker_stamps", "message_bodies"]


def broker_stamps(entry_metadata: bytes) -> BrokerStamps:
    """Stage timestamps from BrokerEntryMetadata; a real Pulsar fills only broker_ms."""
    return BrokerStamps(*decode_stamps(entry_metadata))


class DeliveryDecoder:
    """message_bodies and broker_stamps with a one-entry memory each (one per connection)."""

    __slots__ = ("verify", "_section", "_bodies", "_entry_metadata", "_stamps")

    def __init__(self, verify: bool) -> None:
        self.verify = verify
        self._section = b""
        self._bodies: list[bytes] = []
        self._entry_metadata = b""
        self._stamps: BrokerStamps | None = None

    def bodies(self, section: bytes) -> list[bytes]:
        # Equal bytes decode equally (and were verified already): memcmp beats protobuf.
        if section != self._section:
            self._bodies = message_bodies(section, self.verify)
            self._section = section
        return self._bodies

    def stamps(self, entry_metadata: bytes | None) -> BrokerStamps | None:
        if entry_metadata is None:
            return None
        if entry_metadata != self._entry_metadata or self._stamps is None:
            self._stamps = broker_stamps(entry_metadata)
            self._entry_metadata = entry_metadata
        return self._stamps
