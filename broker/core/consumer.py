"""A consumer attached to a subscription: its permits, its unacknowledged entries, its wire."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker.core.entry import Entry
from pulsar_protocol.commands import message_command_bytes
from pulsar_protocol.frames import frame_head

if TYPE_CHECKING:
    from broker.subscriptions.base import Subscription


class ConsumerWire(Protocol):
    """What a consumer needs of its connection: the server's connection implements it."""

    writable: bool
    sends_broker_entry_metadata: bool

    def write_frames(self, frames: list[bytes]) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None: ...

    def consumer_closed_by_broker(self, consumer_id: int) -> None: ...


@dataclass(eq=False, slots=True)
class Consumer:
    consumer_id: int
    name: str
    wire: ConsumerWire
    subscription: Subscription | None = None
    priority: int = 0
    address: str = ""
    permits: int = 0
    connected_since: float = field(default_factory=time.time)
    unacked: dict[int, int] = field(default_factory=dict)
    """index → messages in the entry, for entries sent and not yet acknowledged."""
    # Broadcast virtual cursor: the next entry to send, and everything below mark_delete acked.
    read_index: int = 0
    mark_delete: int = -1
    acked: set[int] = field(default_factory=set)
    messages_out: int = 0
    bytes_out: int = 0

    def frames_for(
        self,
        entries: list[Entry],
        dispatch_us: int,
        redelivery: dict[int, int] | None = None,
        bem_cache: dict[int, bytes] | None = None,
    ) -> list[bytes]:
        """MESSAGE frames for entries as buffers to write in order (payloads not copied),
        charging permits per message, not per entry. `bem_cache` shares the stage metadata
        of an entry among the consumers of one dispatch slice."""
        parts = []
        with_bem = self.wire.sends_broker_entry_metadata
        for entry in entries:
            count = redelivery.get(entry.index, 0) if redelivery else 0
            bem = None
            if with_bem:
                if bem_cache is None:
                    bem = entry.broker_entry_metadata(dispatch_us)
                else:
                    bem = bem_cache.get(entry.index)
                    if bem is None:
                        bem = bem_cache[entry.index] = entry.broker_entry_metadata(dispatch_us)
            cmd = message_command_bytes(self.consumer_id, entry.ledger_id, entry.entry_id, count)
            parts.append(frame_head(cmd, bem, len(entry.payload)))
            parts.append(entry.payload)
            self.permits -= entry.num_messages
            self.messages_out += entry.num_messages
            self.bytes_out += len(entry.payload)
        return parts
