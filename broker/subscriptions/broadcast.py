"""Broadcast (seed 000): one subscription, one dispatcher, every consumer gets every entry.

Each consumer holds only a virtual cursor, kept here, not on the consumer: the next entry to
send it and its own acknowledgement state. The subscription's cursor, the one persisted and
the one retention sees, is the slowest virtual cursor. Each entry is read once per dispatch
round and written to every consumer that has permits; a consumer without permits simply falls
behind, it never holds up the others, and the entries it still needs stay readable from the log.

A million virtual cursors are arrays, not objects (docs/benchmarks.md, issue 40): each
consumer has a slot (`Consumer.slot`, its index in `consumers`) in three arrays of int64, its
mark-delete, its next read and where its read stood before its last rewind (`Cursor`'s
`rewound_from`); that is all a cursor without acknowledgement holes is, and the slowest one or
a skip over them all is one pass in C (numpy over the arrays' buffers). The few cursors with
more (indexes acknowledged individually above the mark-delete, redelivery counts, the hole
compensation's times) keep those extras in a `Cursor` object beside their slot; the arrays stay
the truth for the three positions, and an object is loaded from them and stored back around
each rare operation (`_load`, `_keep`). A `Cursor` per consumer cost 420 bytes, a slot 25.

A virtual cursor belongs to the consumer's name (the client's consumer name, kept across its
reconnects): a consumer that leaves keeps its cursor, and with it the retention of what it has
not acknowledged, for `departed_expiry_s` (broadcastConsumerCursorExpirationSeconds), then the
cursor expires (counted). A consumer coming back under that name resumes where it stood, after
a blip or a restart: storage saves the named cursors with the subscription's. Departed cursors
are arrays too (by departure, oldest first), with their names in a dict.
"""

from __future__ import annotations

import asyncio
from array import array
from itertools import compress, groupby
from operator import attrgetter
from typing import Any, cast

import numpy as np

from broker.core.consumer import NO_UNACKED, Consumer, ConsumerWire
from broker.core.entry import Entry
from broker.core.entry_log import now_us
from broker.subscriptions.base import READ_BATCH, Dispatcher, DispatchTurn
from broker.subscriptions.cursor import Cursor
from pulsar_protocol.message_template import MessageTemplate

# Consumers served per slice before yielding to the event loop, so acks, flows and new
# subscribes are handled during a broadcast to tens of thousands.
SLICE = 512
"""A slice also runs on to the end of the connection it stops in (at most SLICE more), so that
each connection's frames of an entry leave in one write."""
HOLE_SCAN = 10_000
"""Indexes after a consumer's mark-delete position the hole compensation looks at per pass."""
GONE = 2**63 - 1
"""A departed slot whose cursor expired or came back: its mark-delete, above every other."""
START_REFRESH_S = 0.05
"""With MANY consumers, how stale the place a newcomer starts at may be (`_start_mark`)."""
MANY = 10_000
ACK_RANGE_FROM = 8
"""Runs of acks this long and longer are tried as a range of slots first (`_ack_range`)."""
FEW_PLACES = 16
"""Up to this many distinct mark-deletes, named cursors are grouped one C pass per place."""

Groups = list[tuple[int, list[tuple[int, int]], list[str]]]
KeptHeads = tuple[list[Consumer], int, tuple[int, int], list[bytes]]
"""A connection's group, its length and `MessageTemplate.prefix_key` then, and its heads."""


def _view(positions: array[int]) -> np.ndarray:
    """The array's buffer as int64, no copy; callers drop it before the array grows."""
    return np.frombuffer(positions, dtype=np.int64)


def _grouped(marks: np.ndarray, mask: np.ndarray, names: list[Any]) -> Groups:
    """(mark-delete, no ranges, names) for the selected slots, one group per mark-delete."""
    if not mask.any():
        return []
    places = np.unique(marks[mask])
    if len(places) <= FEW_PLACES:  # the common case: consumers ack each entry, few places
        return [
            (place, [], list(compress(names, (mask & (marks == place)).tobytes())))
            for place in places.tolist()
        ]
    slots = np.flatnonzero(mask)
    slots = slots[np.argsort(marks[slots], kind="stable")]
    ordered = marks[slots]
    cuts = cast(list[int], (np.flatnonzero(np.diff(ordered)) + 1).tolist())
    order = cast(list[int], slots.tolist())
    picked = [names[i] for i in order]
    starts, ends = [0, *cuts], [*cuts, len(picked)]
    return [(int(ordered[s]), [], picked[s:e]) for s, e in zip(starts, ends, strict=True)]


def _wire_then_slot(consumer: Consumer) -> int:
    """A round of targets' order: by connection, then by slot (as they joined, not in the
    set's order). One int: a tuple key made sorting 200,000 targets 4.5 times slower."""
    return id(consumer.wire) << 32 | consumer.slot


_WIRE = attrgetter("wire")
_ID_VARINT = attrgetter("id_varint")


class BroadcastDispatcher(Dispatcher):
    mode = "Broadcast"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each connected consumer's virtual cursor, by slot; `self.cursor` is the main one.
        self._marks = array("q")
        self._reads = array("q")
        self._rewound = array("q")
        self._names: list[str] = []
        """Each slot's consumer name (storage groups the named cursors by them)."""
        self._owns = bytearray()
        """1 where the slot's consumer owns its name's cursor (saved, kept when it leaves)."""
        self._holes: dict[Consumer, Cursor] = {}
        """The extras of the few cursors that have any (acked indexes above the mark-delete,
        redelivery counts): their positions are in the arrays all the same."""
        self._in_round = False
        self._round: list[tuple[ConsumerWire, Consumer | list[Consumer]]] = []
        """The round's connections and their consumers (`dispatch`), served in turn."""
        self._held: dict[ConsumerWire, None] = {}
        """The connections this round has served, their reads held until it ends."""
        self._round_pos = 0
        self._round_offset = 0
        """Where the next slice starts: a connection, and a consumer in it."""
        self._id_heads: dict[ConsumerWire, KeptHeads] = {}
        """Per connection, its consumers' heads up to their ids (`_id_heads_of`)."""
        self._by_wire: dict[ConsumerWire, Consumer | list[Consumer]] = {}
        """The consumers of each connection: a round serves them connection by connection
        (consumers join interleaved across connections in a storm; in join order, each of
        the round's slices wrote to every connection, 100 writes of an entry per connection).
        A connection's only consumer is kept as itself: a list each was 80 bytes of every
        consumer with a connection of its own."""
        self._left_in_groups = 0
        """Consumers gone from `consumers` still in their group (`_regroup` drops them)."""
        self._round_entries: dict[int, Entry] = {}
        # What the next round serves: everyone (new entries) or only the consumers that got
        # permits or room to write. A FLOW from one of 20,000 consumers must not cost a pass
        # over all of them, or a connect storm costs the square of the consumer count.
        self._everyone = False
        self._targets: set[Consumer] = set()
        self._slowest_stale = False
        self._start_checked = 0.0
        """When `_start_mark` last brought the main cursor up to date (loop time)."""
        self._owners: dict[str, Consumer] = {}
        """The connected consumer that owns each name's cursor (a second consumer under a name
        in use gets a cursor of its own, neither saved nor kept when it leaves)."""
        self._departed: dict[str, int] = {}
        """Named consumers that left: name → slot in the departed arrays; oldest first."""
        self._gone_marks = array("q")
        self._gone_reads = array("q")
        self._gone_rewound = array("q")
        self._gone_since = array("d")
        """When each left (loop time)."""
        self._gone_names: list[str | None] = []
        """Each departed slot's name, None once it expired or came back."""
        self._gone_holes: dict[str, Cursor] = {}
        self._unsaved = False
        """Some named cursor moved (or one came or went) since storage's last snapshot; the
        topic has been told, once."""
        self._expiry_handle: asyncio.TimerHandle | None = None
        self.expired_cursors = 0
        """Departed consumers' cursors dropped after departed_expiry_s."""

    # -- a cursor as an object, for the few operations that need one ---------------------------
    def _load(self, slot: int, extras: Cursor | None) -> Cursor:
        cursor = extras if extras is not None else Cursor()
        cursor.mark_delete = self._marks[slot]
        cursor.read_index = self._reads[slot]
        cursor.rewound_from = self._rewound[slot]
        return cursor

    def _keep(self, consumer: Consumer, slot: int, cursor: Cursor) -> None:
        self._marks[slot] = cursor.mark_delete
        self._reads[slot] = cursor.read_index
        self._rewound[slot] = cursor.rewound_from
        if cursor.acked or cursor.redeliver or cursor.redelivery_counts:
            self._holes[consumer] = cursor
        else:
            self._holes.pop(consumer, None)

    def cursor_of(self, consumer: Consumer) -> Cursor:
        """A connected consumer's virtual cursor as a `Cursor` (a copy of its positions; its
        extras shared): for tests and admin, not for the paths that run per delivery."""
        slot = consumer.slot
        if slot < 0:
            raise KeyError(f"consumer {consumer.name!r} is not on this subscription")
        holes = self._holes.get(consumer)
        return self._load(slot, None if holes is None else holes)

    # -- consumers and their virtual cursors -------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        # A newcomer starts where the subscription's (slowest) cursor stands; a consumer that
        # comes back takes its own cursor again, and is sent what it had not acknowledged.
        name = consumer.name
        owns = name not in self._owners
        extras = None
        back = owns and name in self._departed
        if back:
            i = self._departed.pop(name)
            mark, read = self._gone_marks[i], self._gone_reads[i]
            rewound = max(self._gone_rewound[i], read)  # Cursor.rewind: read again from mark
            read = mark + 1
            extras = self._gone_holes.pop(name, None)
            if extras is not None:
                extras.redeliver = None
            self._forget_departed(i)
            self._compact_departed()  # consumers coming back leave dead slots behind
        else:
            mark = self._start_mark()
            read = rewound = mark + 1
        if owns:
            self._owners[name] = consumer
            self._unsaved = True  # saved at the next snapshot, whenever that comes
        consumer.slot = len(self.consumers)
        consumer.unacked = NO_UNACKED  # its virtual cursor knows what it owes: never written
        self.consumers.append(consumer)
        self._group(consumer)
        self._marks.append(mark)
        self._reads.append(read)
        self._rewound.append(rewound)
        self._names.append(name)
        self._owns.append(owns)
        if extras is not None:
            self._holes[consumer] = extras

    def _start_mark(self) -> int:
        """Where a newcomer starts: the main cursor, the slowest virtual one. Bringing it up
        to date is a pass over every cursor (1 ms at a million), and in a subscribe storm
        while the consumers acknowledge an entry each ack run leaves it stale again: once per
        subscribe, that pass made the storm quadratic. With MANY consumers it is brought up
        to date at most every START_REFRESH_S; until then the main cursor as last computed,
        never ahead of the slowest (the slowest only moves forward), so a newcomer misses
        nothing, at most it is sent again an entry the others have all acknowledged."""
        if self._slowest_stale and len(self.consumers) >= MANY:
            now = self.loop.time()
            if now - self._start_checked < START_REFRESH_S:
                return self.cursor.mark_delete
            self._start_checked = now
        return self.mark_delete

    def remove_consumer(self, consumer: Consumer) -> None:
        slot = consumer.slot
        if slot < 0 or slot >= len(self.consumers) or self.consumers[slot] is not consumer:
            return
        consumer.slot = -1
        mark, read, rewound = self._marks[slot], self._reads[slot], self._rewound[slot]
        owned = self._owns[slot]
        extras = self._holes.pop(consumer, None)
        # Swap with the last: 100,000 consumers leaving one by one must not cost the square.
        last = self.consumers.pop()
        for positions in (self._marks, self._reads, self._rewound):
            value = positions.pop()
            if last is not consumer:
                positions[slot] = value
        name, own = self._names.pop(), self._owns.pop()
        if last is not consumer:
            self.consumers[slot] = last
            last.slot = slot
            self._names[slot] = name
            self._owns[slot] = own
        self._targets.discard(consumer)
        # Left in its connection's group (a round skips it: slot -1) until most of the groups
        # are such leftovers: removing it there is a search, and one connection may hold
        # tens of thousands of consumers, all leaving at once when it closes.
        self._left_in_groups += 1
        if self._left_in_groups > 1024 + len(self.consumers):
            self._regroup()
        if owned:
            del self._owners[consumer.name]
            if self.departed_expiry_s > 0:
                # Kept, and still counted in the main cursor: nothing moved. Also when the
                # broker is stopping (closed): the final save must keep it too.
                self._depart(consumer.name, mark, read, rewound, extras, self.loop.time())
                self._schedule_expiry()
                return
            self._unsaved = True
        if mark <= self.cursor.mark_delete:
            self._slowest_stale = True
        self._cursor_moved()

    def _regroup(self) -> None:
        self._left_in_groups = 0
        self._by_wire = {}
        self._id_heads = {}
        for consumer in self.consumers:
            self._group(consumer)

    def _group(self, consumer: Consumer) -> None:
        """Into its connection's group (`_by_wire`)."""
        by_wire, wire = self._by_wire, consumer.wire
        group = by_wire.get(wire)
        if group is None:
            by_wire[wire] = consumer
        elif type(group) is list:
            group.append(consumer)
        else:
            by_wire[wire] = [cast(Consumer, group), consumer]

    def _depart(
        self, name: str, mark: int, read: int, rewound: int, extras: Cursor | None, since: float
    ) -> None:
        self._departed[name] = len(self._gone_names)
        self._gone_marks.append(mark)
        self._gone_reads.append(read)
        self._gone_rewound.append(rewound)
        self._gone_since.append(since)
        self._gone_names.append(name)
        if extras is not None:
            self._gone_holes[name] = extras

    def _forget_departed(self, i: int) -> None:
        """Departed slot `i` expired or came back (its name already out of `_departed`)."""
        name = self._gone_names[i]
        if name is not None:
            self._gone_holes.pop(name, None)
        self._gone_marks[i] = GONE
        self._gone_names[i] = None
        if not self._departed:
            for positions in (self._gone_marks, self._gone_reads, self._gone_rewound):
                del positions[:]
            del self._gone_since[:]
            self._gone_names = []

    def _compact_departed(self) -> None:
        """Rewrite the departed arrays without their dead slots, once most are dead."""
        if len(self._gone_names) < 1024 or len(self._gone_names) < 2 * len(self._departed):
            return
        olds = list(self._departed.values())
        for positions in (self._gone_marks, self._gone_reads, self._gone_rewound):
            positions[:] = array("q", [positions[i] for i in olds])
        self._gone_since = array("d", [self._gone_since[i] for i in olds])
        names = list(self._departed)
        self._departed = {name: i for i, name in enumerate(names)}
        self._gone_names = list(names)

    def _schedule_expiry(self) -> None:
        if self._expiry_handle is None and self._departed and not self.closed:
            since = self._gone_since[next(iter(self._departed.values()))]
            self._expiry_handle = self.loop.call_at(since + self.departed_expiry_s, self._expire)

    def _expire(self) -> None:
        """Drop the cursors of consumers gone longer than departed_expiry_s (oldest first)."""
        self._expiry_handle = None
        deadline = self.loop.time() - self.departed_expiry_s
        since = self._gone_since
        expired: list[tuple[str, int]] = []
        for name, i in self._departed.items():  # one pass: the oldest are first
            if since[i] > deadline:
                break
            expired.append((name, i))
        for name, i in expired:
            del self._departed[name]
            self._forget_departed(i)
        if expired:
            self.expired_cursors += len(expired)
            self._slowest_stale = self._unsaved = True
            self._cursor_moved()
        self._compact_departed()
        self._schedule_expiry()

    def restore_consumer_cursors(self, cursors: dict[str, tuple[int, set[int]]], end: int) -> None:
        """Named cursors read back from storage, as (mark-delete, acked indexes) by name:
        departed until their consumers come back, and expiring as if they had left now.
        Whatever the log held (up to `end`) may have been sent before the restart, so their
        acks of it are taken, not refused as never sent (`Cursor.can_ack`)."""
        if self.departed_expiry_s <= 0:
            self._unsaved = True  # not kept: the next save leaves them out
            return
        now = self.loop.time()
        for name, (mark, acked) in cursors.items():
            extras = None
            if acked:
                extras = Cursor(mark, acked)
                mark = extras.mark_delete
                rewound = max(extras.rewound_from, end)
                if not extras.acked:
                    extras = None
            else:
                rewound = max(mark + 1, end)
            self._depart(name, mark, mark + 1, rewound, extras, now)
        self._slowest_stale = True
        self._schedule_expiry()

    def consumer_cursors(self) -> Groups | None:
        """Every named cursor as (mark-delete, acked ranges, names) groups, consumers at one
        place in one group; None when none moved since the last call. Storage calls this once
        per persist interval: a few passes in C over the arrays then (a place is one
        comparison over them, and one `compress` of the names), nothing per ack."""
        if not self._unsaved:
            return None
        self._unsaved = False
        groups: Groups = []
        owned = np.frombuffer(self._owns, dtype=np.uint8).astype(bool)
        for consumer, extras in self._holes.items():
            if owned[consumer.slot]:
                owned[consumer.slot] = False
                cursor = self._load(consumer.slot, extras)
                groups.append((cursor.mark_delete, cursor.acked_ranges(), [consumer.name]))
        marks = _view(self._marks)
        groups += _grouped(marks, owned, self._names)
        del marks
        if self._departed:
            gone = _view(self._gone_marks)
            live = gone != GONE
            for name, extras in self._gone_holes.items():
                i = self._departed[name]
                live[i] = False
                extras.mark_delete = self._gone_marks[i]
                groups.append((extras.mark_delete, extras.acked_ranges(), [name]))
            groups += _grouped(gone, live, self._gone_names)
            del gone
        return groups

    def _release_held(self) -> None:
        """What the round's connections sent is handled, a connection a callback: a million
        consumers' ACKs of one entry are 0.6-0.8 s of the broker's time."""
        if self._held:
            call_soon = self.loop.call_soon
            for wire in self._held:
                call_soon(wire.release_reads)
            self._held = {}

    def close(self) -> None:
        super().close()
        self._release_held()
        if self._expiry_handle is not None:
            self._expiry_handle.cancel()
            self._expiry_handle = None

    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.wake(consumer)

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None:
        """Acks move only the consumer's virtual cursor, and the main one if it was slowest.

        What a consumer still owes is its cursor's state (between mark-delete and the read
        position, less the acked indexes), so there is nothing else to update per ack. A plain
        cursor moves in its array; the first ack that leaves a hole below it gives it an
        object for its extras."""
        slot = consumer.slot
        if slot < 0:
            return
        marks = self._marks
        before = marks[slot]
        extras = self._holes.get(consumer)
        holes_changed = False
        if extras is None:
            read, rewound = self._reads[slot], self._rewound[slot]
            mark = before
            for k, index in enumerate(indexes):
                if index >= read and index >= rewound:  # not Cursor.can_ack
                    self.acks_refused += 1
                elif index <= mark:
                    pass
                elif cumulative or index == mark + 1:
                    mark = index
                else:  # a hole below it: the rest on an object
                    marks[slot] = mark
                    cursor = self._load(slot, None)
                    self._ack_each(cursor, cumulative, indexes[k:])
                    self._keep(consumer, slot, cursor)
                    holes_changed = True
                    break
            else:
                marks[slot] = mark
        else:
            cursor = self._load(slot, extras)
            acked_before = len(cursor.acked)
            self._ack_each(cursor, cumulative, indexes)
            holes_changed = len(cursor.acked) != acked_before
            self._keep(consumer, slot, cursor)
        after = marks[slot]
        # Only a consumer that was the slowest can move the main cursor. The topic is told
        # once until the main cursor is next read (storage and trimming read it, and that
        # clears the flag): 10,000 consumers at one position each ack every entry. Storage
        # is told once until its next snapshot that some consumer's own cursor moved.
        tell = False
        if after != before and before <= self.cursor.mark_delete and not self._slowest_stale:
            self._slowest_stale = tell = True
        if not self._unsaved and (after != before or holes_changed):
            self._unsaved = tell = True
        if tell:
            self._cursor_moved()

    def _ack_each(self, cursor: Cursor, cumulative: bool, indexes: list[int]) -> None:
        for index in indexes:
            if not cursor.can_ack(index):
                self.acks_refused += 1
            elif cumulative:
                cursor.ack_cumulative(index)
            else:
                cursor.ack(index)

    def on_ack_run(self, consumers: list[Consumer], cumulative: bool, index: int) -> None:
        """`on_ack` for each of `consumers`, with the common case inline: a cumulative ack of
        the entry after a cursor's mark-delete, nothing acked above it (each consumer of a
        broadcast acknowledges each entry, 10,000 a second in harness-cost)."""
        if not cumulative:
            for consumer in consumers:
                self.on_ack(consumer, False, [index])
            return
        if (
            len(consumers) >= ACK_RANGE_FROM
            and not self._holes
            and self._ack_range(consumers, index)
        ):
            return
        marks, reads, rewound, holes = self._marks, self._reads, self._rewound, self._holes
        slowest = self.cursor.mark_delete
        moved_slowest = moved = False
        refused = 0
        for consumer in consumers:
            slot = consumer.slot
            if slot < 0:
                continue
            before = marks[slot]
            if index <= before:
                continue
            if index >= reads[slot] and index >= rewound[slot]:  # not Cursor.can_ack
                refused += 1
                continue
            if holes and consumer in holes:
                cursor = self._load(slot, holes[consumer])
                cursor.ack_cumulative(index)
                self._keep(consumer, slot, cursor)
            else:
                marks[slot] = index  # what ack_cumulative does with nothing above it
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

    def _ack_range(self, consumers: list[Consumer], index: int) -> bool:
        """`on_ack_run`'s loop in a few C calls when `consumers` hold consecutive slots in
        order (a connection's consumers subscribe in one run, so they get them) and every one
        of them takes the ack: each was sent `index` and had not acknowledged it (no cursor
        with extras: the caller checks). False, and nothing done, otherwise: the loop decides.
        The loop took 0.15-0.35 us an ack at 100 consumers a run."""
        lo = consumers[0].slot
        hi = lo + len(consumers)
        if lo < 0 or self.consumers[lo:hi] != consumers:  # identity, element by element, in C
            return False
        marks = self._marks
        before = marks[lo:hi]
        if before == array("q", (index - 1,)) * len(consumers):  # in C, no int per slot
            low = index - 1  # the common case: each had acknowledged the entry before
        elif max(before) >= index:
            return False
        else:
            low = min(before)
        reads = self._reads[lo:hi]  # each was sent `index`: most often read up to it exactly
        if reads != array("q", (index + 1,)) * len(consumers) and min(reads) <= index:
            return False
        marks[lo:hi] = array("q", (index,)) * len(consumers)
        if low <= self.cursor.mark_delete and not self._slowest_stale:
            self._slowest_stale = True
            self._unsaved = True
            self._cursor_moved()
        elif not self._unsaved:
            self._unsaved = True  # storage saves the consumers' own cursors too
            self._cursor_moved()
        return True

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None:
        # Rewind this consumer's virtual cursor only (Cursor.rewind); the others are not affected.
        slot = consumer.slot
        if slot < 0:
            return
        first, read = self._marks[slot] + 1, self._reads[slot]
        to = None if indexes is None else min(indexes, default=read)
        self._rewound[slot] = max(self._rewound[slot], read)
        self._reads[slot] = first if to is None else max(first, to)
        extras = self._holes.get(consumer)
        if extras is not None:
            extras.redeliver = None
        self.wake(consumer)

    def unacked_messages(self, consumer: Consumer) -> int:
        slot = consumer.slot
        if slot < 0:
            return 0
        start, end = self._marks[slot] + 1, self._reads[slot]
        entries = self.log.read(start, end - start) if end > start else []
        # Entries no longer in memory count one message each (admin stats only).
        unread = end - start - len(entries)
        extras = self._holes.get(consumer)
        acked = extras.acked if extras is not None else ()
        return unread + sum(e.num_messages for e in entries if e.index not in acked)

    def skip_behind(self, index: int) -> int:
        """Move each virtual cursor behind `index` (connected or departed) to it, as if its
        consumer had acknowledged everything up to it: TTL expiry and backlog eviction take
        from the slowest consumers only, those at or past `index` are not touched. Also the
        main cursor, for a subscription with no consumer cursors. How many cursors moved."""
        moved = 0
        for consumer, extras in list(self._holes.items()):
            cursor = self._load(consumer.slot, extras)
            if cursor.ack_cumulative(index):
                moved += 1
                if cursor.read_index <= cursor.mark_delete:
                    cursor.read_index = cursor.mark_delete + 1
            self._keep(consumer, consumer.slot, cursor)
        for name, extras in list(self._gone_holes.items()):
            i = self._departed[name]
            extras.mark_delete = self._gone_marks[i]
            if extras.ack_cumulative(index):
                moved += 1
                self._gone_marks[i] = extras.mark_delete
                self._gone_reads[i] = max(self._gone_reads[i], extras.mark_delete + 1)
            if not (extras.acked or extras.redeliver or extras.redelivery_counts):
                del self._gone_holes[name]
        for marks, reads in ((self._marks, self._reads), (self._gone_marks, self._gone_reads)):
            m, r = _view(marks), _view(reads)
            behind = m < index  # departed slots gone are GONE: never behind
            moved += int(np.count_nonzero(behind))
            m[behind] = index
            r[behind] = np.maximum(r[behind], index + 1)
            del m, r
        if self.cursor.ack_cumulative(index) and self.cursor.read_index <= index:
            self.cursor.read_index = index + 1
        if moved:
            self._slowest_stale = self._unsaved = True
            self._cursor_moved()
            self.schedule_dispatch()
        return moved

    def consumer_hole_ranges(self) -> int:
        """Over connected and departed consumers' cursors: the holes are theirs, the
        subscription's cursor only follows the slowest. Only the few cursors with extras
        can have any."""
        cursors = [*self._holes.values(), *self._gone_holes.values()]
        return sum(len(cursor.acked_ranges()) for cursor in cursors if cursor.acked)

    def cursor_summary(self) -> dict[str, int] | None:
        if not self.consumers:
            return None
        marks, reads = _view(self._marks), _view(self._reads)
        summary = {
            "markDeleteMin": int(marks.min()),
            "markDeleteMax": int(marks.max()),
            "behindTail": int(np.count_nonzero(reads < self.log.next_index)),
            "withHoles": len(self._holes),
        }
        del marks, reads
        return summary

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
        for consumer, extras in list(self._holes.items()):
            if sent >= limit:
                break
            if not extras.acked or consumer.permits <= 0 or not consumer.wire.writable:
                continue
            cursor = self._load(consumer.slot, extras)
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
                for entry in entries:
                    cursor.count_redelivery(entry.index)
                frames = consumer.frames_for(entries, dispatch_us, cursor.redelivery_counts)
                consumer.wire.write_frames(frames)
                n = sum(e.num_messages for e in entries)
                self.messages_out += n
                sent += n
        return sent

    def seek(self, index: int) -> None:
        for consumer, extras in list(self._holes.items()):
            cursor = self._load(consumer.slot, extras)
            cursor.seek(index)
            self._keep(consumer, consumer.slot, cursor)
        for extras in self._gone_holes.values():
            extras.seek(index)  # their positions are set below
        # Cursor.seek over the arrays: read again from `index`, everything before it acked.
        for marks, reads, rewound in (
            (self._marks, self._reads, self._rewound),
            (self._gone_marks, self._gone_reads, self._gone_rewound),
        ):
            m, r, w = _view(marks), _view(reads), _view(rewound)
            live = m != GONE
            np.maximum(w, r, out=w)
            m[live] = index - 1
            r[live] = index
            del m, r, w
        self._slowest_stale = True
        super().seek(index)

    @property
    def mark_delete(self) -> int:
        """The main cursor: the slowest virtual cursor, recomputed only when it may have moved
        (one pass in C over the arrays: 1 ms at a million)."""
        if self._slowest_stale:
            self._slowest_stale = False
            lows = [int(_view(self._marks).min())] if self._marks else []
            if self._departed:
                lows.append(int(_view(self._gone_marks).min()))
            if lows:
                self.cursor.mark_delete = min(lows)
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

        A round is served connection by connection (`_round`: each connection's consumers).
        A connection whose consumers are all at the tail with permits, in consecutive slots
        (the steady state of a broadcast: they subscribed in one run), is served whole
        (`_serve_at_tail`): its checks and the read positions in a few C calls over the
        arrays, its frames from the heads kept up to their ids (`_id_heads`), so per delivery
        what is left in Python is its three counters and one concatenation. Any other
        connection is served consumer by consumer (`_serve_each`). Each entry's frame head is
        built once per slice (message_template); a connection's frames of the slice go out in
        one write, the payloads shared (`write_frames` → writelines)."""
        if not self._in_round:
            self._in_round = True
            if self._everyone:
                self._round = list(self._by_wire.items())
            else:
                targets = sorted(self._targets, key=_wire_then_slot)
                self._round = [(wire, list(group)) for wire, group in groupby(targets, _WIRE)]
            self._everyone = False
            self._targets = set()
            self._round_pos = self._round_offset = 0
            self._round_entries = {}
        tail = self.log.next_index
        newest = tail - 1
        units, pos, offset = self._round, self._round_pos, self._round_offset
        # SLICE consumers, and on to the end of the connection it stops in (at most SLICE
        # more), so that each connection's frames of an entry leave in one write.
        parts: list[tuple[ConsumerWire, list[Consumer], bool]] = []
        taken = 0
        while taken < SLICE and pos < len(units):
            wire, group = units[pos]
            if type(group) is not list:
                parts.append((wire, [cast(Consumer, group)], False))
                taken += 1
                pos += 1
                continue
            take = min(len(group) - offset, 2 * SLICE - taken)
            whole = offset == 0 and take == len(group)
            parts.append((wire, group if whole else group[offset : offset + take], whole))
            taken += take
            offset += take
            if offset >= len(group):
                pos += 1
                offset = 0
        dispatch_us = now_us()
        templates: dict[tuple[int, bool, int], MessageTemplate] = {}
        # A connection with consumers at the tail, sent the newest entry, gets its frames of
        # it made in one go after the loop: the whole ones from their kept heads (`whole`),
        # the others from their ids (`at_tail`). Consumers catching up go in `behind`, per
        # connection and grouped by entry, and a connection with both gets them merged by
        # entry: a reader finds each entry's deliveries to its consumers one after another
        # (one parse per entry, drivers/pulsar), and a consumer gets its entries in order.
        whole_at_tail: list[tuple[ConsumerWire, list[Consumer]]] = []
        at_tail: dict[ConsumerWire, list[bytes]] = {}
        behind: dict[ConsumerWire, dict[int, list[bytes]]] = {}
        sent = 0
        for wire, members, whole in parts:
            if whole and len(members) > 1 and (n := self._serve_at_tail(members, newest)):
                sent += n
                whole_at_tail.append((wire, members))
            else:
                sent += self._serve_each(members, tail, dispatch_us, templates, at_tail, behind)
        buffers: list[bytes]
        if whole_at_tail or at_tail:
            entry = self._round_entries[newest]
            for wire, members in whole_at_tail:
                template = self._template(templates, entry, wire, dispatch_us)
                buffers = template.frames_from_id_heads(
                    self._id_heads_of(wire, members, template), entry.payload
                )
                wire.write_frames(buffers)
            for wire, ids in at_tail.items():
                template = self._template(templates, entry, wire, dispatch_us)
                at_tail[wire] = template.frames(ids, entry.payload)
        for wire, by_entry in behind.items():
            newest_frames = at_tail.pop(wire, None)
            if newest_frames is not None:
                bucket = by_entry.get(newest)
                if bucket is None:
                    by_entry[newest] = newest_frames
                else:
                    bucket += newest_frames
            if len(by_entry) == 1:
                (buffers,) = by_entry.values()
            else:
                buffers = [b for index in sorted(by_entry) for b in by_entry[index]]
            wire.write_frames(buffers)
        for wire, frames in at_tail.items():
            wire.write_frames(frames)
        self.messages_out += sent
        self._round_pos, self._round_offset = pos, offset
        if pos < len(units):
            if self.policy is None:  # a throttled round may wait a window: nothing held
                held = self._held
                for wire, _, _ in parts:
                    if wire not in held:
                        held[wire] = None
                        wire.hold_reads()
            self._dispatch_handle = self.loop.call_soon(self._run_dispatch)
            return
        self._release_held()
        self._in_round = False
        self._round = []
        self._round_entries = {}
        if self._everyone or self._targets:
            self._schedule()

    def _serve_at_tail(self, group: list[Consumer], newest: int) -> int:
        """Send the newest entry to every consumer of `group` (one connection's, all of it) if
        they are all at the tail (their next read is `newest`), with permits, in consecutive
        slots in order, and the connection writable: then their counters and read positions
        are moved and the messages sent returned; else 0 and nothing done (the caller serves
        them one by one). What `_serve_each` does for each of them, as a unit test checks."""
        lo = group[0].slot
        k = len(group)
        hi = lo + k
        reads = self._reads
        if (
            lo < 0
            or reads[lo:hi].count(newest) != k  # in C; hi past the end counts fewer
            or self.consumers[lo:hi] != group  # identity, element by element, in C
            or not group[0].wire.writable
        ):
            return 0
        entry = self._round_entries.get(newest)
        if entry is None:
            found = self._entries_from(newest, 1)
            if not found or found[0].index != newest:
                return 0
            entry = found[0]
        n, size = entry.num_messages, len(entry.payload)
        # Charged as the permits are checked, in one loop (0.1-0.2 us a consumer; a `min` of
        # the permits first was 0.08 more), and taken back if one has none left (rare).
        for i, consumer in enumerate(group):
            permits = consumer.permits
            if permits <= 0:
                for charged in group[:i]:
                    charged.permits += n
                    charged.messages_out -= n
                    charged.bytes_out -= size
                return 0
            consumer.permits = permits - n
            consumer.messages_out += n
            consumer.bytes_out += size
        reads[lo:hi] = array("q", (newest + 1,)) * k
        return n * k

    def _serve_each(
        self,
        members: list[Consumer],
        tail: int,
        dispatch_us: int,
        templates: dict[tuple[int, bool, int], MessageTemplate],
        at_tail: dict[ConsumerWire, list[bytes]],
        behind: dict[ConsumerWire, dict[int, list[bytes]]],
    ) -> int:
        """Serve `members` consumer by consumer: a consumer at the tail has its id put in
        `at_tail` (its connection's frames of the newest entry are made after the slice's
        loop), one catching up its frames in `behind`, by entry. How many messages sent."""
        newest = tail - 1
        reads = self._reads
        cache = self._round_entries
        sent = 0
        for consumer in members:
            slot = consumer.slot
            if slot < 0:
                continue  # left during the round
            read = reads[slot]
            permits = consumer.permits
            if read >= tail or permits <= 0:
                continue
            wire = consumer.wire
            if not wire.writable:
                continue
            if read == newest and (entry := cache.get(read)) is not None:
                # The common case, inline (consumer.frames_for, as a unit test checks): one
                # new entry, read for an earlier consumer of the round.
                n = entry.num_messages
                sent += n
                consumer.permits = permits - n
                consumer.messages_out += n
                consumer.bytes_out += len(entry.payload)
                reads[slot] = tail
                ids = at_tail.get(wire)
                if ids is None:
                    at_tail[wire] = [consumer.id_varint]
                else:
                    ids.append(consumer.id_varint)
                continue  # at the tail now: nothing left for a later round
            entries = self._entries_from(read, min(READ_BATCH, permits))
            if not entries:
                continue
            sent += sum(e.num_messages for e in entries)
            reads[slot] = read = entries[-1].index + 1
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
            if read < tail and consumer.permits > 0 and not self._everyone:
                self._targets.add(consumer)
        return sent

    @staticmethod
    def _template(
        templates: dict[tuple[int, bool, int], MessageTemplate],
        entry: Entry,
        wire: ConsumerWire,
        dispatch_us: int,
    ) -> MessageTemplate:
        """The slice's frame head of `entry` for `wire` (with broker entry metadata or not)."""
        with_bem = wire.sends_broker_entry_metadata
        template = templates.get((entry.index, with_bem, 0))
        if template is None:
            template = templates[entry.index, with_bem, 0] = entry.message_template(
                dispatch_us if with_bem else None
            )
        return template

    def _id_heads_of(
        self, wire: ConsumerWire, group: list[Consumer], template: MessageTemplate
    ) -> list[bytes]:
        """The heads up to their ids (`MessageTemplate.id_heads`) of `group`, kept per
        connection between rounds while its group is the same list of the same length (a
        group only grows; a consumer leaving takes its connection off `_serve_at_tail`'s path
        until `_regroup`) and the entries' `prefix_key` the same."""
        key = template.prefix_key
        kept = self._id_heads.get(wire)
        if kept is not None and kept[0] is group and kept[1] == len(group) and kept[2] == key:
            return kept[3]
        heads = template.id_heads(list(map(_ID_VARINT, group)))
        if self._by_wire.get(wire) is group:  # a round of targets makes lists of its own
            self._id_heads[wire] = (group, len(group), key, heads)
        return heads

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
