"""Shared: entries go round robin to consumers that have permits; acks are per message."""

from __future__ import annotations

from typing import Any

from broker.subscriptions.base import READ_BATCH, Dispatcher


class RoundRobinDispatcher(Dispatcher):
    mode = "Shared"
    __slots__ = ("_next",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._next = 0

    def dispatch(self) -> None:
        if len(self.consumers) == 1:
            # The seed's baseline: a subscription per consumer, so no turns to take; batches
            # up to its permits, as the loop below gives a lone consumer.
            (consumer,) = self.consumers
            while consumer.permits > 0 and consumer.wire.writable:
                entries, _ = self.next_entries(min(READ_BATCH, consumer.permits))
                if not entries:
                    return
                self.send(consumer, entries)
            return
        idle_rounds = 0
        while self.consumers and idle_rounds < len(self.consumers):
            consumer = self.consumers[self._next % len(self.consumers)]
            self._next += 1
            if consumer.permits <= 0 or not consumer.wire.writable:
                idle_rounds += 1
                continue
            # One entry per turn keeps the spread even across consumers; a lone consumer gets
            # a batch, never more entries than its permits (a slow consumer's FLOW of 1).
            limit = 1 if len(self.consumers) > 1 else min(READ_BATCH, consumer.permits)
            entries, _ = self.next_entries(limit)
            if not entries:
                return
            idle_rounds = 0
            self.send(consumer, entries)
