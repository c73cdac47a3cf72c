"""Key_Shared: each key belongs to one consumer, so per-key order holds across consumers.

Which consumer owns a key, as Pulsar's selectors decide it:

- AUTO_SPLIT (the default; ConsistentHashingStickyKeyConsumerSelector): every consumer puts
  POINTS points on a hash ring (Murmur3_32 of its name, a NUL and the point's number); a key
  (Murmur3_32 of it) belongs to the first point at or after its hash, wrapping round. A
  consumer joining or leaving moves only the keys next to its points, not all of them.
- STICKY (HashRangeExclusiveStickyKeyConsumerSelector): each consumer names the ranges of key
  slots (Murmur3_32 mod 65536) it takes in `keySharedMeta`; ranges of two consumers may not
  overlap (ConsumerAssignError), and an entry whose slot no consumer covers waits for one.

A subscription's consumers are all of one of the two (the first consumer's). Entries without a
key go by the key "NONE_KEY", as Pulsar's dispatcher does. An entry whose owner has no permits
waits, and so does every later entry with the same key; entries of other keys go on (up to
MAX_WAITING entries held). When consumers change, what was sent and not acknowledged goes back
to be dispatched again, before anything newer, so per-key order restarts cleanly.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Any

from broker.core.consumer import Consumer
from broker.core.entry import Entry
from broker.subscriptions.base import READ_BATCH, Dispatcher, SubscriptionError
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.extensions import KEY_SLOTS, murmur3_32

POINTS = 100
"""Ring points per consumer: Pulsar's subscriptionKeySharedConsistentHashingReplicaPoints."""
NONE_KEY = b"NONE_KEY"
MAX_WAITING = 10 * READ_BATCH
"""Entries held back (owner without permits, or no owner) before reading stops."""


def validate_ranges(ranges: tuple[tuple[int, int], ...], taken: list[tuple[int, int, str]]) -> None:
    """Pulsar's checks of a STICKY consumer's ranges against each other and `taken` (start, end,
    owner name); raises SubscriptionError(ConsumerAssignError)."""
    if not ranges:
        raise SubscriptionError("Ranges for KeyShared policy must not be empty.", _ASSIGN)
    claimed = list(taken)
    for start, end in ranges:
        if start > end:
            raise SubscriptionError("Fixed hash range start > end", _ASSIGN)
        if start < 0 or end >= KEY_SLOTS:
            raise SubscriptionError(f"hash range [{start}, {end}] outside [0, 65535]", _ASSIGN)
        for other_start, other_end, owner in claimed:
            if start <= other_end and other_start <= end:
                raise SubscriptionError(f"Range conflict with consumer {owner}", _ASSIGN)
        claimed.append((start, end, "itself"))


_ASSIGN = pb.ConsumerAssignError


class KeySharedDispatcher(Dispatcher):
    mode = "Key_Shared"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting: list[Entry] = []
        self._ring: list[int] = []
        """Sorted hashes of the AUTO_SPLIT ring's points."""
        self._ring_owners: list[list[Consumer]] = []
        """The consumers at each point (a collision shares one), sorted by name."""
        self._range_starts: list[int] = []
        self._ranges: list[tuple[int, int, Consumer]] = []
        """STICKY: (start, end, consumer) sorted by start."""

    @property
    def sticky(self) -> bool:
        return bool(self.consumers) and self.consumers[0].hash_ranges is not None

    # -- consumers -----------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        ranges = consumer.hash_ranges
        if self.consumers and (ranges is not None) != self.sticky:
            wanted = "STICKY" if self.sticky else "AUTO_SPLIT"
            raise SubscriptionError(
                f"has {wanted} consumers; a consumer must use that keySharedMode",
                pb.ConsumerBusy,
            )
        if ranges is not None:
            validate_ranges(ranges, [(s, e, c.name) for s, e, c in self._ranges])
        super().add_consumer(consumer)

    def on_consumers_changed(self) -> None:
        self._build()
        # Ownership changes: what was sent and not acknowledged goes back, and what waited
        # is read again after it (never delivered: no redelivery count for it).
        for c in self.consumers:
            self._return_unacked(c)
        if self._waiting:
            redeliver = self.cursor.redeliver or set()
            redeliver.update(e.index for e in self._waiting)
            self.cursor.redeliver = redeliver
            self._waiting = []

    def _build(self) -> None:
        if self.sticky:
            self._ranges = sorted(
                (start, end, c) for c in self.consumers for start, end in c.hash_ranges or ()
            )
            self._range_starts = [start for start, _, _ in self._ranges]
            return
        points: dict[int, list[Consumer]] = {}
        for c in self.consumers:
            name = c.name.encode()
            for i in range(POINTS):
                at = points.setdefault(murmur3_32(name + b"\0" + str(i).encode()), [])
                if c not in at:
                    at.append(c)
        self._ring = sorted(points)
        self._ring_owners = [
            sorted(points[h], key=lambda c: (c.name, c.consumer_id)) for h in self._ring
        ]

    def owner(self, entry: Entry) -> Consumer | None:
        key = entry.key or NONE_KEY
        if self.sticky:
            slot = murmur3_32(key) % KEY_SLOTS
            i = bisect.bisect_right(self._range_starts, slot) - 1
            if i >= 0 and slot <= self._ranges[i][1]:
                return self._ranges[i][2]
            return None
        if not self._ring:
            return None
        hashed = murmur3_32(key)
        i = bisect.bisect_left(self._ring, hashed)
        at = self._ring_owners[i if i < len(self._ring) else 0]
        return at[hashed % len(at)]

    def seek(self, index: int) -> None:
        self._waiting = []  # read before the seek: not what comes next any more
        super().seek(index)

    # -- dispatch ------------------------------------------------------------------------
    def dispatch(self) -> None:
        if not self.consumers:
            return
        while True:
            waiting, self._waiting = self._waiting, []
            fresh: list[Entry] = []
            if len(waiting) < MAX_WAITING:
                fresh, _ = self.next_entries(READ_BATCH)
            # Oldest first (redeliveries are older than what waits): per-key order.
            candidates = list(heapq.merge(waiting, fresh, key=lambda e: e.index))
            if not candidates:
                return
            blocked_keys: set[bytes] = set()
            by_consumer: dict[Consumer, list[Entry]] = {}
            for entry in candidates:
                key = entry.key or NONE_KEY
                owner = self.owner(entry)
                if (
                    key in blocked_keys
                    or owner is None
                    or owner.permits <= 0
                    or not owner.wire.writable
                ):
                    blocked_keys.add(key)
                    self._waiting.append(entry)
                    continue
                owner.permits -= entry.num_messages  # reserve; frames_for charges it again
                by_consumer.setdefault(owner, []).append(entry)
            for consumer, entries in by_consumer.items():
                consumer.permits += sum(e.num_messages for e in entries)
                self.send(consumer, entries)
            if not by_consumer:
                return
