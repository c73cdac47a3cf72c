"""From a MESSAGE frame to what the harness is handed: message bodies and broker stamps.

This runs in a reader greenlet for every delivery, so it skips work a broadcast repeats: one
entry reaches every consumer of a connection as identical bytes, one after another, so the
bodies and stamps decoded last are reused when the next frame carries the same bytes.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from drivers.base import BrokerStamps
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.payload import decode_payload, is_batch, split_batch


def message_bodies(section: bytes, verify: bool) -> list[bytes]:
    """The bodies in a payload section: one, or each message of a batch, in order.

    Raises RemoteProtocolError for a bad checksum (only when `verify`), undecodable metadata
    or a compressed payload (the harness sends uncompressed bodies and reads stamps in them).
    """
    payload = decode_payload(section, verify)
    if payload.metadata.compression != pb.NONE:
        name = pb.CompressionType.Name(payload.metadata.compression)
        raise RemoteProtocolError(f"compressed payloads ({name}) are not supported")
    if not is_batch(payload.metadata):
        return [payload.data]
    return [data for _, data in split_batch(payload)]


def broker_stamps(entry_metadata: bytes) -> BrokerStamps:
    """Stage timestamps from BrokerEntryMetadata; a real Pulsar fills only broker_ms."""
    bem = pb.BrokerEntryMetadata()
    try:
        bem.ParseFromString(entry_metadata)
    except DecodeError as exc:
        raise RemoteProtocolError(f"undecodable BrokerEntryMetadata: {exc}") from exc
    return BrokerStamps(
        received_us=bem.received_us,
        persist_start_us=bem.persist_start_us,
        durable_us=bem.durable_us,
        notified_us=bem.notified_us,
        dispatch_us=bem.dispatch_us,
        broker_ms=bem.broker_timestamp,
    )


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
