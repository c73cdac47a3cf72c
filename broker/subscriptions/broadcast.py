"""Broadcast (seed 000): one subscription, one dispatcher, every consumer gets every entry.

Each consumer holds only a virtual cursor: the next entry to send it and its own
acknowledgement state. The subscription's cursor, the one persisted and the one retention
sees, is the slowest virtual cursor. Each entry is read once per dispatch round and written to
every consumer that has permits; a consumer without permits simply falls behind, it never
holds up the others, and the entries it still needs stay readable from the log.
"""

from __future__ import annotations

from broker.core.consumer import Consumer
from broker.core.entry import Entry
from broker.core.entry_log import now_us
from broker.subscriptions.base import READ_BATCH, Subscription

# Consumers served per slice before yielding to the event loop, so acks, flows and new
# subscribes are handled during a broadcast to tens of thousands.
SLICE = 512


class BroadcastSubscription(Subscription):
    mode = "Broadcast"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._in_round = False
        self._round: list[Consumer] = []
        self._round_pos = 0
        self._round_entries: dict[int, Entry] = {}
        # What the next round serves: everyone (new entries) or only the consumers that got
        # permits or room to write. A FLOW from one of 20,000 consumers must not cost a pass
        # over all of them, or a connect storm costs the square of the consumer count.
        self._everyone = False
        self._targets: set[Consumer] = set()
        self._slowest = self.mark_delete
        self._slowest_stale = False

    # -- consumers and their virtual cursors -------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        # A newcomer starts where the subscription's (slowest) cursor stands.
        slowest = self.slowest_mark_delete
        consumer.read_index = slowest + 1
        consumer.mark_delete = slowest
        consumer.subscription = self
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            self._targets.discard(consumer)
            if consumer.mark_delete <= self._slowest:
                self._slowest_stale = True
            self.topic.cursor_moved(self)

    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.wake(consumer)

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None:
        before = consumer.mark_delete
        for index in indexes:
            if index <= consumer.mark_delete:
                continue
            if cumulative:
                consumer.mark_delete = index
                consumer.acked = {i for i in consumer.acked if i > index}
                for i in [i for i in consumer.unacked if i <= index]:
                    del consumer.unacked[i]
            else:
                consumer.acked.add(index)
                consumer.unacked.pop(index, None)
        while consumer.mark_delete + 1 in consumer.acked:
            consumer.mark_delete += 1
            consumer.acked.discard(consumer.mark_delete)
        if consumer.mark_delete != before:
            # Only a consumer that was the slowest can move the main cursor.
            if before <= self._slowest:
                self._slowest_stale = True
                self.topic.cursor_moved(self)

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None:
        # Rewind this consumer's virtual cursor only; the others are not affected.
        rewind_to = min(consumer.unacked) if consumer.unacked else consumer.read_index
        if indexes is not None:
            rewind_to = min([rewind_to, *indexes])
        consumer.read_index = max(consumer.mark_delete + 1, rewind_to)
        consumer.unacked.clear()
        self.wake(consumer)

    def seek(self, index: int) -> None:
        for c in self.consumers:
            c.read_index = index
            c.mark_delete = index - 1
            c.acked.clear()
            c.unacked.clear()
        self._slowest_stale = True
        super().seek(index)

    @property
    def slowest_mark_delete(self) -> int:
        """The main cursor: the slowest virtual cursor, recomputed only when it may have moved."""
        if self._slowest_stale:
            self._slowest_stale = False
            if self.consumers:
                self._slowest = min(c.mark_delete for c in self.consumers)
        return self._slowest

    def backlog(self) -> int:
        return max(0, self.topic.log.next_index - 1 - self.slowest_mark_delete)

    # -- dispatch ------------------------------------------------------------------------------
    def wake(self, consumer: Consumer) -> None:
        """Serve one consumer in the next round (it got permits, or its socket drained)."""
        if not self._everyone:
            self._targets.add(consumer)
        self._schedule()

    def schedule_dispatch(self) -> None:
        self._everyone = True
        self._targets.clear()
        self._schedule()

    def _schedule(self) -> None:
        if not self._in_round and self._dispatch_handle is None and not self.closed:
            self._dispatch_handle = self.topic.loop.call_soon(self._run_dispatch)

    def dispatch(self) -> None:
        """One slice of a round over the consumers; reschedules itself until the round ends."""
        if not self._in_round:
            self._in_round = True
            self._round = list(self.consumers) if self._everyone else list(self._targets)
            self._everyone = False
            self._targets = set()
            self._round_pos = 0
            self._round_entries = {}
        tail = self.topic.log.next_index
        end = min(self._round_pos + SLICE, len(self._round))
        dispatch_us = now_us()
        bem_cache: dict[int, bytes] = {}
        for consumer in self._round[self._round_pos : end]:
            if consumer.read_index >= tail or consumer.permits <= 0 or not consumer.wire.writable:
                continue
            if consumer.subscription is not self:
                continue  # left during the round
            entries = self._entries_from(consumer.read_index, min(READ_BATCH, consumer.permits))
            if not entries:
                continue
            consumer.read_index = entries[-1].index + 1
            for e in entries:
                consumer.unacked[e.index] = e.num_messages
            consumer.wire.write_frames(consumer.frames_for(entries, dispatch_us, None, bem_cache))
            self.messages_out += sum(e.num_messages for e in entries)
            if consumer.read_index < tail and consumer.permits > 0 and not self._everyone:
                self._targets.add(consumer)
        self._round_pos = end
        if end < len(self._round):
            self._dispatch_handle = self.topic.loop.call_soon(self._run_dispatch)
            return
        self._in_round = False
        self._round = []
        self._round_entries = {}
        if self._everyone or self._targets:
            self._schedule()

    def _entries_from(self, start: int, limit: int) -> list[Entry]:
        """Entries shared by the whole round: each entry is read from the log once per round."""
        cache = self._round_entries
        out = []
        index = start
        while len(out) < limit:
            entry = cache.get(index)
            if entry is None:
                fetched = self.topic.log.read(index, limit - len(out))
                if not fetched:
                    break
                for e in fetched:
                    cache[e.index] = e
                entry = cache.get(index)
                if entry is None:  # trimmed below the log's first entry: skip ahead
                    index = fetched[0].index
                    continue
            out.append(entry)
            index += 1
        return out
