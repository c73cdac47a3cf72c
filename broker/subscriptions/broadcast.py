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

from broker.core.consumer import Consumer, ConsumerWire
from broker.core.entry import Entry
from broker.core.entry_log import now_us
from broker.subscriptions.base import READ_BATCH, Dispatcher
from broker.subscriptions.cursor import Cursor
from pulsar_protocol.message_template import MessageTemplate

# Consumers served per slice before yielding to the event loop, so acks, flows and new
# subscribes are handled during a broadcast to tens of thousands.
SLICE = 512


class BroadcastDispatcher(Dispatcher):
    mode = "Broadcast"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cursors: dict[Consumer, Cursor] = {}
        """Each consumer's virtual cursor; `self.cursor` is the main one (the slowest)."""
        self._positions: dict[Consumer, int] = {}
        """Where each consumer sits in `self.consumers` (order does not matter here)."""
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
        self._positions[consumer] = len(self.consumers)
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        cursor = self._cursors.pop(consumer, None)
        if cursor is None:
            return
        # Swap with the last: 100,000 consumers leaving one by one must not cost the square.
        position = self._positions.pop(consumer)
        last = self.consumers.pop()
        if last is not consumer:
            self.consumers[position] = last
            self._positions[last] = position
        self._targets.discard(consumer)
        if cursor.mark_delete <= self.cursor.mark_delete:
            self._slowest_stale = True
        self._cursor_moved()

    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.wake(consumer)

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None:
        """Acks move only the consumer's virtual cursor, and the main one if it was slowest.

        What a consumer still owes is its cursor's state (between mark-delete and the read
        position, less the acked indexes), so there is nothing else to update per ack."""
        cursor = self._cursors.get(consumer)
        if cursor is None:
            return
        before = cursor.mark_delete
        if cumulative:
            for index in indexes:
                cursor.ack_cumulative(index)
        else:
            for index in indexes:
                cursor.ack(index)
        # Only a consumer that was the slowest can move the main cursor. The topic is told
        # once until the main cursor is next read (storage and trimming read it, and that
        # clears the flag): 10,000 consumers at one position each ack every entry.
        if (
            cursor.mark_delete != before
            and before <= self.cursor.mark_delete
            and not self._slowest_stale
        ):
            self._slowest_stale = True
            self._cursor_moved()

    def on_ack_run(self, consumers: list[Consumer], cumulative: bool, index: int) -> None:
        """`on_ack` for each of `consumers`, with the common case inline: a cumulative ack of
        the entry after a cursor's mark-delete, nothing acked or handed back above it (each
        consumer of a broadcast acknowledges each entry, 10,000 a second in harness-cost)."""
        if not cumulative:
            for consumer in consumers:
                self.on_ack(consumer, False, [index])
            return
        cursors = self._cursors
        slowest = self.cursor.mark_delete
        moved_slowest = False
        for consumer in consumers:
            cursor = cursors.get(consumer)
            if cursor is None:
                continue
            before = cursor.mark_delete
            if index <= before:
                continue
            if cursor.acked or cursor.redeliver or cursor.redelivery_counts:
                cursor.ack_cumulative(index)
            else:
                cursor.mark_delete = index  # what ack_cumulative does with nothing above it
            if before <= slowest:
                moved_slowest = True
        if moved_slowest and not self._slowest_stale:
            self._slowest_stale = True
            self._cursor_moved()

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None:
        # Rewind this consumer's virtual cursor only; the others are not affected.
        cursor = self._cursors.get(consumer)
        if cursor is None:
            return
        cursor.rewind(None if indexes is None else min(indexes, default=cursor.read_index))
        self.wake(consumer)

    def unacked_messages(self, consumer: Consumer) -> int:
        cursor = self._cursors.get(consumer)
        if cursor is None:
            return 0
        start, end = cursor.mark_delete + 1, cursor.read_index
        entries = self.log.read(start, end - start) if end > start else []
        # Entries no longer in memory count one message each (admin stats only).
        unread = end - start - len(entries)
        return unread + sum(e.num_messages for e in entries if not cursor.is_acked(e.index))

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
        """One slice of a round over the consumers; reschedules itself until the round ends.

        Each entry's frame head is built once per slice (message_template) and patched with
        each consumer's id; a connection's frames of the slice go out in one write, the
        payloads shared (`write_frames` → writelines). At 10,000 consumers this is 1.1 µs per
        delivery in Python, against 3.2 µs with a frame encoded and written per consumer
        (benchmarks/broker_core.py, docs/benchmarks.md)."""
        if not self._in_round:
            self._in_round = True
            self._round = list(self.consumers) if self._everyone else list(self._targets)
            self._everyone = False
            self._targets = set()
            self._round_pos = 0
            self._round_entries = {}
        tail = self.log.next_index
        start = self._round_pos
        end = min(start + SLICE, len(self._round))
        dispatch_us = now_us()
        templates: dict[tuple[int, bool, int], MessageTemplate] = {}
        # Per connection, frames grouped by entry: a reader then finds each entry's deliveries
        # to its consumers one after another (one parse per entry, drivers/pulsar), also when
        # consumers catch up on several entries; a consumer still gets its entries in order.
        out: dict[ConsumerWire, dict[int, list[bytes]]] = {}
        cursors = self._cursors
        cache = self._round_entries
        sent = 0
        for consumer in self._round[start:end]:
            cursor = cursors.get(consumer)
            if cursor is None:
                continue  # left during the round
            read = cursor.read_index
            permits = consumer.permits
            if read >= tail or permits <= 0:
                continue
            wire = consumer.wire
            if not wire.writable:
                continue
            entry = cache.get(read)
            if read + 1 == tail and entry is not None:
                # The common case, inline (consumer.frames_for, as a unit test checks): one
                # new entry, read for an earlier consumer of the slice.
                with_bem = wire.sends_broker_entry_metadata
                template = templates.get((read, with_bem, 0))
                if template is None:
                    template = templates[read, with_bem, 0] = entry.message_template(
                        dispatch_us if with_bem else None
                    )
                n = entry.num_messages
                sent += n
                consumer.permits = permits - n
                consumer.messages_out += n
                consumer.bytes_out += len(entry.payload)
                cursor.read_index = tail
                by_entry = out.get(wire)
                if by_entry is None:
                    by_entry = out[wire] = {}
                bucket = by_entry.get(read)
                if bucket is None:
                    by_entry[read] = [template.head(consumer.id_varint), entry.payload]
                else:
                    bucket += (template.head(consumer.id_varint), entry.payload)
                continue  # at the tail now: nothing left for a later round
            entries = self._entries_from(read, min(READ_BATCH, permits))
            if not entries:
                continue
            sent += sum(e.num_messages for e in entries)
            cursor.read_index = entries[-1].index + 1
            by_entry = out.get(wire)
            if by_entry is None:
                by_entry = out[wire] = {}
            frames = consumer.frames_for(entries, dispatch_us, None, templates)
            if len(entries) == 1:
                bucket = by_entry.get(entries[0].index)
                if bucket is None:
                    by_entry[entries[0].index] = frames
                else:
                    bucket += frames
            else:
                for i, e in enumerate(entries):
                    bucket = by_entry.get(e.index)
                    if bucket is None:
                        bucket = by_entry[e.index] = []
                    bucket += frames[2 * i : 2 * i + 2]
            if cursor.read_index < tail and consumer.permits > 0 and not self._everyone:
                self._targets.add(consumer)
        for wire, by_entry in out.items():
            if len(by_entry) == 1:
                (buffers,) = by_entry.values()
            else:
                buffers = [b for index in sorted(by_entry) for b in by_entry[index]]
            wire.write_frames(buffers)
        self.messages_out += sent
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
