"""A cursor: where one reader of a topic stands, counted in entry indexes.

Pulsar's ManagedCursor in the shape the broker needs: `mark_delete` (it and everything before
it is acknowledged), the indexes acknowledged individually above it (the gaps between them are
the acknowledgement holes of seed 003), the next index to read, and the entries to send again.
Every subscription has one; a Broadcast dispatcher also keeps one per consumer (its virtual
cursor), so acknowledgement is written once, here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from broker.core.entry import Entry
from broker.core.entry_log import EntryLog

NO_ACKS: Final[frozenset[int]] = frozenset()
"""`Cursor.acked` until an index is acknowledged out of order: a set is 216 bytes, and the
Shared baseline keeps a subscription, so a cursor, per consumer (issue 40: 2 KiB a consumer)."""


class Cursor:
    __slots__ = (
        "mark_delete",
        "acked",
        "read_index",
        "redeliver",
        "redelivery_counts",
        "rewound_from",
        "holes_resent_ms",
    )

    def __init__(self, mark_delete: int = -1, acked: Iterable[int] = ()) -> None:
        self.mark_delete = mark_delete
        self.acked: set[int] | frozenset[int] = NO_ACKS
        """Indexes above mark_delete acknowledged one by one, out of order (an ack of the one
        right after mark_delete moves it instead); NO_ACKS until the first."""
        self.redeliver: set[int] | None = None
        """Indexes sent and handed back (a consumer left, or asked): read before new ones.
        None until the first hand-back: a Broadcast subscription keeps a cursor per consumer,
        tens of thousands of them, and those never hand back (216 bytes each saved)."""
        self.redelivery_counts: dict[int, int] | None = None
        """How often each unacknowledged index was handed back: the MESSAGE redelivery_count
        (None until the first hand-back, as `redeliver`)."""
        self.holes_resent_ms: dict[int, int] | None = None
        """When the hole compensation last sent each index again (None until it first does,
        as `redeliver`)."""
        self.rewound_from = mark_delete + 1
        """Where read_index stood before the last rewind: what was sent may reach up to here.
        A rewind or seek is rare; keeping this there, not per dispatch, keeps `can_ack` O(1)
        and off the dispatch path."""
        if acked:  # a restored cursor; each Broadcast consumer's new one has none
            self.acked = {i for i in acked if i > mark_delete}
            self._advance()
            self.rewound_from = max(self.acked, default=self.mark_delete) + 1
        self.read_index = self.mark_delete + 1

    def can_ack(self, index: int) -> bool:
        """Whether `index` can have been sent from this cursor: below what was read (before
        or since the last rewind). An ack beyond it (past the log's end, or of an entry never
        dispatched) is refused, as Pulsar ignores it: one consumer must not move a shared
        cursor over entries nobody received."""
        return index < self.read_index or index < self.rewound_from

    # -- acknowledgement --------------------------------------------------------------------
    def ack(self, index: int) -> bool:
        """Acknowledge one index; False when it already was (at or below mark_delete)."""
        if index <= self.mark_delete:
            return False
        if self.redeliver:
            self.redeliver.discard(index)
        if index == self.mark_delete + 1:  # only then can mark_delete move
            self.mark_delete = index
            if self.redelivery_counts:
                self.redelivery_counts.pop(index, None)
            self._advance()
        else:
            if not isinstance(self.acked, set):
                self.acked = set()
            self.acked.add(index)
        return True

    def ack_cumulative(self, index: int) -> bool:
        """Acknowledge `index` and everything before it; False when nothing new was."""
        if index <= self.mark_delete:
            return False
        self.mark_delete = index
        if self.acked:
            self.acked = {i for i in self.acked if i > index} or NO_ACKS
        if self.redeliver:
            self.redeliver = {i for i in self.redeliver if i > index}
        if self.redelivery_counts:
            self.redelivery_counts = {i: n for i, n in self.redelivery_counts.items() if i > index}
        self._advance()
        return True

    def _advance(self) -> None:
        """Sweep mark_delete over the acknowledged indexes right after it."""
        acked, counts = self.acked, self.redelivery_counts
        if not isinstance(acked, set):
            return  # NO_ACKS
        while self.mark_delete + 1 in acked:
            self.mark_delete += 1
            acked.discard(self.mark_delete)
            if counts:
                counts.pop(self.mark_delete, None)
        if not acked:
            self.acked = NO_ACKS  # the holes filled: the set goes

    def is_acked(self, index: int) -> bool:
        return index <= self.mark_delete or index in self.acked

    def acked_ranges(self) -> list[tuple[int, int]]:
        """The individually acknowledged indexes as Pulsar's (open, closed] ranges, merged."""
        ranges: list[tuple[int, int]] = []
        for i in sorted(self.acked):
            if ranges and ranges[-1][1] == i - 1:
                ranges[-1] = (ranges[-1][0], i)
            else:
                ranges.append((i - 1, i))
        return ranges

    # -- positioning and redelivery -------------------------------------------------------------
    def seek(self, index: int) -> None:
        """Reset so that `index` is the next entry read and everything before it is acked."""
        self.rewound_from = max(self.rewound_from, self.read_index)
        self.mark_delete = index - 1
        self.read_index = index
        self.acked = NO_ACKS
        self.redeliver = None

    def rewind(self, to: int | None = None) -> None:
        """Read again from `to` (default: the first unacknowledged entry), never below
        mark_delete; pending redeliveries are dropped, the rewind reads them anyway."""
        first = self.mark_delete + 1
        self.rewound_from = max(self.rewound_from, self.read_index)
        self.read_index = first if to is None else max(first, to)
        self.redeliver = None

    def hand_back(self, indexes: Iterable[int]) -> None:
        """Entries a consumer was sent and will not acknowledge: send them again (counted)."""
        for index in indexes:
            if index > self.mark_delete and index not in self.acked:
                if self.redeliver is None:
                    self.redeliver = set()
                self.redeliver.add(index)
                self.count_redelivery(index)

    def count_redelivery(self, index: int) -> None:
        """`index` is sent again: its MESSAGE's redelivery_count goes up."""
        counts = self.redelivery_counts
        if counts is None:
            counts = self.redelivery_counts = {}
        counts[index] = counts.get(index, 0) + 1

    def hole_due(self, index: int, published_ms: int, oldest_ms: int) -> bool:
        """Whether the hole compensation may send hole `index` again: published before
        `oldest_ms`, and not sent again by it since then. Its age counts from its last
        resend, so a consumer slow to acknowledge a resent hole is not sent it on every pass
        (it was: a hole got two copies before a younger one got its first)."""
        if published_ms > oldest_ms:
            return False
        resent = self.holes_resent_ms
        return resent is None or resent.get(index, oldest_ms) <= oldest_ms

    def holes_resent(self, indexes: Iterable[int], now_ms: int) -> None:
        """The compensation sent `indexes` again at `now_ms`; what is acknowledged since is
        forgotten."""
        resent = self.holes_resent_ms
        if resent is None:
            resent = self.holes_resent_ms = {}
        else:
            for index in [i for i in resent if self.is_acked(i)]:
                del resent[index]
        for index in indexes:
            resent[index] = now_ms

    # -- reading ----------------------------------------------------------------------------------
    def next_entries(self, log: EntryLog, limit: int) -> tuple[list[Entry], bool]:
        """Entries to send next: redeliveries first (in order), then new ones.

        Returns (entries, redelivered) and moves read_index past the new ones.
        """
        redeliver = self.redeliver
        if redeliver:
            entries = []
            for i in sorted(redeliver)[:limit]:
                found = log.read(i, 1)
                if found and found[0].index == i:
                    entries.append(found[0])
                    redeliver.discard(i)
                elif i < log.first_index:
                    redeliver.discard(i)  # gone with retention: nothing left to resend
            if entries:
                return entries, True
            if redeliver:
                return [], True
        if self.read_index >= log.next_index:
            return [], False  # at the tail: the common case once a dispatch has sent the new entry
        while True:
            read = log.read(self.read_index, limit)
            if not read:
                return [], False
            # Past what was read, acknowledged or not: entries acked individually (after a
            # rewind) are skipped, never read again and again.
            self.read_index = read[-1].index + 1
            entries = [e for e in read if e.index not in self.acked]
            if entries:
                return entries, False
