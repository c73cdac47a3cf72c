"""What every subscription mode shares: a cursor, acknowledgements, redelivery, scheduling.

The cursor is `mark_delete` (every index at or below it is acknowledged) plus the set of
indexes acknowledged individually above it (seed 003's acknowledgement holes). Dispatch runs
as a scheduled callback, never inside the handler of a command: an ACK or FLOW arriving during
a long broadcast is handled between two slices of it, not after (seed 000's OrderedExecutor
finding).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker.core.consumer import Consumer
from broker.core.entry import Entry
from broker.core.entry_log import now_us

if TYPE_CHECKING:
    from broker.core.topic import Topic

# Entries read per dispatch round per consumer; Pulsar's dispatcherMaxReadBatchSize.
READ_BATCH = 100


class SubscriptionError(Exception):
    def __init__(self, message: str, server_error: int) -> None:
        super().__init__(message)
        self.server_error = server_error


class Subscription:
    mode = "Base"

    def __init__(self, topic: Topic, name: str, mark_delete: int = -1) -> None:
        self.topic = topic
        self.name = name
        self.consumers: list[Consumer] = []
        self.mark_delete = mark_delete
        self.acked: set[int] = set()
        self.read_index = mark_delete + 1
        self.redeliver: set[int] = set()
        self.redelivery_counts: dict[int, int] = {}
        self.messages_out = 0
        self.rate_messages = 0.0  # msgRateOut, updated by the service once a second
        self.rate_bytes = 0.0
        self._dispatch_handle: asyncio.Handle | None = None
        self.closed = False

    # -- consumers -------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        consumer.subscription = self
        self.consumers.append(consumer)
        self.on_consumers_changed()
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self._return_unacked(consumer)
        self.on_consumers_changed()
        self.schedule_dispatch()

    def on_consumers_changed(self) -> None:
        """Hook for modes whose routing depends on who is attached."""

    def _return_unacked(self, consumer: Consumer) -> None:
        for index in consumer.unacked:
            if index > self.mark_delete and index not in self.acked:
                self.redeliver.add(index)
                self.redelivery_counts[index] = self.redelivery_counts.get(index, 0) + 1
        consumer.unacked.clear()

    # -- flow and acknowledgement ----------------------------------------------------------
    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.schedule_dispatch()

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None:
        for index in indexes:
            if cumulative:
                self._ack_cumulative(consumer, index)
            else:
                self._ack_individual(consumer, index)
        self.after_ack()

    def _ack_cumulative(self, consumer: Consumer, index: int) -> None:
        if index > self.mark_delete:
            self.mark_delete = index
            self.acked = {i for i in self.acked if i > index}
            for c in self.consumers:
                for i in [i for i in c.unacked if i <= index]:
                    del c.unacked[i]
            self.redeliver = {i for i in self.redeliver if i > index}
        self._advance()

    def _ack_individual(self, consumer: Consumer, index: int) -> None:
        if index <= self.mark_delete:
            return
        self.acked.add(index)
        for c in self.consumers:
            c.unacked.pop(index, None)
        self.redeliver.discard(index)
        self._advance()

    def _advance(self) -> None:
        while self.mark_delete + 1 in self.acked:
            self.mark_delete += 1
            self.acked.discard(self.mark_delete)
            self.redelivery_counts.pop(self.mark_delete, None)

    def after_ack(self) -> None:
        self.topic.cursor_moved(self)
        if self.topic.permits_freed_by_ack:
            self.schedule_dispatch()

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: all of the consumer's, or the listed ones."""
        chosen = list(consumer.unacked) if indexes is None else indexes
        for index in chosen:
            if index in consumer.unacked:
                del consumer.unacked[index]
                self.redeliver.add(index)
                self.redelivery_counts[index] = self.redelivery_counts.get(index, 0) + 1
        self.schedule_dispatch()

    def seek(self, index: int) -> None:
        """Reset the cursor so that `index` is the next entry delivered."""
        self.mark_delete = index - 1
        self.read_index = index
        self.acked.clear()
        self.redeliver.clear()
        for c in self.consumers:
            c.unacked.clear()
        self.topic.cursor_moved(self)
        self.schedule_dispatch()

    # -- dispatch ------------------------------------------------------------------------------
    def on_new_entries(self) -> None:
        self.schedule_dispatch()

    def wake(self, consumer: Consumer) -> None:
        """`consumer` can take more (permits, or its socket drained); modes may target it."""
        self.schedule_dispatch()

    def schedule_dispatch(self) -> None:
        if self._dispatch_handle is None and not self.closed:
            self._dispatch_handle = self.topic.loop.call_soon(self._run_dispatch)

    def _run_dispatch(self) -> None:
        self._dispatch_handle = None
        if not self.closed:
            self.dispatch()

    def dispatch(self) -> None:
        """Send what the mode's routing allows now; every mode defines it."""
        raise NotImplementedError(f"{type(self).__name__} defines no dispatch")

    def next_entries(self, limit: int) -> tuple[list[Entry], bool]:
        """Entries to send next: redeliveries first (in order), then new ones.

        Returns (entries, redelivered) and advances read_index past new ones.
        """
        if self.redeliver:
            wanted = sorted(self.redeliver)[:limit]
            entries = []
            for i in wanted:
                found = self.topic.log.read(i, 1)
                if found and found[0].index == i:
                    entries.append(found[0])
                    self.redeliver.discard(i)
                elif i < self.topic.log.first_index:
                    self.redeliver.discard(i)  # gone with retention: nothing left to resend
            if entries:
                return entries, True
            if self.redeliver:
                return [], True
        while True:
            read = self.topic.log.read(self.read_index, limit)
            if not read:
                return [], False
            # Past what was read, acknowledged or not: entries acked individually (after a
            # rewind) are skipped, never read again and again.
            self.read_index = read[-1].index + 1
            entries = [e for e in read if e.index not in self.acked]
            if entries:
                return entries, False

    def send(self, consumer: Consumer, entries: list[Entry], track: bool = True) -> None:
        dispatch_us = now_us()
        counts = self.redelivery_counts if self.redelivery_counts else None
        frames = consumer.frames_for(entries, dispatch_us, counts)
        if track:
            for e in entries:
                consumer.unacked[e.index] = e.num_messages
        self.messages_out += sum(e.num_messages for e in entries)
        consumer.wire.write_frames(frames)

    # -- reporting -----------------------------------------------------------------------
    @property
    def slowest_mark_delete(self) -> int:
        """What retention and persistence see (for Broadcast: the slowest virtual cursor)."""
        return self.mark_delete

    def backlog(self) -> int:
        return max(0, self.topic.log.next_index - 1 - self.slowest_mark_delete - len(self.acked))

    def close(self) -> None:
        self.closed = True
        if self._dispatch_handle is not None:
            self._dispatch_handle.cancel()
            self._dispatch_handle = None
