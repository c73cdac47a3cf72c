"""What this project adds to, or reads from, Pulsar's wire beyond the protobuf schema.

Spelled once here because both the broker and the driver depend on the same spelling: a
Broadcast subscription is chosen by a subscription property (the wire has no fifth subType),
and keys hash as Apache's `Murmur3_32Hash` both for Key_Shared slots and partition routing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TypeAlias

import mmh3

from pulsar_protocol import pulsar_api_pb2 as pb

SUBSCRIPTION_MODE_PROPERTY = "subscriptionMode"
"""Consumer property (sent as CommandSubscribe.metadata) that selects a mode by name."""
BROADCAST = "Broadcast"

SubType: TypeAlias = "pb.CommandSubscribe._SubType.ValueType"  # only the stub names it

SUBTYPE_BY_NAME: dict[str, SubType] = {
    "Exclusive": pb.CommandSubscribe.Exclusive,
    "Shared": pb.CommandSubscribe.Shared,
    "Failover": pb.CommandSubscribe.Failover,
    "Key_Shared": pb.CommandSubscribe.Key_Shared,
}
NAME_BY_SUBTYPE: dict[int, str] = {int(v): k for k, v in SUBTYPE_BY_NAME.items()}
SUBSCRIPTION_MODES: tuple[str, ...] = (*SUBTYPE_BY_NAME, BROADCAST)


def now_us() -> int:
    """The clock of every stage stamp: realtime, in µs (the broker's stamps and the client's
    receive time are compared across processes, so it cannot be a monotonic clock)."""
    return time.time_ns() // 1000


KEY_SLOTS = 65536
"""Apache's Key_Shared hash range."""


def murmur3_32(key: bytes) -> int:
    """Pulsar's `Murmur3_32Hash.makeHash`: the unsigned Murmur3 hash masked to a positive int
    (Java's `& Integer.MAX_VALUE`), the base of both Key_Shared slots and key routing."""
    return mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF


def key_slot(key: bytes) -> int:
    """The Key_Shared slot of a message key (Murmur3_32 mod 65536)."""
    return murmur3_32(key) % KEY_SLOTS


def key_partition(key: bytes, partitions: int) -> int:
    """The partition of a keyed message, as Pulsar's HashingScheme.Murmur3_32Hash routing, so
    one key always lands on one partition and per-key order holds across the topic."""
    return murmur3_32(key) % partitions


def mode_property(mode: str) -> pb.KeyValue | None:
    """The property a consumer sends to ask for `mode`; None when the subType says it all."""
    return (
        None
        if mode in SUBTYPE_BY_NAME
        else pb.KeyValue(key=SUBSCRIPTION_MODE_PROPERTY, value=mode.lower())
    )


def requested_mode(properties: Iterable[tuple[str, str]]) -> str | None:
    """The mode a SUBSCRIBE asks for by property (the reverse of `mode_property`), by its
    canonical name, from its consumer and subscription properties (requests.Subscribe's
    `metadata` and `subscription_properties`); None when it asks for none, or for a mode this
    protocol does not name."""
    for key, value in properties:
        if key == SUBSCRIPTION_MODE_PROPERTY and value.lower() in _MODE_BY_LOWER:
            return _MODE_BY_LOWER[value.lower()]
    return None


_MODE_BY_LOWER = {mode.lower(): mode for mode in SUBSCRIPTION_MODES}


def wire_subtype(mode: str) -> SubType:
    """The subType sent for `mode`: Broadcast rides on Shared, so a broker without it still
    serves the consumer as Shared."""
    return SUBTYPE_BY_NAME.get(mode, pb.CommandSubscribe.Shared)
