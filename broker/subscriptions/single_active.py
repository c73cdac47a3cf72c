"""Exclusive and Failover: one consumer, the active one, receives everything, in order."""

from __future__ import annotations

from abc import abstractmethod

from broker.core.consumer import Consumer
from broker.subscriptions.base import READ_BATCH, Dispatcher, SubscriptionError
from pulsar_protocol import pulsar_api_pb2 as pb


class SingleActiveDispatcher(Dispatcher):
    """Everything goes to `active`; the modes differ in who may attach and who is active."""

    @property
    @abstractmethod
    def active(self) -> Consumer | None:
        """The consumer that receives everything now, if any."""

    def dispatch(self) -> None:
        consumer = self.active
        while consumer is not None and consumer.permits > 0 and consumer.wire.writable:
            entries, _ = self.next_entries(min(READ_BATCH, consumer.permits))
            if not entries:
                return
            self.send(consumer, entries)


class ExclusiveDispatcher(SingleActiveDispatcher):
    mode = "Exclusive"

    def add_consumer(self, consumer: Consumer) -> None:
        if self.consumers:
            raise SubscriptionError("already has a consumer", pb.ConsumerBusy)
        super().add_consumer(consumer)

    @property
    def active(self) -> Consumer | None:
        return self.consumers[0] if self.consumers else None


class FailoverDispatcher(SingleActiveDispatcher):
    """One active consumer (highest priority, then first by name); the next takes over on leave.

    On a switch the cursor rewinds to the first unacknowledged entry, as Pulsar does, so the
    new active consumer receives what the old one had not acknowledged.
    """

    mode = "Failover"
    _current: Consumer | None = None

    @property
    def active(self) -> Consumer | None:
        if not self.consumers:
            return None
        return min(self.consumers, key=lambda c: (c.priority, c.name))

    def on_consumers_changed(self) -> None:
        active = self.active
        if active is self._current:
            if active is not None:
                # A newcomer that is not active still learns who is.
                for c in self.consumers:
                    c.wire.send_active_consumer_change(c.consumer_id, c is active)
            return
        if self._current is not None and self._current in self.consumers:
            self._return_unacked(self._current)
        self._current = active
        self.cursor.rewind()
        for c in self.consumers:
            c.wire.send_active_consumer_change(c.consumer_id, c is active)
