"""A topic: its entry log, its producers and its subscriptions.

Storage is reached through the `CursorSink` Protocol defined here, where it is consumed, so the
topic never imports the storage that persists its cursors.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from broker.core.entry import Entry
from broker.core.entry_log import EntryLog, now_us
from broker.subscriptions.cursor import Cursor
from broker.subscriptions.subscription import Subscription

TRIM_DELAY_S = 0.2
NOTIFY_SLICE = 256
"""Subscriptions told of a new entry per turn of the event loop. The seed's Shared baseline has
a subscription per consumer: told all at once, 100,000 dispatches queued ahead of everything
else, and the producer's receipt (and every ACK and FLOW read meanwhile) waited behind them,
up to the client's 30 s send timeout. In slices, each turn also polls the sockets."""

SavedCursors = dict[str, tuple[str, int, set[int]]]
"""Subscription name → (mode, mark_delete, individually acked indexes), as storage loads them."""


class CursorSink(Protocol):
    """Where a persistent topic's cursor changes go (broker.storage.ledger_storage)."""

    def moved(self, topic: str, subscription: Subscription) -> None: ...

    def deleted(self, topic: str, subscription: str) -> None: ...


@dataclass(eq=False)
class Producer:
    producer_id: int
    name: str
    topic: Topic
    address: str = ""
    messages_in: int = 0
    bytes_in: int = 0
    pending: list[asyncio.Future[Entry]] = field(default_factory=list)
    """Publishes not yet answered, in SEND order (receipts leave in that order)."""


class Topic:
    def __init__(
        self,
        name: str,
        log: EntryLog,
        *,
        persistent: bool,
        loop: asyncio.AbstractEventLoop,
        cursor_sink: CursorSink | None = None,
        cursors: SavedCursors | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.persistent = persistent
        self.loop = loop
        self.producers: dict[int, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self._cursor_sink = cursor_sink
        self.messages_in = 0
        self.bytes_in = 0
        self.rate_messages = 0.0  # msgRateIn, updated by the service once a second
        self.rate_bytes = 0.0
        self._trim_handle: asyncio.TimerHandle | None = None
        if hasattr(log, "on_readable"):
            log.on_readable = self._entries_readable
        for sub_name, (mode, mark_delete, acked) in (cursors or {}).items():
            cursor = Cursor(mark_delete, acked)
            self.subscriptions[sub_name] = Subscription(self, sub_name, mode, cursor)

    async def publish(self, payload: bytes, key: bytes, received_us: int, publish_ms: int) -> Entry:
        entry = await self.log.append(payload, key, received_us, publish_ms)
        self.messages_in += entry.num_messages
        self.bytes_in += len(payload)
        entry.notified_us = now_us()
        subs = list(self.subscriptions.values())
        self._notify(subs, 0)
        if not self.subscriptions and not self.persistent:
            self.log.trim_before(self.log.next_index)
        return entry

    def _notify(self, subs: list[Subscription], start: int) -> None:
        """Tell subscriptions `start`.. of `subs` of new entries, NOTIFY_SLICE a turn."""
        end = start + NOTIFY_SLICE
        for sub in subs[start:end]:
            sub.on_new_entries()
        if end < len(subs):
            self.loop.call_soon(self._notify, subs, end)

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
            sub = Subscription(self, name, mode, Cursor(start))
            self.subscriptions[name] = sub
            self.cursor_moved(sub)
        return sub

    def remove_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is not None:
            sub.close()
            if self._cursor_sink is not None:
                self._cursor_sink.deleted(self.name, name)
            self._trim()

    def cursor_moved(self, subscription: Subscription) -> None:
        if self._cursor_sink is not None and self.persistent:
            self._cursor_sink.moved(self.name, subscription)
        # Trimming looks at every subscription: do it at most a few times a second, not per ack.
        if self._trim_handle is None:
            self._trim_handle = self.loop.call_later(TRIM_DELAY_S, self._trim)

    def _trim(self) -> None:
        """Entries every subscription is past go: from memory, or whole ledgers from disk."""
        self._trim_handle = None
        if self.subscriptions:
            low = min(s.mark_delete for s in self.subscriptions.values())
            self.log.trim_before(low + 1)

    def close(self) -> None:
        if self._trim_handle is not None:
            self._trim_handle.cancel()
        for sub in self.subscriptions.values():
            sub.close()
        self.log.close()
