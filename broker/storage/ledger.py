"""A persistent topic's entries: append-only ledger files plus a tailing-read cache.

Layout: ``<directory>/ledger-<id>.log``, each a run of records
``[u32 length][u32 crc32c(body)][body]`` (big-endian, like the Pulsar wire). Version 2 records
(the length's top bit set) carry their entry id: ``body = [u64 entry id][u64 received_us][entry
bytes]``; version 1 records, written before, have ``body = [u64 received_us][entry bytes]`` and
their id is their index in the file. Both are read; a ledger file is written in one version
(new writes always go to a new ledger). Nothing but the files is stored: the offset index is
rebuilt by scanning them at open. A crash can only tear what was written after the last sync,
so recovery cuts a torn tail. A damaged record inside a file (a flipped bit, a bad sector) is
not a tear: recovery finds the next whole record (the damaged one's own length when that is
intact, else a byte-by-byte search for a record whose checksum holds, followed by another or
the end) and keeps everything from there. The ids in between are lost: with version 2 records,
every id up to the next whole record's own, however many records the damage ran over; with
version 1 records, one (damage over several of them would shift the ids after it). So every
later entry keeps its id and no cursor lands on another entry. What was lost and cut is in
`recovery`, by entry id. New writes after a restart always go to a new, higher ledger id (as
Pulsar's managed ledger does), so message ids keep growing and never name two different
entries.

Threading: one writer at a time (the journal's worker thread) calls ``write``, ``sync``,
``confirm``, ``discard_unconfirmed`` and ``close``; readers (``read``, the position queries,
``delete_ledgers_before``) may run on other threads meanwhile. A lock guards what both share
(segment list, offsets, cache, confirmed position) and is never held across a data write or
fsync. Readers see confirmed entries only, so nothing is dispatched before it is durable.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import threading
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import crc32c

from broker.storage.files import fsync_path
from broker.storage.position import Position

MiB = 1024 * 1024

_HEADER = struct.Struct(">II")  # body length (top bit: version 2), crc32c of the body
_LENGTH = struct.Struct(">I")
_RECEIVED_US = struct.Struct(">Q")
_ENTRY_ID = struct.Struct(">Q")
_V2 = 1 << 31
"""The length's top bit: a version 2 record, its body led by its entry id (a length never
comes near: frames are at most maxMessageSize)."""
_LENGTH_MASK = _V2 - 1
_V2_PREFIX = _ENTRY_ID.size + _RECEIVED_US.size
_FILE_NAME = re.compile(r"ledger-(\d+)\.log")
_FIRST_LEDGER_ID = 1
_EARLIEST = Position(-1, -1)


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored entry: its bytes as received and when the broker received them (µs)."""

    position: Position
    data: bytes
    received_us: int


@dataclass(eq=False, slots=True)
class _Segment:
    """One ledger file and where each of its records starts, so reads seek instead of scan."""

    ledger_id: int
    path: Path
    offsets: array[int] = field(default_factory=lambda: array("Q"))
    size: int = 0
    """End of the last whole record."""
    lost: list[int] = field(default_factory=list)
    """Entry ids of damaged records found at open (ascending): they keep their id, unread."""


@dataclass(frozen=True, slots=True)
class Recovery:
    """What opening a ledger file found: entries kept, lost (damaged), bytes cut at the end."""

    ledger_id: int
    entries: int
    lost: list[tuple[int, int]]
    """(entry id, byte offset) of each damaged record skipped."""
    truncated_bytes: int

    def describe(self) -> str:
        parts = [f"ledger {self.ledger_id}: {self.entries - len(self.lost)} entries recovered"]
        if self.lost:
            lost = ", ".join(f"{self.ledger_id}:{e} (byte {o})" for e, o in self.lost)
            parts.append(f"lost {len(self.lost)} damaged: {lost}")
        if self.truncated_bytes:
            parts.append(
                f"cut a torn tail of {self.truncated_bytes} bytes after entry "
                f"{self.ledger_id}:{self.entries - 1}"
            )
        return "; ".join(parts)


class ManagedLedger:
    """One topic's ledgers. Use :meth:`open`; non-persistent topics do not use this class."""

    def __init__(
        self,
        directory: Path,
        segments: list[_Segment],
        *,
        max_entries_per_ledger: int,
        cache_bytes: int,
        truncated_bytes: int,
        unsynced_dirs: set[Path],
        recovery: list[Recovery] | None = None,
    ) -> None:
        if max_entries_per_ledger < 1:
            raise ValueError(f"max_entries_per_ledger must be >= 1, not {max_entries_per_ledger}")
        self.directory = directory
        self.truncated_bytes = truncated_bytes
        """Bytes cut from torn tails when the ledger was opened (0 after a clean shutdown)."""
        self.recovery = recovery or []
        """Ledgers that had damaged records or a torn tail at open: what was kept and lost."""
        self._max_entries = max_entries_per_ledger
        self._cache_limit = cache_bytes
        self._lock = threading.Lock()
        # Shared with readers, under the lock:
        self._segments = segments
        self._current: _Segment | None = None  # the ledger being written; always the last one
        self._next_ledger_id = segments[-1].ledger_id + 1 if segments else _FIRST_LEDGER_ID
        self._confirmed = _last_position(segments)
        self._unconfirmed: list[Entry] = []
        self._cache: deque[Entry] = deque()
        self._cached_bytes = 0
        self._unsynced: dict[int, _Segment] = {}
        # The writer's own:
        self._fd = -1  # append-only descriptor of self._current
        self._unsynced_dirs = unsynced_dirs
        self._closed = False

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        max_entries_per_ledger: int = 50_000,
        cache_bytes: int = 64 * MiB,
    ) -> ManagedLedger:
        """Load (or create) a topic's ledgers, cutting torn tails; see ``truncated_bytes``.

        max_entries_per_ledger is Pulsar's managedLedgerMaxEntriesPerLedger; cache_bytes bounds
        this topic's tailing-read cache (newest entries, counted at their record size).
        """
        path = Path(directory)
        created = not path.is_dir()
        path.mkdir(parents=True, exist_ok=True)
        segments: list[_Segment] = []
        truncated = 0
        recovery = []
        for ledger_id, file in sorted(_ledger_files(path)):
            segment, file_size, lost_at = _scan(ledger_id, file)
            if segment.size < file_size:
                os.truncate(file, segment.size)
                truncated += file_size - segment.size
            if lost_at or segment.size < file_size:
                recovery.append(
                    Recovery(
                        ledger_id,
                        len(segment.offsets),
                        list(zip(segment.lost, lost_at, strict=True)),
                        file_size - segment.size,
                    )
                )
            segments.append(segment)
        return cls(
            path,
            segments,
            max_entries_per_ledger=max_entries_per_ledger,
            cache_bytes=cache_bytes,
            truncated_bytes=truncated,
            unsynced_dirs={path.parent} if created else set(),
            recovery=recovery,
        )

    # -- writer side ------------------------------------------------------------------------

    def write(self, data: bytes, received_us: int) -> Position:
        """Append one entry to the OS (no fsync); readers see it after :meth:`confirm`.

        Rolls to a new ledger after max_entries_per_ledger entries.
        """
        if self._closed:
            raise ValueError("write to a closed ledger")
        segment = self._current
        if segment is None or len(segment.offsets) >= self._max_entries:
            segment = self._roll()
        prefix = _ENTRY_ID.pack(len(segment.offsets)) + _RECEIVED_US.pack(received_us)
        crc = crc32c.crc32c(data, crc32c.crc32c(prefix))
        record = b"".join((_HEADER.pack(_V2 | (len(prefix) + len(data)), crc), prefix, data))
        _write_all(self._fd, record)
        with self._lock:
            position = Position(segment.ledger_id, len(segment.offsets))
            segment.offsets.append(segment.size)
            segment.size += len(record)
            self._unsynced[segment.ledger_id] = segment
            self._unconfirmed.append(Entry(position, data, received_us))
        return position

    def sync(self, fsync: Callable[[int], None] = os.fsync) -> None:
        """Make every write so far durable: the ledger files, then directories that gained one."""
        with self._lock:
            segments = list(self._unsynced.values())
        for segment in segments:
            if segment is self._current:
                fsync(self._fd)
            else:
                # Retention may have deleted a closed ledger meanwhile: nothing left to sync.
                with suppress(FileNotFoundError):
                    fsync_path(segment.path, fsync)
            with self._lock:
                del self._unsynced[segment.ledger_id]
        for directory in sorted(self._unsynced_dirs):
            fsync_path(directory, fsync)
            self._unsynced_dirs.discard(directory)

    def confirm(self) -> None:
        """Let readers see every entry written so far (the journal: once they are durable).

        BookKeeper calls this boundary LastAddConfirmed.
        """
        with self._lock:
            if not self._unconfirmed:
                return
            self._confirmed = self._unconfirmed[-1].position
            for entry in self._unconfirmed:
                self._cache.append(entry)
                self._cached_bytes += _record_size(entry)
            self._unconfirmed.clear()
            while self._cached_bytes > self._cache_limit:
                self._cached_bytes -= _record_size(self._cache.popleft())

    def discard_unconfirmed(self) -> None:
        """Undo the writes of a failed group and continue in a new ledger.

        Nobody was told their positions, so cutting them is safe, and it keeps them from
        resurfacing at the next open. Pulsar likewise closes a ledger after a failed add.
        """
        current = self._current
        with self._lock:
            touched = {entry.position.ledger_id for entry in self._unconfirmed}
            self._unconfirmed.clear()
            segments = [s for s in self._segments if s.ledger_id in touched or s is current]
            for segment in segments:
                keep = self._confirmed_count(segment)
                if keep < len(segment.offsets):
                    segment.size = segment.offsets[keep]
                    del segment.offsets[keep:]
        self._close_current()
        for segment in segments:  # the current file may also end in a half-written record
            os.truncate(segment.path, segment.size)

    def close(self) -> None:
        """Stop writing and close the open ledger file. No fsync: call :meth:`sync` for that."""
        self._closed = True
        self._close_current()

    def _roll(self) -> _Segment:
        """Close the ledger being written and create the next id (never an existing file)."""
        self._close_current()
        ledger_id = self._next_ledger_id
        path = self.directory / f"ledger-{ledger_id}.log"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        self._fd = os.open(path, flags, 0o644)
        self._unsynced_dirs.add(self.directory)
        segment = _Segment(ledger_id, path)
        with self._lock:
            self._segments.append(segment)
            self._current = segment
            self._next_ledger_id = ledger_id + 1
        return segment

    def _close_current(self) -> None:
        """Close the write descriptor; a later sync() reaches the file by name."""
        if self._current is None:
            return
        with self._lock:
            self._current = None
        os.close(self._fd)
        self._fd = -1

    # -- reader side ------------------------------------------------------------------------

    @property
    def last_position(self) -> Position | None:
        """The newest confirmed entry; None when there is none."""
        with self._lock:
            return self._confirmed

    @property
    def first_position(self) -> Position | None:
        """The oldest entry still stored (retention moves it); None when there is none."""
        with self._lock:
            return self._locate(_EARLIEST)

    def lost_entries(self) -> dict[int, list[int]]:
        """Ledger id → entry ids of the damaged records skipped at open (ascending)."""
        with self._lock:
            return {s.ledger_id: list(s.lost) for s in self._segments if s.lost}

    def ledger_sizes(self) -> list[tuple[int, int]]:
        """(ledger id, confirmed entries) of every stored ledger, oldest first.

        Lets a caller that numbers entries densely map numbers to positions without a scan.
        """
        with self._lock:
            return [(s.ledger_id, self._confirmed_count(s)) for s in self._segments]

    def ledger_files(self) -> list[tuple[int, Path, int]]:
        """(ledger id, file, bytes) of every stored ledger, oldest first: what retention weighs
        (a closed ledger's age is its file's modification time, i.e. its last write)."""
        with self._lock:
            return [(s.ledger_id, s.path, s.size) for s in self._segments]

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to max_entries confirmed entries at or after start, in order across ledgers.

        start need not exist (an entry id past a ledger's end, a deleted or future ledger): the
        read begins at the first entry after it. Tailing reads come from the cache; catch-up
        reads go to disk, so call them off the event loop.
        """
        if max_entries <= 0:
            return []
        with ExitStack() as stack:
            with self._lock:
                first = self._locate(start)
                if first is None:
                    return []
                if self._cache and first >= self._cache[0].position:
                    return self._from_cache(first, max_entries)
                spans = []
                for segment, entry_id, begin, end in self._disk_spans(first, max_entries):
                    # Opened under the lock, so retention cannot delete it before we read it.
                    fd = os.open(segment.path, os.O_RDONLY | os.O_CLOEXEC)
                    stack.callback(os.close, fd)
                    lost = frozenset(segment.lost) if segment.lost else frozenset()
                    spans.append((fd, segment.ledger_id, entry_id, begin, end, lost, segment))
            return [
                entry
                for fd, ledger_id, entry_id, begin, end, lost, segment in spans
                for entry in _read_span(
                    fd, ledger_id, entry_id, begin, end, lost, segment.offsets if lost else None
                )
            ]

    def next_position_after(self, position: Position) -> Position:
        """The entry that follows position: the next stored one, else the next write's.

        Written but unconfirmed entries count, so a reader parked here never skips them.
        """
        following = Position(position.ledger_id, position.entry_id + 1)
        with self._lock:
            found = self._locate(following, written=True)
            if found is not None:
                return found
            current = self._current
            if current is not None and len(current.offsets) < self._max_entries:
                upcoming = Position(current.ledger_id, len(current.offsets))
            else:
                upcoming = Position(self._next_ledger_id, 0)
        return max(upcoming, following)

    def entries_between(self, start: Position, end: Position) -> int:
        """How many confirmed entries lie in (start, end]: a backlog counted from markDelete
        (damaged ones lost at open included)."""
        total = 0
        with self._lock:
            first = bisect_left(self._segments, start.ledger_id, key=_ledger_id)
            for segment in islice(self._segments, first, None):
                if segment.ledger_id > end.ledger_id:
                    break
                count = self._confirmed_count(segment)
                low = start.entry_id + 1 if segment.ledger_id == start.ledger_id else 0
                high = min(count, end.entry_id + 1) if segment.ledger_id == end.ledger_id else count
                total += max(0, high - low)
        return total

    def delete_ledgers_before(self, position: Position) -> list[int]:
        """Retention: delete whole ledgers whose entries all precede position; returns their ids.

        Ledgers are the unit of deletion (seed 001). The newest file always stays: the ledger
        being written is the newest, and its id is what keeps ids growing after a restart.
        """
        deleted: list[_Segment] = []
        with self._lock:
            try:
                for segment in self._segments[:-1]:
                    count = len(segment.offsets)
                    if self._confirmed_count(segment) < count:
                        break
                    if Position(segment.ledger_id, count - 1) >= position:
                        break
                    segment.path.unlink()
                    deleted.append(segment)
            finally:
                self._forget(deleted)
        return [segment.ledger_id for segment in deleted]

    def _forget(self, deleted: list[_Segment]) -> None:
        """Drop deleted ledgers from the index, the sync list and the cache (lock held)."""
        if not deleted:
            return
        del self._segments[: len(deleted)]
        for segment in deleted:
            self._unsynced.pop(segment.ledger_id, None)
        while self._cache and self._cache[0].position.ledger_id <= deleted[-1].ledger_id:
            self._cached_bytes -= _record_size(self._cache.popleft())

    def _confirmed_count(self, segment: _Segment) -> int:
        """How many of segment's entries readers may see (lock held)."""
        confirmed = self._confirmed
        if confirmed is None or segment.ledger_id > confirmed.ledger_id:
            return 0
        if segment.ledger_id < confirmed.ledger_id:
            return len(segment.offsets)
        return confirmed.entry_id + 1

    def _locate(self, start: Position, *, written: bool = False) -> Position | None:
        """The first entry at or after start, confirmed (or just written); lock held."""
        index = bisect_left(self._segments, start.ledger_id, key=_ledger_id)
        entry_id = 0
        if index < len(self._segments) and self._segments[index].ledger_id == start.ledger_id:
            entry_id = max(start.entry_id, 0)
        for segment in islice(self._segments, index, None):
            count = len(segment.offsets) if written else self._confirmed_count(segment)
            if entry_id < count:
                return Position(segment.ledger_id, entry_id)
            entry_id = 0
        return None

    def _from_cache(self, first: Position, max_entries: int) -> list[Entry]:
        """The cache holds the newest confirmed entries without gaps: slice from first on."""
        cache = self._cache
        index = bisect_left(cache, first, key=_entry_position)
        return [cache[i] for i in range(index, min(index + max_entries, len(cache)))]

    def _disk_spans(
        self, first: Position, max_entries: int
    ) -> Iterator[tuple[_Segment, int, int, int]]:
        """Per ledger to read: (segment, first entry id, start offset, end offset); lock held."""
        index = bisect_left(self._segments, first.ledger_id, key=_ledger_id)
        entry_id = first.entry_id
        wanted = max_entries
        for segment in islice(self._segments, index, None):
            count = min(self._confirmed_count(segment) - entry_id, wanted)
            if count > 0:  # ledgers cut empty by recovery or a failed group have none
                stop = entry_id + count
                end = segment.offsets[stop] if stop < len(segment.offsets) else segment.size
                yield segment, entry_id, segment.offsets[entry_id], end
                wanted -= count
                if not wanted:
                    return
            entry_id = 0


def _read_span(
    fd: int,
    ledger_id: int,
    entry_id: int,
    start: int,
    end: int,
    lost: frozenset[int] = frozenset(),
    offsets: array[int] | None = None,
) -> list[Entry]:
    """Parse the whole records in [start, end) of one ledger file (CRCs were checked at open),
    stepping over the damaged ones (`lost`, found through `offsets`)."""
    buffer = os.pread(fd, end - start, start)
    if len(buffer) != end - start:
        raise OSError(f"ledger-{ledger_id}.log is shorter than its index: changed by hand?")
    view = memoryview(buffer)
    entries = []
    offset = 0
    while offset < len(buffer):
        if entry_id in lost:
            assert offsets is not None
            entry_id += 1
            offset = (offsets[entry_id] if entry_id < len(offsets) else end) - start
            continue
        length, _crc = _HEADER.unpack_from(buffer, offset)
        body = offset + _HEADER.size
        if length & _V2:
            length &= _LENGTH_MASK
            (received_us,) = _RECEIVED_US.unpack_from(buffer, body + _ENTRY_ID.size)
            data = bytes(view[body + _V2_PREFIX : body + length])
        else:
            (received_us,) = _RECEIVED_US.unpack_from(buffer, body)
            data = bytes(view[body + _RECEIVED_US.size : body + length])
        entries.append(Entry(Position(ledger_id, entry_id), data, received_us))
        entry_id += 1
        offset = body + length
    return entries


def _scan(ledger_id: int, path: Path) -> tuple[_Segment, int, list[int]]:
    """Index a ledger file: (segment, file size, byte offset of each lost entry's damage).

    Whole records are indexed; the ids of a damaged stretch followed by whole records are
    indexed as lost, each at the stretch's offset: those up to the next record's own id (a
    version 2 record), or one (version 1). The first bad record with nothing whole after it
    starts the torn tail."""
    segment = _Segment(ledger_id, path)
    lost_at: list[int] = []
    with path.open("rb") as file:
        file_size = os.fstat(file.fileno()).st_size
        if file_size == 0:
            return segment, 0, lost_at
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            offset = 0
            while offset < file_size:
                expected = len(segment.offsets)
                end = _whole_record(data, offset, file_size, expected)
                if end is None:
                    resume = _resync(data, offset, file_size, expected + 1)
                    if resume is None:
                        break  # a torn tail: cut here
                    resumed_id = _record_id(data, resume)
                    for lost in range(expected, expected + 1 if resumed_id is None else resumed_id):
                        segment.lost.append(lost)
                        lost_at.append(offset)
                        segment.offsets.append(offset)
                    offset = resume
                    continue
                carried = _record_id(data, offset)
                for lost in range(expected, expected if carried is None else carried):
                    segment.lost.append(lost)  # ids missing without damage: lost all the same
                    lost_at.append(offset)
                    segment.offsets.append(offset)
                segment.offsets.append(offset)
                offset = end
            segment.size = offset
    return segment, file_size, lost_at


def _whole_record(data: mmap.mmap, offset: int, size: int, min_id: int = 0) -> int | None:
    """The end of the record at offset if it is whole and its checksum holds, else None. A
    version 2 record must also carry an id of at least `min_id` (ids only grow in a file)."""
    if offset + _HEADER.size > size:
        return None
    length, crc = _HEADER.unpack_from(data, offset)
    shortest = _V2_PREFIX if length & _V2 else _RECEIVED_US.size
    length &= _LENGTH_MASK
    end = offset + _HEADER.size + length
    if length < shortest or end > size:
        return None
    if crc32c.crc32c(data[offset + _HEADER.size : end]) != crc:
        return None
    entry_id = _record_id(data, offset)
    if entry_id is not None and entry_id < min_id:
        return None
    return end


def _record_id(data: mmap.mmap, offset: int) -> int | None:
    """The entry id a whole record at offset carries; None for a version 1 record."""
    (length,) = _LENGTH.unpack_from(data, offset)
    if not length & _V2:
        return None
    (entry_id,) = _ENTRY_ID.unpack_from(data, offset + _HEADER.size)
    return int(entry_id)


def _resync(data: mmap.mmap, offset: int, size: int, min_id: int) -> int | None:
    """Where whole records start again after a damaged one at offset, or None (a torn tail).

    First where the damaged record's own length says it ends; failing that (the length is
    what was damaged), the first later offset holding a whole record followed by another
    whole record or by the end of the file. A version 2 record found must carry an id of at
    least `min_id` (the damaged record's id + 1)."""
    if offset + _HEADER.size <= size:
        (length,) = _LENGTH.unpack_from(data, offset)
        candidate = offset + _HEADER.size + (length & _LENGTH_MASK)
        if candidate < size and _whole_record(data, candidate, size, min_id) is not None:
            return candidate
    for candidate in range(offset + 1, size - _HEADER.size - _RECEIVED_US.size + 1):
        end = _whole_record(data, candidate, size, min_id)
        if end is not None and (end == size or _whole_record(data, end, size) is not None):
            return candidate
    return None


def _ledger_files(directory: Path) -> Iterator[tuple[int, Path]]:
    for path in directory.iterdir():
        if match := _FILE_NAME.fullmatch(path.name):
            yield int(match.group(1)), path


def _last_position(segments: list[_Segment]) -> Position | None:
    for segment in reversed(segments):
        if segment.offsets:
            return Position(segment.ledger_id, len(segment.offsets) - 1)
    return None


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (a full disk, a signal): finish, or raise its error."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _record_size(entry: Entry) -> int:
    """What an entry costs the cache: its record's size, so empty entries are not free."""
    return _HEADER.size + _V2_PREFIX + len(entry.data)


def _ledger_id(segment: _Segment) -> int:
    return segment.ledger_id


def _entry_position(entry: Entry) -> Position:
    return entry.position
