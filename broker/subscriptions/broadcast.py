"""Broadcast (seed 000): one subscription, one dispatcher, every consumer gets every entry.

Each consumer holds only a virtual cursor (a Cursor, kept here, not on the consumer): the next
entry to send it and its own acknowledgement state. The subscription's cursor, the one
persisted and the one retention sees, is the slowest virtual cursor. Each entry is read once
per dispatch round and written to every consumer that has permits; a consumer without permits
simply falls behind, it never holds up the others, and the entries it still needs stay
readable from the log.
"""

from __future__ import annotations

from typing import Any

from broker.core.consumer import Consumer
from broker.core.entry import Entry
from broker.core.entry_log import now_us
from broker.subscriptions.base import READ_BATCH, Dispatcher
from broker.subscriptions.cursor import Cursor

# Consumers served per slice before yielding to the event loop, so acks, flows and new
# subscribes are handled during a broadcast to tens of thousands.
SLICE = 512


class BroadcastDispatcher(Dispatcher):
    mode = "Broadcast"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cursors: dict[Consumer, Cursor] = {}
        """Each consumer's virtual cursor; `self.cursor` is the main one (the slowest)."""
        self._in_round = False
        self._round: list[Consumer] = []
        self._round_pos = 0
        self._round_entries: dict[int, Entry] = {}
        # What the next round serves: everyone (new entries) or only the consumers that got
        # permits or room to write. A FLOW from one of 20,000 consumers must not cost a pass
        # over all of them, or a connect storm costs the square of the consumer count.
        self._everyone = False
        self._targets: set[Consumer] = set()
        self._slowest_stale = False

    # -- consumers and their virtual cursors -------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        # A newcomer starts where the subscription's (slowest) cursor stands.
        self._cursors[consumer] = Cursor(self.mark_delete)
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        cursor = self._cursors.pop(consumer, None)
        if cursor is None:
            return
        self.consumers.remove(consumer)
        self._targets.discard(consumer)
        if cursor.mark_delete <= self.cursor.mark_delete:
            self._slowest_stale = True
        self._cursor_moved()

    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.wake(consumer)

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None:
        """Acks move only the consumer's virtual cursor, and the main one if it was slowest."""
        cursor = self._cursors.get(consumer)
        if cursor is None:
            return
        before = cursor.mark_delete
        unacked = consumer.unacked
        for index in indexes:
            if cumulative:
                if cursor.ack_cumulative(index):
                    for i in [i for i in unacked if i <= index]:
                        del unacked[i]
            elif cursor.ack(index):
                unacked.pop(index, None)
        # Only a consumer that was the slowest can move the main cursor.
        if cursor.mark_delete != before and before <= self.cursor.mark_delete:
            self._slowest_stale = True
            self._cursor_moved()

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None:
        # Rewind this consumer's virtual cursor only; the others are not affected.
        cursor = self._cursors.get(consumer)
        if cursor is None:
            return
        rewind_to = min(consumer.unacked) if consumer.unacked else cursor.read_index
        if indexes is not None:
            rewind_to = min([rewind_to, *indexes])
        cursor.rewind(rewind_to)
        consumer.unacked.clear()
        self.wake(consumer)

    def seek(self, index: int) -> None:
        for cursor in self._cursors.values():
            cursor.seek(index)
        self._slowest_stale = True
        super().seek(index)

    @property
    def mark_delete(self) -> int:
        """The main cursor: the slowest virtual cursor, recomputed only when it may have moved."""
        if self._slowest_stale:
            self._slowest_stale = False
            if self._cursors:
                self.cursor.mark_delete = min(c.mark_delete for c in self._cursors.values())
        return self.cursor.mark_delete

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
            self._dispatch_handle = self.loop.call_soon(self._run_dispatch)

    def dispatch(self) -> None:
        """One slice of a round over the consumers; reschedules itself until the round ends."""
        if not self._in_round:
            self._in_round = True
            self._round = list(self.consumers) if self._everyone else list(self._targets)
            self._everyone = False
            self._targets = set()
            self._round_pos = 0
            self._round_entries = {}
        tail = self.log.next_index
        end = min(self._round_pos + SLICE, len(self._round))
        dispatch_us = now_us()
        bem_cache: dict[int, bytes] = {}
        cursors = self._cursors
        for consumer in self._round[self._round_pos : end]:
            cursor = cursors.get(consumer)
            if cursor is None:
                continue  # left during the round
            if cursor.read_index >= tail or consumer.permits <= 0 or not consumer.wire.writable:
                continue
            entries = self._entries_from(cursor.read_index, min(READ_BATCH, consumer.permits))
            if not entries:
                continue
            cursor.read_index = entries[-1].index + 1
            for e in entries:
                consumer.unacked[e.index] = e.num_messages
            consumer.wire.write_frames(consumer.frames_for(entries, dispatch_us, None, bem_cache))
            self.messages_out += sum(e.num_messages for e in entries)
            if cursor.read_index < tail and consumer.permits > 0 and not self._everyone:
                self._targets.add(consumer)
        self._round_pos = end
        if end < len(self._round):
            self._dispatch_handle = self.loop.call_soon(self._run_dispatch)
            return
        self._in_round = False
        self._round = []
        self._round_entries = {}
        if self._everyone or self._targets:
            self._schedule()

    def _entries_from(self, start: int, limit: int) -> list[Entry]:
        """Entries shared by the whole round: each entry is read from the log once per round."""
        cache = self._round_entries
        out: list[Entry] = []
        index = start
        while len(out) < limit:
            entry = cache.get(index)
            if entry is None:
                fetched = self.log.read(index, limit - len(out))
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
