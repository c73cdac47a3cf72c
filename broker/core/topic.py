"""A topic: its entry log, its producers and its subscriptions.

Storage is reached through the `CursorSink` Protocol defined here, where it is consumed, so the
topic never imports the storage that persists its cursors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from broker.core.entry import Entry
from broker.core.entry_log import EntryLog, now_us
from broker.core.producer_access import ProducerAccess
from broker.subscriptions.base import DispatchTurn
from broker.subscriptions.cursor import Cursor
from broker.subscriptions.subscription import Subscription

TRIM_DELAY_S = 0.2
NOTIFY_SLICE = 256
"""Subscriptions told of a new entry per turn of the event loop. The seed's Shared baseline has
a subscription per consumer: told all at once, 100,000 dispatches queued ahead of everything
else, and the producer's receipt (and every ACK and FLOW read meanwhile) waited behind them,
up to the client's 30 s send timeout. In slices, each turn also polls the sockets."""

SavedCursors = dict[str, tuple[str, int, set[int], dict[str, tuple[int, set[int]]]]]
"""Subscription name → (mode, mark_delete, individually acked indexes, the consumers' own
cursors by consumer name: Broadcast's virtual ones, (mark_delete, acked)), as storage loads
them."""


class CursorSink(Protocol):
    """Where a persistent topic's cursor changes go (broker.storage.ledger_storage)."""

    def moved(self, topic: str, subscription: Subscription) -> None: ...

    def deleted(self, topic: str, subscription: str) -> None: ...


class ProducerReader(Protocol):
    """A producer's connection as a publish gate sees it: its reading can be paused."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def is_closing(self) -> bool: ...


class PublishGate(Protocol):
    """Publish rate limits and backlog quotas (broker.policies.rate_limit), told of each SEND
    as it is handled, and asked before a producer is admitted."""

    def admit(self, messages: int, size: int, reader: ProducerReader) -> None: ...

    def refusal(self) -> tuple[int, str] | None:
        """(ServerError, message) refusing new producers now; None admits them."""
        ...


def _restored(mark_delete: int, acked: set[int], log_end: int) -> Cursor:
    """A saved cursor: whatever the log held may have been sent before the restart, so its
    consumers' acks of it are taken (Cursor.can_ack), not refused as never sent."""
    cursor = Cursor(mark_delete, acked)
    cursor.rewound_from = max(cursor.rewound_from, log_end)
    return cursor


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
    access_mode: int = 0
    """CommandProducer.producer_access_mode (broker.core.producer_access)."""
    epoch: int = 0
    """The client's reconnection count for this producer (CommandProducer.epoch)."""
    owner: object = None
    """The connection it came on: a producer returns on the same one with a higher epoch."""
    on_fenced: Callable[[], None] | None = field(default=None, repr=False)
    """How its connection closes it when another producer takes the topic."""

    def fenced(self) -> None:
        if self.on_fenced is not None:
            self.on_fenced()


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
        consumer_cursor_expiry_s: float = 0.0,
    ) -> None:
        self.name = name
        self.consumer_cursor_expiry_s = consumer_cursor_expiry_s
        """How long a departed consumer's own cursor is kept (Broadcast; the broker's
        broadcastCursorExpirationTimeSeconds)."""
        self.log = log
        self.persistent = persistent
        self.loop = loop
        self.producers: dict[int, Producer] = {}
        self.producer_access = ProducerAccess(self.producers)
        """Adds and removes `producers`: unique names, access modes."""
        self.subscriptions: dict[str, Subscription] = {}
        self._cursor_sink = cursor_sink
        self.messages_in = 0
        self.bytes_in = 0
        self.rate_messages = 0.0  # msgRateIn, updated by the service once a second
        self.rate_bytes = 0.0
        self.rate_base: tuple[int, int] | None = None
        """(messages_in, bytes_in) at the service's last measurement of the rates; None before
        it (as a subscription's `rate_base`)."""
        self.publish_gate: PublishGate | None = None
        """The topic's publish rate limit (topic policies); None when it has none."""
        self.publish_rate_limited_times = 0
        """Pulsar's publishRateLimitedTimes: how often a producer's connection was paused."""
        self.policy_events: dict[str, int] = {}
        """What other topic policies did to it (backlog quota holds and evictions), by name."""
        self.on_subscription_added: Callable[[Subscription], None] | None = None
        """Told of each subscription created after the topic opened (topic policies)."""
        self.on_delayed_message: Callable[[], None] | None = None
        """Told of a SEND with a deliver_at_time (topic policies: delayed delivery); once."""
        self.max_delivery_delay_ms = 0
        """Longest delay a SEND may ask for (delayed delivery's maxDeliveryDelayInMillis);
        0: any."""
        self._trim_handle: asyncio.TimerHandle | None = None
        if hasattr(log, "on_readable"):
            log.on_readable = self._entries_readable
        for sub_name, (mode, mark_delete, acked, own) in (cursors or {}).items():
            end = log.next_index
            cursor = _restored(mark_delete, acked, end)
            sub = self.subscriptions[sub_name] = Subscription(self, sub_name, mode, cursor)
            if own:
                sub.dispatcher.restore_consumer_cursors(own, end)

    async def publish(self, payload: bytes, key: bytes, received_us: int, publish_ms: int) -> Entry:
        entry = await self.log.append(payload, key, received_us, publish_ms)
        self.messages_in += entry.num_messages
        self.bytes_in += len(payload)
        entry.notified_us = now_us()
        subs = list(self.subscriptions.values())
        self.loop.call_soon(self._notify, subs, 0)  # each slice a callback of its own
        if not self.subscriptions and not self.persistent:
            self.log.trim_before(self.log.next_index)
        return entry

    def _notify(self, subs: list[Subscription], start: int) -> None:
        """Tell subscriptions `start`.. of `subs` of new entries, NOTIFY_SLICE a turn; those
        that dispatch at once share the turn's dispatch time and frame heads."""
        end = start + NOTIFY_SLICE
        turn = DispatchTurn(now_us())
        for sub in subs[start:end]:
            sub.on_new_entries(turn)
        if end < len(subs):
            self.loop.call_soon(self._notify, subs, end)

    def _entries_readable(self) -> None:
        """Entries read back from disk are cached: readers waiting on them try again."""
        for sub in self.subscriptions.values():
            sub.schedule_dispatch()

    def subscription(
        self,
        name: str,
        mode: str,
        initial_earliest: bool,
        *,
        start: int | None = None,
        durable: bool = True,
    ) -> Subscription:
        """The named subscription, created in `mode` when new, reading from `start` (an index,
        broker.core.positions) or else the initial position; a non-`durable` one (a Reader's)
        is never persisted and goes with its last consumer.

        A subscription keeps the mode it was created with; a consumer asking for another mode
        is refused by the caller, as Pulsar refuses a mismatched subType.
        """
        sub = self.subscriptions.get(name)
        if sub is None:
            if start is None:
                start = self.log.first_index if initial_earliest else self.log.next_index
            sub = Subscription(self, name, mode, Cursor(start - 1), durable)
            self.subscriptions[name] = sub
            self.cursor_moved(sub)
            if self.on_subscription_added is not None:
                self.on_subscription_added(sub)
        return sub

    def remove_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is not None:
            sub.close()
            if self._cursor_sink is not None and sub.durable:
                self._cursor_sink.deleted(self.name, name)
            self._trim()

    def cursor_moved(self, subscription: Subscription) -> None:
        if self._cursor_sink is not None and self.persistent and subscription.durable:
            self._cursor_sink.moved(self.name, subscription)
        # Trimming looks at every subscription: do it at most a few times a second, not per ack.
        if self._trim_handle is None:
            self._trim_handle = self.loop.call_later(TRIM_DELAY_S, self._trim)

    def _trim(self) -> None:
        self._trim_handle = None
        self.trim()

    def trim(self) -> None:
        """Entries every subscription is past go: from memory, or whole ledgers from disk
        (those the topic's retention does not keep, broker.storage.ledger_storage). Called
        after cursors move, and by the retention check as time lets ledgers go."""
        if self.subscriptions:
            low = min(s.mark_delete for s in self.subscriptions.values())
            self.log.trim_before(low + 1)

    def close(self) -> None:
        if self._trim_handle is not None:
            self._trim_handle.cancel()
        for sub in self.subscriptions.values():
            sub.close()
        self.log.close()
