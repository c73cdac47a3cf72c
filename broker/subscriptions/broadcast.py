"""Broadcast (seed 000): one subscription, one dispatcher, every consumer gets every entry.

Each consumer holds only a virtual cursor (a Cursor, kept here, not on the consumer): the next
entry to send it and its own acknowledgement state. The subscription's cursor, the one
persisted and the one retention sees, is the slowest virtual cursor. Each entry is read once
per dispatch round and written to every consumer that has permits; a consumer without permits
simply falls behind, it never holds up the others, and the entries it still needs stay
readable from the log.

A virtual cursor belongs to the consumer's name (the client's consumer name, kept across its
reconnects): a consumer that leaves keeps its cursor, and with it the retention of what it has
not acknowledged, for `departed_expiry_s` (broadcastConsumerCursorExpirationSeconds), then the
cursor expires (counted). A consumer coming back under that name resumes where it stood, after
a blip or a restart: storage saves the named cursors with the subscription's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.core.consumer import Consumer, ConsumerWire
from broker.core.entry import Entry
from broker.core.entry_log import now_us
from broker.subscriptions.base import READ_BATCH, Dispatcher, DispatchTurn
from broker.subscriptions.cursor import Cursor
from pulsar_protocol.message_template import MessageTemplate

# Consumers served per slice before yielding to the event loop, so acks, flows and new
# subscribes are handled during a broadcast to tens of thousands.
SLICE = 512
HOLE_SCAN = 10_000
"""Indexes after a consumer's mark-delete position the hole compensation looks at per pass."""


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
        self._owners: dict[str, Consumer] = {}
        """The connected consumer that owns each name's cursor (a second consumer under a name
        in use gets a cursor of its own, neither saved nor kept when it leaves)."""
        self._departed: dict[str, tuple[Cursor, float]] = {}
        """Cursors of named consumers that left, with when (loop time); oldest first."""
        self._unsaved = False
        """Some named cursor moved (or one came or went) since storage's last snapshot; the
        topic has been told, once."""
        self._expiry_handle: asyncio.TimerHandle | None = None
        self.expired_cursors = 0
        """Departed consumers' cursors dropped after departed_expiry_s."""

    # -- consumers and their virtual cursors -------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        # A newcomer starts where the subscription's (slowest) cursor stands; a consumer that
        # comes back takes its own cursor again, and is sent what it had not acknowledged.
        cursor = None
        if consumer.name not in self._owners:
            self._owners[consumer.name] = consumer
            self._unsaved = True  # saved at the next snapshot, whenever that comes
            held = self._departed.pop(consumer.name, None)
            if held is not None:
                cursor = held[0]
                cursor.rewind()
        self._cursors[consumer] = cursor if cursor is not None else Cursor(self.mark_delete)
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
        if self._owners.get(consumer.name) is consumer:
            del self._owners[consumer.name]
            if self.departed_expiry_s > 0:
                # Kept, and still counted in the main cursor: nothing moved. Also when the
                # broker is stopping (closed): the final save must keep it too.
                self._departed[consumer.name] = (cursor, self.loop.time())
                self._schedule_expiry()
                return
            self._unsaved = True
        if cursor.mark_delete <= self.cursor.mark_delete:
            self._slowest_stale = True
        self._cursor_moved()

    def _schedule_expiry(self) -> None:
        if self._expiry_handle is None and self._departed and not self.closed:
            _, since = next(iter(self._departed.values()))
            self._expiry_handle = self.loop.call_at(since + self.departed_expiry_s, self._expire)

    def _expire(self) -> None:
        """Drop the cursors of consumers gone longer than departed_expiry_s (oldest first)."""
        self._expiry_handle = None
        deadline = self.loop.time() - self.departed_expiry_s
        departed = self._departed
        expired = 0
        while departed:
            name, (_, since) = next(iter(departed.items()))
            if since > deadline:
                break
            del departed[name]
            expired += 1
        if expired:
            self.expired_cursors += expired
            self._slowest_stale = self._unsaved = True
            self._cursor_moved()
        self._schedule_expiry()

    def restore_consumer_cursors(self, cursors: dict[str, Cursor]) -> None:
        """Named cursors read back from storage: departed until their consumers come back, and
        expiring as if they had left now."""
        if self.departed_expiry_s <= 0:
            self._unsaved = True  # not kept: the next save leaves them out
            return
        now = self.loop.time()
        for name, cursor in cursors.items():
            self._departed[name] = (cursor, now)
        self._slowest_stale = True
        self._schedule_expiry()

    def consumer_cursors(self) -> list[tuple[int, list[tuple[int, int]], list[str]]] | None:
        """Every named cursor as (mark-delete, acked ranges, names) groups, consumers at one
        place in one group; None when none moved since the last call. Storage calls this once
        per persist interval: one pass over the named cursors then (0.2 µs each), nothing
        per ack."""
        if not self._unsaved:
            return None
        self._unsaved = False
        plain: dict[int, list[str]] = {}
        groups: list[tuple[int, list[tuple[int, int]], list[str]]] = []
        cursors = self._cursors
        named = [(name, cursors[consumer]) for name, consumer in self._owners.items()]
        named += [(name, cursor) for name, (cursor, _) in self._departed.items()]
        for name, cursor in named:
            if cursor.acked:
                groups.append((cursor.mark_delete, cursor.acked_ranges(), [name]))
            elif (names := plain.get(cursor.mark_delete)) is not None:
                names.append(name)
            else:
                plain[cursor.mark_delete] = [name]
        groups += [(mark, [], names) for mark, names in plain.items()]
        return groups

    def close(self) -> None:
        super().close()
        if self._expiry_handle is not None:
            self._expiry_handle.cancel()
            self._expiry_handle = None

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
        acked_before = len(cursor.acked)
        for index in indexes:
            if not cursor.can_ack(index):
                self.acks_refused += 1
            elif cumulative:
                cursor.ack_cumulative(index)
            else:
                cursor.ack(index)
        # Only a consumer that was the slowest can move the main cursor. The topic is told
        # once until the main cursor is next read (storage and trimming read it, and that
        # clears the flag): 10,000 consumers at one position each ack every entry. Storage
        # is told once until its next snapshot that some consumer's own cursor moved.
        tell = False
        if (
            cursor.mark_delete != before
            and before <= self.cursor.mark_delete
            and not self._slowest_stale
        ):
            self._slowest_stale = tell = True
        if not self._unsaved and (
            cursor.mark_delete != before or len(cursor.acked) != acked_before
        ):
            self._unsaved = tell = True
        if tell:
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
        moved_slowest = moved = False
        refused = 0
        for consumer in consumers:
            cursor = cursors.get(consumer)
            if cursor is None:
                continue
            before = cursor.mark_delete
            if index <= before:
                continue
            if index >= cursor.read_index and index >= cursor.rewound_from:  # not can_ack
                refused += 1
                continue
            if cursor.acked or cursor.redeliver or cursor.redelivery_counts:
                cursor.ack_cumulative(index)
            else:
                cursor.mark_delete = index  # what ack_cumulative does with nothing above it
            moved = True
            if before <= slowest:
                moved_slowest = True
        if refused:
            self.acks_refused += refused
        if moved_slowest and not self._slowest_stale:
            self._slowest_stale = True
            self._unsaved = True
            self._cursor_moved()
        elif moved and not self._unsaved:
            self._unsaved = True  # storage saves the consumers' own cursors too
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

    def skip_behind(self, index: int) -> int:
        """Move each virtual cursor behind `index` (connected or departed) to it, as if its
        consumer had acknowledged everything up to it: TTL expiry and backlog eviction take
        from the slowest consumers only, those at or past `index` are not touched. Also the
        main cursor, for a subscription with no consumer cursors. How many cursors moved."""
        moved = 0
        for cursor in [*self._cursors.values(), *(c for c, _ in self._departed.values())]:
            if cursor.ack_cumulative(index):
                moved += 1
                if cursor.read_index <= cursor.mark_delete:
                    cursor.read_index = cursor.mark_delete + 1
        if self.cursor.ack_cumulative(index) and self.cursor.read_index <= index:
            self.cursor.read_index = index + 1
        if moved:
            self._slowest_stale = self._unsaved = True
            self._cursor_moved()
            self.schedule_dispatch()
        return moved

    def consumer_hole_ranges(self) -> int:
        """Over connected and departed consumers' cursors: the holes are theirs, the
        subscription's cursor only follows the slowest. A cursor without individual acks is
        one attribute test (100,000 of them take a few ms, once per stats request)."""
        held = (cursor for cursor, _ in self._departed.values())
        return sum(
            len(cursor.acked_ranges())
            for cursor in (*self._cursors.values(), *held)
            if cursor.acked
        )

    def resend_holes(self, now_ms: int, min_age_ms: int, limit: int) -> int:
        """The acknowledgement-hole compensation (broker.policies.ack_holes) for Broadcast: to
        each connected consumer with holes (entries it was sent and never acknowledged, below
        one it acknowledged), those published, and last sent again, over `min_age_ms` ago are
        written again now, with their redelivery count, as far as its permits go. Nothing else
        is sent again and no cursor moves, so the dispatch path knows nothing of it. At most
        `limit` messages in all (and HOLE_SCAN indexes looked at per consumer); how many were
        sent."""
        sent = 0
        dispatch_us = now_us()
        oldest_ms = now_ms - min_age_ms
        for consumer, cursor in list(self._cursors.items()):
            if sent >= limit:
                break
            if not cursor.acked or consumer.permits <= 0 or not consumer.wire.writable:
                continue
            first = cursor.mark_delete + 1
            end = min(max(cursor.acked), cursor.read_index, first + HOLE_SCAN)
            room = min(consumer.permits, limit - sent)
            entries: list[Entry] = []
            for index in range(first, end):
                if len(entries) >= room:
                    break
                if index in cursor.acked:
                    continue
                found = self.log.read(index, 1)
                if (
                    found
                    and found[0].index == index
                    and cursor.hole_due(index, found[0].publish_time_ms, oldest_ms)
                ):
                    entries.append(found[0])
            if entries:
                cursor.holes_resent([e.index for e in entries], now_ms)
                counts = cursor.redelivery_counts
                for entry in entries:
                    counts[entry.index] = counts.get(entry.index, 0) + 1
                consumer.wire.write_frames(consumer.frames_for(entries, dispatch_us, counts))
                n = sum(e.num_messages for e in entries)
                self.messages_out += n
                sent += n
        return sent

    def seek(self, index: int) -> None:
        for cursor in self._cursors.values():
            cursor.seek(index)
        for cursor, _ in self._departed.values():
            cursor.seek(index)
        self._slowest_stale = True
        super().seek(index)

    @property
    def mark_delete(self) -> int:
        """The main cursor: the slowest virtual cursor, recomputed only when it may have moved."""
        if self._slowest_stale:
            self._slowest_stale = False
            marks = [c.mark_delete for c in self._cursors.values()]
            marks += [c.mark_delete for c, _ in self._departed.values()]
            if marks:
                self.cursor.mark_delete = min(marks)
        return self.cursor.mark_delete

    # -- dispatch ------------------------------------------------------------------------------
    def wake(self, consumer: Consumer) -> None:
        """Serve one consumer in the next round (it got permits, or its socket drained)."""
        if not self._everyone:
            self._targets.add(consumer)
        self._schedule()

    def on_new_entries(self, turn: DispatchTurn | None = None) -> None:
        """Served in rounds of its own (SLICE consumers a turn), never inside the topic's."""
        self.schedule_dispatch()

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
        newest = tail - 1
        start = self._round_pos
        end = min(start + SLICE, len(self._round))
        dispatch_us = now_us()
        templates: dict[tuple[int, bool, int], MessageTemplate] = {}
        newest_templates: list[MessageTemplate | None] = [None, None]  # by with_bem
        # The common case is a consumer at the tail, sent the newest entry: its frames go in
        # `at_tail`, per connection. Consumers catching up go in `behind`, per connection and
        # grouped by entry, and a connection with both gets them merged by entry: a reader
        # finds each entry's deliveries to its consumers one after another (one parse per
        # entry, drivers/pulsar), and a consumer gets its entries in order.
        at_tail: dict[ConsumerWire, list[bytes]] = {}
        behind: dict[ConsumerWire, dict[int, list[bytes]]] = {}
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
            if read == newest and (entry := cache.get(read)) is not None:
                # The common case, inline (consumer.frames_for, as a unit test checks): one
                # new entry, read for an earlier consumer of the slice.
                with_bem = wire.sends_broker_entry_metadata
                template = newest_templates[with_bem]
                if template is None:
                    template = templates.get((read, with_bem, 0))
                    if template is None:
                        template = templates[read, with_bem, 0] = entry.message_template(
                            dispatch_us if with_bem else None
                        )
                    newest_templates[with_bem] = template
                n = entry.num_messages
                sent += n
                consumer.permits = permits - n
                consumer.messages_out += n
                consumer.bytes_out += len(entry.payload)
                cursor.read_index = tail
                frames = at_tail.get(wire)
                if frames is None:
                    at_tail[wire] = [template.head(consumer.id_varint), entry.payload]
                else:
                    frames += (template.head(consumer.id_varint), entry.payload)
                continue  # at the tail now: nothing left for a later round
            entries = self._entries_from(read, min(READ_BATCH, permits))
            if not entries:
                continue
            sent += sum(e.num_messages for e in entries)
            cursor.read_index = entries[-1].index + 1
            by_entry = behind.get(wire)
            if by_entry is None:
                by_entry = behind[wire] = {}
            frames = consumer.frames_for(entries, dispatch_us, None, templates)
            for i, e in enumerate(entries):
                bucket = by_entry.get(e.index)
                if bucket is None:
                    by_entry[e.index] = frames[2 * i : 2 * i + 2]
                else:
                    bucket += frames[2 * i : 2 * i + 2]
            if cursor.read_index < tail and consumer.permits > 0 and not self._everyone:
                self._targets.add(consumer)
        for wire, by_entry in behind.items():
            frames = at_tail.pop(wire, None)
            if frames is not None:
                bucket = by_entry.get(newest)
                if bucket is None:
                    by_entry[newest] = frames
                else:
                    bucket += frames
            if len(by_entry) == 1:
                (buffers,) = by_entry.values()
            else:
                buffers = [b for index in sorted(by_entry) for b in by_entry[index]]
            wire.write_frames(buffers)
        for wire, frames in at_tail.items():
            wire.write_frames(frames)
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
