"""A consumer attached to a subscription: its permits, its unacknowledged entries, its wire.

The consumer sits below the subscriptions (they import it); what it needs of its wire and what
its connection drives on its subscription are Protocols here, so nothing imports back.
"""

from __future__ import annotations

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

    @property
    def address(self) -> str:
        """The peer's host:port (admin stats' `address`)."""
        ...

    @property
    def connected_since(self) -> float:
        """When the connection was made, epoch seconds (admin stats' `connectedSince`)."""
        ...

    def write_frames(self, frames: list[bytes]) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None: ...

    def hold_reads(self) -> None: ...

    def release_reads(self) -> None: ...


class SubscriptionTopic(Protocol):
    """The topic as a consumer's connection reaches it through the subscription."""

    @property
    def log(self) -> EntryLog: ...

    def remove_subscription(self, name: str) -> None: ...


class _NoUnacked(dict[int, int]):
    """`Consumer.unacked` while a consumer owes nothing: one shared empty table, not a dict each
    (64 B a consumer); a write raises. Reading, `clear()` and `pop(i, None)` are no-ops on it."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("write a consumer's first unacknowledged entry with owe()")

    __setitem__ = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]


NO_UNACKED: dict[int, int] = _NoUnacked()


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
    permits: int = 0
    unacked: dict[int, int] = field(default_factory=lambda: NO_UNACKED)
    """index → messages in the entry, for entries sent and not yet acknowledged: the shared
    `NO_UNACKED` until the first (`owe`) and once it has left; always that for a Broadcast
    consumer (its virtual cursor knows what it owes)."""
    messages_out: int = 0
    bytes_out: int = 0
    hash_ranges: tuple[tuple[int, int], ...] | None = None
    """Key_Shared STICKY: the key hash ranges it asked for (keySharedMeta); None for AUTO_SPLIT."""
    id_varint: bytes = field(init=False, repr=False)
    """The consumer id as its MESSAGE frames carry it (message_template), encoded once."""
    slot: int = field(default=-1, init=False, repr=False)
    """Its place in a Broadcast dispatcher's per-consumer arrays (broker.subscriptions.
    broadcast: a million virtual cursors as arrays, not objects); -1 when it has none."""

    def __post_init__(self) -> None:
        self.id_varint = encode_varint(self.consumer_id)

    # Its connection's, as Pulsar's consumer stats report them: the same for every consumer of
    # a connection, so kept there, not per consumer (issue 40: 40 B of each, the float too).
    @property
    def address(self) -> str:
        return self.wire.address

    @property
    def connected_since(self) -> float:
        return self.wire.connected_since

    def owe(self) -> dict[int, int]:
        """Its unacknowledged table to write into: a dict of its own from the first entry."""
        unacked = self.unacked
        if unacked is NO_UNACKED:
            unacked = self.unacked = {}
        return unacked

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
