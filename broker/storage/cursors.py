"""Subscription cursors on disk: markDelete, acked ranges, and their throttled persistence.

Pulsar keeps a cursor as markDeletePosition (it and everything before it is acked) plus
individuallyDeletedMessages, the open-closed ranges of entries acked after it; the gaps between
ranges are the acknowledgement holes (seeds 001, 003). The live cursor is
broker.subscriptions.cursor.Cursor (in entry indexes); this module keeps its state in positions.
The state is persisted at most once per second per cursor, so a crash loses up to a second of
acks and those messages are delivered again: at-least-once, by design.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from broker.storage.files import fsync_path
from broker.storage.position import Position

Range = tuple[Position, Position]
"""(start, end]: every entry after start up to and including end."""


def format_ranges(ranges: Iterable[Range]) -> str:
    """Pulsar's individuallyDeletedMessages notation: ``[(5:1226..5:1280], (5:1300..5:1310]]``."""
    return "[" + ", ".join(f"({start}..{end}]" for start, end in ranges) + "]"


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


@dataclass(slots=True)
class CursorWrites:
    """Cursor files to write, snapshotted where the cursors live (the event loop); `apply`
    runs where blocking on the disk is fine (a thread). Deletes go first, so a subscription
    deleted and created again under the same name ends up saved."""

    store: CursorStore
    saves: list[tuple[str, CursorState]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)

    def apply(self) -> None:
        for name in self.deletes:
            self.store.delete(name)
        for name, state in self.saves:
            self.store.save(name, state)


class ThrottledCursorWriter:
    """Persist each changed cursor at most once per interval (Pulsar's default: once a second).

    Marking a cursor dirty is cheap and keeps only a function of its latest state. `take` (on
    the loop, where that function may run) snapshots what is due; `CursorWrites.apply` writes
    it. `tick` and `flush_all` do both in one place, for callers that may block.
    """

    def __init__(
        self,
        store: CursorStore,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._interval_s = interval_s
        self._clock = clock
        self._dirty: dict[str, Callable[[], CursorState]] = {}
        self._saved_at: dict[str, float] = {}
        self._deletes: set[str] = set()

    def mark_dirty(self, name: str, state_fn: Callable[[], CursorState]) -> None:
        """Note that name changed; state_fn is called at take time, so the latest state wins."""
        self._dirty[name] = state_fn

    def delete(self, name: str) -> None:
        """The subscription is gone: drop its pending save (or it would come back) and its file."""
        self._dirty.pop(name, None)
        self._saved_at.pop(name, None)
        self._deletes.add(name)

    def take(self, everything: bool = False) -> CursorWrites:
        """What is due now (everything: all that changed, as at shutdown), as a snapshot."""
        now = self._clock()
        due = [
            name
            for name in self._dirty
            if everything
            or (saved_at := self._saved_at.get(name)) is None
            or now - saved_at >= self._interval_s
        ]
        writes = CursorWrites(self.store, deletes=sorted(self._deletes))
        self._deletes.clear()
        for name in due:
            writes.saves.append((name, self._dirty.pop(name)()))
            self._saved_at[name] = now
        return writes

    def retry(self, writes: CursorWrites) -> None:
        """`writes` failed: keep what it held pending, unless changed or deleted since."""
        for name, state in writes.saves:
            if name not in self._deletes:
                self._dirty.setdefault(name, _constant(state))
        self._deletes.update(writes.deletes)

    def tick(self) -> int:
        """Save the changed cursors whose interval has passed; returns how many were saved."""
        return self._write(self.take())

    def flush_all(self) -> int:
        """Save every changed cursor now (shutdown); returns how many were saved."""
        return self._write(self.take(everything=True))

    def _write(self, writes: CursorWrites) -> int:
        try:
            writes.apply()
        except BaseException:
            self.retry(writes)  # a failed save stays dirty and is retried
            raise
        return len(writes.saves)


def _constant(state: CursorState) -> Callable[[], CursorState]:
    return lambda: state
