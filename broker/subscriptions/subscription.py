"""A subscription: a named cursor on a topic plus the dispatcher of its mode.

This is what the rest of the broker holds: the topic keeps subscriptions by name, a consumer's
connection drives its subscription (broker.core.consumer.ConsumerSubscription), storage
persists `mark_delete` and `cursor`, admin reports on them. The topic is reached through the
`TopicPort` Protocol below, so this package never imports broker.core.topic.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from broker.core.consumer import Consumer
from broker.core.entry_log import EntryLog
from broker.subscriptions.base import Dispatcher, DispatchTurn, SubscriptionError
from broker.subscriptions.cursor import Cursor
from broker.subscriptions.modes import DISPATCHERS


class TopicPort(Protocol):
    """What a subscription needs of its topic (broker.core.topic.Topic implements it)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def log(self) -> EntryLog: ...

    @property
    def consumer_cursor_expiry_s(self) -> float: ...

    def cursor_moved(self, subscription: Subscription) -> None: ...

    def remove_subscription(self, name: str) -> None: ...


class Subscription:
    """Slotted, with nothing made before it is used: the Shared baseline keeps one per
    consumer (issue 40: 2 KiB a consumer)."""

    __slots__ = ("topic", "name", "cursor", "dispatcher", "durable", "rate_messages", "rate_base")

    def __init__(
        self, topic: TopicPort, name: str, mode: str, cursor: Cursor, durable: bool = True
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        """For Broadcast the main cursor: read its position through `mark_delete`."""
        self.durable = durable
        """False for a non-durable one (CommandSubscribe.durable, a Reader's): its cursor is
        never persisted, and it goes when its last consumer does (as Pulsar's non-durable
        cursors)."""
        # A bound method, the one object the callback costs (a partial of the topic's was 256
        # bytes: the partial, its args and keywords, the topic's bound method).
        self.dispatcher: Dispatcher = DISPATCHERS[mode](
            cursor,
            topic.log,
            topic.loop,
            self._cursor_moved,
            departed_expiry_s=topic.consumer_cursor_expiry_s,
        )
        self.rate_messages = 0.0
        """msgRateOut, updated by the service once a second (broker.server.service)."""
        self.rate_base: int | None = None
        """`messages_out` at the service's last measurement of the rate; None before it."""

    def _cursor_moved(self) -> None:
        self.topic.cursor_moved(self)

    @property
    def mode(self) -> str:
        return self.dispatcher.mode

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers

    @property
    def messages_out(self) -> int:
        return self.dispatcher.messages_out

    @property
    def acks_refused(self) -> int:
        return self.dispatcher.acks_refused

    @property
    def expired_cursors(self) -> int:
        """Departed consumers' own cursors dropped after their expiry (Broadcast)."""
        return getattr(self.dispatcher, "expired_cursors", 0)

    @property
    def departed_cursors(self) -> int:
        """Departed consumers' own cursors kept for them to come back to (Broadcast)."""
        return len(getattr(self.dispatcher, "_departed", ()))

    @property
    def mark_delete(self) -> int:
        """What retention and persistence see (for Broadcast: the slowest virtual cursor)."""
        return self.dispatcher.mark_delete

    def unacked_messages(self, consumer: Consumer) -> int:
        return self.dispatcher.unacked_messages(consumer)

    def backlog(self) -> int:
        mark_delete = self.mark_delete  # for Broadcast, brings the main cursor up to date
        return max(0, self.topic.log.next_index - 1 - mark_delete - len(self.cursor.acked))

    # -- what a consumer's commands do ------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        try:
            self.dispatcher.add_consumer(consumer)
        except SubscriptionError as exc:
            # Dispatchers do not know the name the client needs to read in the error.
            raise SubscriptionError(
                f"{self.mode} subscription {self.name!r} {exc}", exc.server_error
            ) from None
        consumer.subscription = self

    def remove_consumer(self, consumer: Consumer) -> None:
        self.dispatcher.remove_consumer(consumer)

    def on_flow(self, consumer: Consumer, permits: int) -> None:
        self.dispatcher.on_flow(consumer, permits)

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None:
        self.dispatcher.on_ack(consumer, cumulative, indexes)

    def on_ack_run(self, consumers: list[Consumer], cumulative: bool, index: int) -> None:
        self.dispatcher.on_ack_run(consumers, cumulative, index)

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None:
        self.dispatcher.on_redeliver(consumer, indexes)

    def wake(self, consumer: Consumer) -> None:
        self.dispatcher.wake(consumer)

    def seek(self, index: int) -> None:
        self.dispatcher.seek(index)

    # -- what the topic tells it ------------------------------------------------------------
    def on_new_entries(self, turn: DispatchTurn | None = None) -> None:
        self.dispatcher.on_new_entries(turn)

    def schedule_dispatch(self) -> None:
        self.dispatcher.schedule_dispatch()

    def close(self) -> None:
        self.dispatcher.close()
