"""Subscription cursors: acked ranges, markDelete, and their persistence.

Pulsar keeps a cursor as markDeletePosition (it and everything before it is acked) plus
individuallyDeletedMessages, the open-closed ranges of entries acked after it; the gaps between
ranges are the acknowledgement holes (seeds 001, 003). The state is persisted at most once per
second per cursor, so a crash loses up to a second of acks and those messages are delivered
again: at-least-once, by design.
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from broker.storage.files import fsync_path
from broker.storage.position import Position

Range = tuple[Position, Position]
"""(start, end]: every entry after start up to and including end."""


class AckSet:
    """markDelete plus the acked ranges after it: sorted, disjoint, merged when they touch.

    An individual ack of L:E is the range (L:E-1, L:E], so Pulsar's own "-1" bounds appear at
    the start of a ledger, and two ranges that meet only across a ledger boundary stay apart
    until markDelete sweeps over both (only the ledger knows that 6:0 follows 5:49999).
    """

    def __init__(self, mark_delete: Position, ranges: Iterable[Range] = ()) -> None:
        self._mark_delete = mark_delete
        self._ranges: list[Range] = []
        for start, end in ranges:
            self.ack_range(start, end)

    @property
    def mark_delete(self) -> Position:
        """Everything at or before it is acked."""
        return self._mark_delete

    @property
    def ranges(self) -> list[Range]:
        """The acked ranges after markDelete (a copy, for persisting)."""
        return list(self._ranges)

    def ack(self, position: Position) -> None:
        """Ack one entry: the range (L:E-1, L:E]."""
        self.ack_range(Position(position.ledger_id, position.entry_id - 1), position)

    def ack_range(self, start: Position, end: Position) -> None:
        """Ack every entry in (start, end], merging with the ranges it overlaps or touches."""
        start = max(start, self._mark_delete)
        if start >= end:
            return
        ranges = self._ranges
        low = bisect_left(ranges, start, key=_range_end)  # first range ending at or after start
        high = bisect_right(ranges, end, lo=low, key=_range_start)  # first starting after end
        if low < high:
            start = min(start, ranges[low][0])
            end = max(end, ranges[high - 1][1])
        ranges[low:high] = [(start, end)]

    def is_acked(self, position: Position) -> bool:
        """At or before markDelete, or inside an acked range (a redelivery may skip it)."""
        if position <= self._mark_delete:
            return True
        index = bisect_left(self._ranges, position, key=_range_end)
        return index < len(self._ranges) and self._ranges[index][0] < position

    def advance_mark_delete(self, next_position: Callable[[Position], Position]) -> Position:
        """Move markDelete over the acked entries right after it; returns the new markDelete.

        next_position is the ledger's next_position_after: it knows what follows the last entry
        of a ledger. A cumulative ack is ``ack_range(mark_delete, position)`` and then this.
        """
        swept = 0
        for start, end in self._ranges:
            if not start < next_position(self._mark_delete) <= end:
                break
            self._mark_delete = end
            swept += 1
        del self._ranges[:swept]
        return self._mark_delete

    def format_ranges(self) -> str:
        """Pulsar's notation: ``[(5:1226..5:1280], (5:1300..5:1310]]``."""
        return "[" + ", ".join(f"({start}..{end}]" for start, end in self._ranges) + "]"


def _range_start(acked: Range) -> Position:
    return acked[0]


def _range_end(acked: Range) -> Position:
    return acked[1]


@dataclass(frozen=True, slots=True)
class CursorState:
    """What one subscription's cursor keeps across a restart (Pulsar's PositionInfo and more).

    mark_delete is None until the subscription has a position; mode is the subscription type
    ("Exclusive", "Shared", "Failover", "Key_Shared", or the project's "Broadcast").
    """

    mark_delete: Position | None
    individually_acked: list[Range] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    mode: str = "Exclusive"


class CursorStore:
    """One JSON file per subscription, replaced atomically: a crash leaves the old or the new.

    With sync_data the file is fsynced before the rename, and the directory when a
    subscription appears or goes, so a saved state survives a power cut too.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        sync_data: bool = True,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._sync_data = sync_data
        self._fsync = fsync

    def save(self, subscription: str, state: CursorState) -> None:
        path = self._path(subscription)
        temporary = path.with_name(path.name + ".tmp")
        created = not path.exists()
        try:
            with temporary.open("wb") as file:
                file.write(_encode(state))
                file.flush()
                if self._sync_data:
                    self._fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        if created:
            self._sync_directory()

    def load_all(self) -> dict[str, CursorState]:
        """Every saved subscription's state (leftover ``*.tmp`` files of a crash are ignored)."""
        states = {}
        for path in self.directory.glob("*.json"):
            try:
                states[unquote(path.name.removesuffix(".json"))] = _decode(path.read_bytes())
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"unreadable cursor state {path}: {error}") from error
        return states

    def delete(self, subscription: str) -> None:
        """Forget a subscription's state; deleting one that was never saved is not an error."""
        self._path(subscription).unlink(missing_ok=True)
        self._sync_directory()

    def _path(self, subscription: str) -> Path:
        # Subscription names may hold "/" or anything else: percent-encode them.
        return self.directory / f"{quote(subscription, safe='')}.json"

    def _sync_directory(self) -> None:
        if self._sync_data:
            fsync_path(self.directory, self._fsync)


def _encode(state: CursorState) -> bytes:
    mark_delete = None if state.mark_delete is None else str(state.mark_delete)
    document = {
        "mark_delete": mark_delete,
        "individually_acked": [[str(start), str(end)] for start, end in state.individually_acked],
        "properties": state.properties,
        "mode": state.mode,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def _decode(raw: bytes) -> CursorState:
    document = json.loads(raw)
    mark_delete = document["mark_delete"]
    return CursorState(
        mark_delete=None if mark_delete is None else Position.parse(mark_delete),
        individually_acked=[
            (Position.parse(start), Position.parse(end))
            for start, end in document["individually_acked"]
        ],
        properties=dict(document["properties"]),
        mode=document["mode"],
    )


class ThrottledCursorWriter:
    """Persist each changed cursor at most once per interval (Pulsar's default: once a second).

    Call :meth:`tick` periodically and :meth:`flush_all` at shutdown; both write files, so run
    them where blocking on the disk is acceptable. state_fn runs in that same place.
    """

    def __init__(
        self,
        store: CursorStore,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._interval_s = interval_s
        self._clock = clock
        self._dirty: dict[str, Callable[[], CursorState]] = {}
        self._saved_at: dict[str, float] = {}

    def mark_dirty(self, name: str, state_fn: Callable[[], CursorState]) -> None:
        """Note that name changed; state_fn is called at save time, so the latest state wins."""
        self._dirty[name] = state_fn

    def tick(self) -> int:
        """Save the changed cursors whose interval has passed; returns how many were saved."""
        now = self._clock()
        due = [
            name
            for name in self._dirty
            if (saved_at := self._saved_at.get(name)) is None or now - saved_at >= self._interval_s
        ]
        for name in due:
            self._save(name, now)
        return len(due)

    def flush_all(self) -> int:
        """Save every changed cursor now (shutdown); returns how many were saved."""
        now = self._clock()
        names = list(self._dirty)
        for name in names:
            self._save(name, now)
        return len(names)

    def delete(self, name: str) -> None:
        """The subscription is gone: drop its pending save (or it would come back) and its file."""
        self._dirty.pop(name, None)
        self._saved_at.pop(name, None)
        self._store.delete(name)

    def _save(self, name: str, now: float) -> None:
        self._store.save(name, self._dirty[name]())
        del self._dirty[name]  # only once saved: a failed save stays dirty and is retried
        self._saved_at[name] = now
