"""A consumer attached to a subscription: its permits, its unacknowledged entries, its wire.

The consumer sits below the subscriptions (they import it); what it needs of its wire and what
its connection drives on its subscription are Protocols here, so nothing imports back.
"""

from __future__ import annotations

import time
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

    def hold_reads(self) -> None: ...

    def release_reads(self) -> None: ...


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
