"""The six-stage timestamps a broker carries in BrokerEntryMetadata (DESIGN.md, six stages).

Apache's field 1 `broker_timestamp` holds ms; the project's µs stamps are fields 100..104.
Encoding and decoding live here so the broker and the driver read one spelling.
"""

from __future__ import annotations

from typing import NamedTuple

from google.protobuf.message import DecodeError

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import encode_varint
from pulsar_protocol.errors import RemoteProtocolError

_DISPATCH_US_TAG = b"\xc0\x06"  # field 104, varint


class EntryStamps(NamedTuple):
    """Broker stage stamps of one entry (µs, realtime); 0 where the broker set none. A real
    Pulsar fills only `broker_ms`. A tuple, so a caller can unpack it into its own type."""

    received_us: int = 0
    persist_start_us: int = 0
    durable_us: int = 0
    notified_us: int = 0
    dispatch_us: int = 0
    broker_ms: int = 0


def _before_dispatch(index: int, stamps: EntryStamps) -> pb.BrokerEntryMetadata:
    return pb.BrokerEntryMetadata(
        broker_timestamp=stamps.broker_ms or stamps.received_us // 1000,
        index=index,
        received_us=stamps.received_us,
        persist_start_us=stamps.persist_start_us,
        durable_us=stamps.durable_us,
        notified_us=stamps.notified_us,
    )


def encode_stamps(index: int, stamps: EntryStamps) -> bytes:
    """Serialized BrokerEntryMetadata for an entry at `index` (broker_ms is derived from
    received_us when not given, as Apache stamps the receive time)."""
    metadata = _before_dispatch(index, stamps)
    metadata.dispatch_us = stamps.dispatch_us
    return metadata.SerializeToString()


def encode_stamps_before_dispatch(index: int, stamps: EntryStamps) -> bytes:
    """`encode_stamps` without its last field: a broker stamps each dispatch of an entry (to
    100,000 one-consumer subscriptions, 100,000 dispatches) and the rest is the entry's, so it
    is serialized once and `with_dispatch_stamp` completes it."""
    return _before_dispatch(index, stamps).SerializeToString()


def with_dispatch_stamp(before_dispatch: bytes, dispatch_us: int) -> bytes:
    """`encode_stamps` byte for byte, from `encode_stamps_before_dispatch`: protobuf writes
    fields in number order and dispatch_us (104) is the last; a unit test checks it."""
    return before_dispatch + _DISPATCH_US_TAG + encode_varint(dispatch_us)


def decode_stamps(entry_metadata: bytes) -> EntryStamps:
    """The stage stamps in serialized BrokerEntryMetadata; RemoteProtocolError if undecodable."""
    bem = pb.BrokerEntryMetadata()
    try:
        bem.ParseFromString(entry_metadata)
    except DecodeError as exc:
        raise RemoteProtocolError(f"undecodable BrokerEntryMetadata: {exc}") from exc
    return EntryStamps(
        bem.received_us,
        bem.persist_start_us,
        bem.durable_us,
        bem.notified_us,
        bem.dispatch_us,
        bem.broker_timestamp,
    )
