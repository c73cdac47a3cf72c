"""A topic: its entry log, its producers and its subscriptions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.core.entry import Entry
from broker.core.entry_log import EntryLog, now_us
from broker.subscriptions.base import Subscription
from broker.subscriptions.broadcast import BroadcastSubscription
from broker.subscriptions.key_shared import KeySharedSubscription
from broker.subscriptions.shared import SharedSubscription
from broker.subscriptions.single_active import ExclusiveSubscription, FailoverSubscription

if TYPE_CHECKING:
    from broker.storage_adapter import CursorSink

TRIM_DELAY_S = 0.2

SUBSCRIPTION_CLASSES: dict[str, type[Subscription]] = {
    "Exclusive": ExclusiveSubscription,
    "Shared": SharedSubscription,
    "Failover": FailoverSubscription,
    "Key_Shared": KeySharedSubscription,
    "Broadcast": BroadcastSubscription,
}


@dataclass(eq=False)
class Producer:
    producer_id: int
    name: str
    topic: Topic
    address: str = ""
    messages_in: int = 0
    bytes_in: int = 0
    pending: list = field(default_factory=list)


class Topic:
    def __init__(
        self,
        name: str,
        log: EntryLog,
        *,
        persistent: bool,
        loop: asyncio.AbstractEventLoop,
        cursor_sink: CursorSink | None = None,
        cursors: dict[str, tuple[str, int, set[int]]] | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.persistent = persistent
        self.loop = loop
        self.producers: dict[int, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self._cursor_sink = cursor_sink
        # Permits come from FLOW only; acks free no permits in Pulsar's model.
        self.permits_freed_by_ack = False
        self.messages_in = 0
        self.bytes_in = 0
        self.rate_messages = 0.0  # msgRateIn, updated by the service once a second
        self.rate_bytes = 0.0
        self._trim_handle: asyncio.TimerHandle | None = None
        if hasattr(log, "on_readable"):
            log.on_readable = self._entries_readable
        for sub_name, (mode, mark_delete, acked) in (cursors or {}).items():
            sub = SUBSCRIPTION_CLASSES[mode](self, sub_name, mark_delete)
            sub.acked = set(acked)
            self.subscriptions[sub_name] = sub

    async def publish(self, payload: bytes, key: bytes, received_us: int, publish_ms: int) -> Entry:
        entry = await self.log.append(payload, key, received_us, publish_ms)
        self.messages_in += entry.num_messages
        self.bytes_in += len(payload)
        entry.notified_us = now_us()
        for sub in self.subscriptions.values():
            sub.on_new_entries()
        if not self.subscriptions and not self.persistent:
            self.log.trim_before(self.log.next_index)
        return entry

    def _entries_readable(self) -> None:
        """Entries read back from disk are cached: readers waiting on them try again."""
        for sub in self.subscriptions.values():
            sub.schedule_dispatch()

    def subscription(self, name: str, mode: str, initial_earliest: bool) -> Subscription:
        """The named subscription, created in `mode` when new.

        A subscription keeps the mode it was created with; a consumer asking for another mode
        is refused by the caller, as Pulsar refuses a mismatched subType.
        """
        sub = self.subscriptions.get(name)
        if sub is None:
            start = self.log.first_index - 1 if initial_earliest else self.log.next_index - 1
            sub = SUBSCRIPTION_CLASSES[mode](self, name, start)
            self.subscriptions[name] = sub
            self.cursor_moved(sub)
        return sub

    def remove_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is not None:
            sub.close()
            if self._cursor_sink is not None:
                self._cursor_sink.deleted(self, name)
            self._trim()

    def cursor_moved(self, sub: Subscription) -> None:
        if self._cursor_sink is not None and self.persistent:
            self._cursor_sink.moved(self, sub)
        # Trimming looks at every subscription: do it at most a few times a second, not per ack.
        if self._trim_handle is None:
            self._trim_handle = self.loop.call_later(TRIM_DELAY_S, self._trim)

    def _trim(self) -> None:
        """Entries every subscription is past go: from memory, or whole ledgers from disk."""
        self._trim_handle = None
        if self.subscriptions:
            low = min(s.slowest_mark_delete for s in self.subscriptions.values())
            self.log.trim_before(low + 1)

    def close(self) -> None:
        if self._trim_handle is not None:
            self._trim_handle.cancel()
        for sub in self.subscriptions.values():
            sub.close()
        self.log.close()
