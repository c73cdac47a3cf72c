"""A consumer attached to a subscription: its permits, its unacknowledged entries, its wire.

The consumer sits below the subscriptions (they import it); what it needs of its wire and what
its connection drives on its subscription are Protocols here, so nothing imports back.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from broker.core.entry import Entry
from broker.core.entry_log import EntryLog
from pulsar_protocol.commands import encode_varint
from pulsar_protocol.message_template import MessageTemplate


class ConsumerWire(Protocol):
    """What a consumer needs of its connection: the server's connection implements it."""

    writable: bool
    sends_broker_entry_metadata: bool

    def write_frames(self, frames: list[bytes]) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None: ...


class SubscriptionTopic(Protocol):
    """The topic as a consumer's connection reaches it through the subscription."""

    @property
    def log(self) -> EntryLog: ...

    def remove_subscription(self, name: str) -> None: ...


class ConsumerSubscription(Protocol):
    """What a consumer's commands act on: broker.subscriptions.subscription implements it."""

    @property
    def name(self) -> str: ...

    @property
    def mode(self) -> str: ...

    @property
    def topic(self) -> SubscriptionTopic: ...

    @property
    def durable(self) -> bool: ...

    @property
    def mark_delete(self) -> int: ...

    @property
    def consumers(self) -> Sequence[Consumer]: ...

    def add_consumer(self, consumer: Consumer) -> None: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def on_flow(self, consumer: Consumer, permits: int) -> None: ...

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None: ...

    def on_ack_run(self, consumers: list[Consumer], cumulative: bool, index: int) -> None: ...

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None: ...

    def wake(self, consumer: Consumer) -> None: ...

    def seek(self, index: int) -> None: ...


@dataclass(eq=False, slots=True)
class Consumer:
    consumer_id: int
    name: str
    wire: ConsumerWire
    subscription: ConsumerSubscription | None = None
    priority: int = 0
    address: str = ""
    permits: int = 0
    connected_since: float = field(default_factory=time.time)
    unacked: dict[int, int] = field(default_factory=dict)
    """index → messages in the entry, for entries sent and not yet acknowledged."""
    messages_out: int = 0
    bytes_out: int = 0
    hash_ranges: tuple[tuple[int, int], ...] | None = None
    """Key_Shared STICKY: the key hash ranges it asked for (keySharedMeta); None for AUTO_SPLIT."""
    id_varint: bytes = field(init=False, repr=False)
    """The consumer id as its MESSAGE frames carry it (message_template), encoded once."""
    slot: int = field(default=-1, init=False, repr=False)
    """Its place in a Broadcast dispatcher's per-consumer arrays (broker.subscriptions.
    broadcast: a million virtual cursors as arrays, not objects); -1 when it has none."""
    counters: SlotCounters | None = field(default=None, init=False, repr=False)
    """While it has a slot: the arrays that hold its permits and counters (`SlotCounters`)."""

    def __post_init__(self) -> None:
        self.id_varint = encode_varint(self.consumer_id)

    def frames_for(
        self,
        entries: list[Entry],
        dispatch_us: int,
        redelivery: dict[int, int] | None = None,
        templates: dict[tuple[int, bool, int], MessageTemplate] | None = None,
    ) -> list[bytes]:
        """MESSAGE frames for entries as buffers to write in order (payloads not copied),
        charging permits per message, not per entry. `templates` shares each entry's frame
        head among the consumers of one dispatch slice."""
        parts: list[bytes] = []
        with_bem = self.wire.sends_broker_entry_metadata
        for entry in entries:
            count = redelivery.get(entry.index, 0) if redelivery else 0
            key = (entry.index, with_bem, count)
            template = templates.get(key) if templates is not None else None
            if template is None:
                template = entry.message_template(dispatch_us if with_bem else None, count)
                if templates is not None:
                    templates[key] = template
            parts += (template.head(self.id_varint), entry.payload)
            self.permits -= entry.num_messages
            self.messages_out += entry.num_messages
            self.bytes_out += len(entry.payload)
        return parts


_FIELDS = ("permits", "messages_out", "bytes_out")
_OWN = tuple(Consumer.__dict__[name] for name in _FIELDS)
"""The consumer's own slots for them (member descriptors), under `SlotConsumer`'s properties."""


class SlotConsumer(Consumer):
    """A consumer whose permits and counters are kept by slot in `counters` (a Broadcast
    dispatcher's): its class while it has a slot there (`SlotCounters.take`), so every reader
    and writer of `permits`, `messages_out` and `bytes_out` sees the arrays, and the dispatcher
    serves a connection's consumers at the tail with a few C calls over them, not three
    attribute updates a consumer (issue 40). Other consumers keep plain attributes."""

    __slots__ = ()
    counters: SlotCounters

    @property
    def permits(self) -> int:
        return self.counters.permits[self.slot]

    @permits.setter
    def permits(self, value: int) -> None:
        self.counters.permits[self.slot] = value

    @property
    def messages_out(self) -> int:
        return self.counters.messages_out[self.slot]

    @messages_out.setter
    def messages_out(self, value: int) -> None:
        self.counters.messages_out[self.slot] = value

    @property
    def bytes_out(self) -> int:
        return self.counters.bytes_out[self.slot]

    @bytes_out.setter
    def bytes_out(self, value: int) -> None:
        self.counters.bytes_out[self.slot] = value


class SlotCounters:
    """Consumers' permits and counters as arrays of int64 by slot, beside a Broadcast
    dispatcher's cursor arrays (the dispatcher moves a slot in all of them alike)."""

    __slots__ = ("permits", "messages_out", "bytes_out")

    def __init__(self) -> None:
        self.permits = array("q")
        self.messages_out = array("q")
        self.bytes_out = array("q")

    @property
    def arrays(self) -> tuple[array[int], array[int], array[int]]:
        return self.permits, self.messages_out, self.bytes_out

    def take(self, consumer: Consumer) -> None:
        """Keep `consumer`'s values here, at its slot (the next: the caller appends to its
        own arrays alike), until `release`."""
        for values, own in zip(self.arrays, _OWN, strict=True):
            values.append(own.__get__(consumer))
            own.__set__(consumer, 0)
        consumer.counters = self
        consumer.__class__ = SlotConsumer

    def release(self, consumer: Consumer) -> None:
        """Give `consumer` its values back as its own attributes (it still has its slot; the
        caller then moves the slot's values in every array alike)."""
        slot = consumer.slot
        consumer.__class__ = Consumer
        for values, own in zip(self.arrays, _OWN, strict=True):
            own.__set__(consumer, values[slot])
        consumer.counters = None
