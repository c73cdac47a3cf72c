"""Subscription cursors on disk: markDelete, acked ranges, and their throttled persistence.

Pulsar keeps a cursor as markDeletePosition (it and everything before it is acked) plus
individuallyDeletedMessages, the open-closed ranges of entries acked after it; the gaps between
ranges are the acknowledgement holes (seeds 001, 003). The live cursor is
broker.subscriptions.cursor.Cursor (in entry indexes); this module keeps its state in positions.
The state is persisted at most once per second per cursor, so a crash loses up to a second of
acks and those messages are delivered again: at-least-once, by design. A topic's cursors share
one append-only log (CursorStore), so persisting them costs one write and one fsync per flush.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from urllib.parse import unquote

import crc32c

from broker.storage.files import fsync_path
from broker.storage.position import Position

log = logging.getLogger("broker.storage")

Range = tuple[Position, Position]
"""(start, end]: every entry after start up to and including end."""

LOG_NAME = "cursors.log"
PREVIOUS_NAME = "cursors.log.prev"
"""The log as it was before the last compaction: the generation to fall back on for the
subscriptions whose records a damaged log lost."""
MAX_UNACKED_RANGES_TO_PERSIST = 10_000
"""Pulsar's managedLedgerMaxUnackedRangesToPersist: a cursor's record keeps at most this many
acked ranges, the lowest ones. Entries acked in the ranges above are known in memory only and
delivered again after a crash (at-least-once, as in Pulsar)."""
COMPACT_FACTOR = 4
COMPACT_FLOOR_BYTES = 1024 * 1024
"""The log is compacted once larger than both COMPACT_FACTOR snapshots and this."""

_HEADER = struct.Struct(">II")  # body length, crc32c of the body
_NAME = struct.Struct(">BI")  # kind, name length in bytes; then the UTF-8 name
_STATE = struct.Struct(">BBqqI")  # flags, mode length, mark-delete, ranges; then mode, ranges
_LENGTH = struct.Struct(">I")
_GROUP = struct.Struct(">BqqI")  # flags, mark-delete, ranges; then the ranges
_NAMES = struct.Struct(">BII")  # how the names are encoded, how many, their bytes
_SAVE, _DELETE, _CONSUMERS = 1, 2, 3
_JOINED, _PREFIXED = 0, 1
"""A group's consumer names: joined by NUL (one C-speed join for thousands), or each
[u32 length][bytes] when a name holds a NUL itself."""
_HAS_MARK, _HAS_PROPERTIES = 1, 2
_MODES: dict[str, bytes] = {}


def format_ranges(ranges: Iterable[Range]) -> str:
    """Pulsar's individuallyDeletedMessages notation: ``[(5:1226..5:1280], (5:1300..5:1310]]``."""
    return "[" + ", ".join(f"({start}..{end}]" for start, end in ranges) + "]"


@dataclass(frozen=True, slots=True)
class ConsumerGroup:
    """Named consumers of a Broadcast subscription whose virtual cursors stand at one place,
    saved together: each consumer acknowledges each entry, so most stand where the others
    do, and 10,000 of them save as a few groups, not 10,000 records."""

    mark_delete: Position | None
    individually_acked: list[Range]
    names: list[str]


_RECORDS_PER_WRITE = 1024
"""Records joined for one write of a batch (about 100 KB of Shared cursor saves)."""
NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})
"""A CursorState's properties when it has none (every state the broker takes): one read-only
empty mapping, not a dict of 64 B per cursor saved, 10,000 a second for the Shared baseline."""


@dataclass(frozen=True, slots=True)
class CursorState:
    """What one subscription's cursor keeps across a restart (Pulsar's PositionInfo and more).

    mark_delete is None until the subscription has a position; mode is the subscription type
    ("Exclusive", "Shared", "Failover", "Key_Shared", or the project's "Broadcast").
    `consumers` holds a Broadcast subscription's named virtual cursors, all of them, as one
    record beside the subscription's own; None when they are not part of this save (they
    did not change) or were never saved.
    """

    mark_delete: Position | None
    individually_acked: list[Range] = field(default_factory=list)
    properties: Mapping[str, str] = field(default_factory=dict)
    mode: str = "Exclusive"
    consumers: list[ConsumerGroup] | None = None


class CursorStore:
    """One topic's cursor log: ``<directory>/cursors.log``, append-only, one fsync per batch.

    Each `write` appends one record per deleted or saved subscription and fsyncs once (with
    sync_data), so a flush of 100,000 cursors costs one write and one fsync, not 100,000 of
    each: Pulsar likewise persists mark-deletes to a cursor ledger, not a file per cursor.
    Records are ``[u32 length][u32 crc32c(body)][body]`` (big-endian, as the ledgers frame
    theirs), bodies as `_encode_save` / `_encode_delete` write them. Replaying the log
    (`load_all`), the last record of a subscription wins and a delete record removes it; a torn
    or corrupt tail (a crash mid-append) is cut at the first bad record, keeping every whole
    record before it, and logged. A failed append is cut back, so the log holds the old state.

    Tombstones: a damaged log falls back on the previous generation for the subscriptions it
    lacks, so a deleted subscription must not look merely missing (issue 27: it came back). A
    delete record therefore stays in the log until the previous generation itself records the
    deletion: a compaction that keeps the log it replaces as PREVIOUS_NAME drops them (that log
    holds them), one that keeps the older generation writes them into the new snapshot.

    Compaction: once the log is larger than COMPACT_FACTOR times one snapshot of the live
    states (and COMPACT_FLOOR_BYTES), it is rewritten as that snapshot (temporary file, fsync,
    rename, directory fsync), so it never grows without bound. The store keeps each live
    subscription's last record in memory for this (tens of bytes each).

    Upgrade: the previous layout, one ``<percent-encoded name>.json`` per subscription, is read
    at the first load, written into the log as a snapshot, and then removed.

    Threading: one writer at a time (LedgerStorage.flush_cursors holds a lock), on any thread.
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
        self.path = self.directory / LOG_NAME
        self._sync_data = sync_data
        self._fsync = fsync
        self._records: dict[str, bytes] | None = None
        """Each live subscription's last whole record, as written; None until loaded."""
        self._consumer_records: dict[str, bytes] = {}
        """Each live Broadcast subscription's last record of its consumers' cursors."""
        self._tombstones: dict[str, bytes] = {}
        """Delete records the previous generation may not know of: each subscription deleted
        (and not saved again) since the last compaction that kept the log as PREVIOUS_NAME."""
        self._live_bytes = 0
        """Size of a snapshot: the sum of those records."""
        self._log_bytes = 0
        """Size of the log: where the next record goes."""
        self.truncated_bytes = 0
        """Bytes cut from a torn tail at the last load (0 after a clean shutdown)."""
        self.damaged_records = 0
        """Damaged records skipped inside the log at the last load."""
        self.restored_from_previous: list[str] = []
        """Subscriptions read from the previous generation at the last load."""
        self.compactions = 0

    # -- writing -----------------------------------------------------------------------------

    def write(self, saves: Iterable[tuple[str, CursorState]], deletes: Iterable[str] = ()) -> None:
        """Append deletes, then saves, as one batch: one write, one fsync (with sync_data).

        Raises what the disk raised, with the log cut back to where it was: nothing of the
        batch counts, and writing it again is safe.
        """
        records = self._loaded()
        saves = list(saves)
        batch: list[tuple[str, bytes | None]] = [(n, None) for n in deletes]
        batch += [(name, _encode_save(name, state)) for name, state in saves]
        consumer_batch = [
            (name, _encode_consumers(name, state.consumers))
            for name, state in saves
            if state.consumers is not None
        ]
        if not batch:
            return
        self._append(
            [_encode_delete(name) if r is None else r for name, r in batch]
            + [record for _, record in consumer_batch]
        )
        live = self._live_bytes
        for name, record in batch:
            old = records.pop(name, None) if record is None else records.get(name)
            if old is not None:
                live -= len(old)
            if record is None:
                live -= len(self._consumer_records.pop(name, b""))
                self._tombstones[name] = _encode_delete(name)
            else:
                records[name] = record
                live += len(record)
                self._tombstones.pop(name, None)
        for name, record in consumer_batch:
            live += len(record) - len(self._consumer_records.get(name, b""))
            self._consumer_records[name] = record
        self._live_bytes = live
        if self._log_bytes > max(COMPACT_FLOOR_BYTES, COMPACT_FACTOR * live):
            try:
                self.compact()
            except OSError:
                # The batch is in the log already; the next write tries compacting again.
                log.exception("compacting %s failed", self.path)

    def save(self, subscription: str, state: CursorState) -> None:
        """Save one subscription's state (a batch of one: prefer `write` for many)."""
        self.write([(subscription, state)])

    def delete(self, subscription: str) -> None:
        """Forget a subscription's state; deleting one that was never saved is not an error."""
        self.write((), [subscription])

    def compact(self, keep_previous: bool = True) -> None:
        """Rewrite the log as one snapshot of the live states: temporary file, rename; the log
        it replaces becomes the previous generation (unless `keep_previous` is False: after a
        damaged load, the generation to keep is the one already there, and the tombstones of
        the subscriptions deleted since it was written go into the snapshot)."""
        records = self._loaded()
        data = b"".join(records.values()) + b"".join(self._consumer_records.values())
        if not keep_previous:
            data += b"".join(self._tombstones.values())
        temporary = self.path.with_name(LOG_NAME + ".tmp")
        try:
            with temporary.open("wb") as file:
                file.write(data)
                file.flush()
                if self._sync_data:
                    self._fsync(file.fileno())
            if keep_previous and self.path.exists():
                os.replace(self.path, self.path.with_name(PREVIOUS_NAME))
            os.replace(temporary, self.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        self._log_bytes = len(data)  # the next append goes here, even if the fsync below fails
        if keep_previous:
            self._tombstones.clear()  # the previous generation, the log replaced, holds them
        self.compactions += 1
        self._sync_directory()

    def _append(self, records: list[bytes]) -> None:
        """Write `records` at the end of the log, then fsync once: joined a slice at a time,
        not into one copy of the whole batch (the Shared baseline saves 10,000 cursors a
        second: one copy was another 115 B a subscription of the broker's peak)."""
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        size = 0
        try:
            try:
                os.lseek(fd, self._log_bytes, os.SEEK_SET)
                for at in range(0, len(records), _RECORDS_PER_WRITE):
                    data = b"".join(records[at : at + _RECORDS_PER_WRITE])
                    size += len(data)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                if self._sync_data:
                    self._fsync(fd)
            except BaseException:
                # Cut the batch back off: a later load must not see half of it, or all of it
                # after a failed fsync (its pages may reach the disk anyway).
                with suppress(OSError):
                    os.ftruncate(fd, self._log_bytes)
                raise
        finally:
            os.close(fd)
        self._log_bytes += size
        if created:
            self._sync_directory()

    # -- reading -----------------------------------------------------------------------------

    def load_all(self) -> dict[str, CursorState]:
        """Every saved subscription's state, read from the disk (replaying the log).

        A torn tail is cut (see `truncated_bytes`); a damaged record inside the log is skipped
        (the records after it kept) and, for the subscriptions it may have held, the previous
        generation (PREVIOUS_NAME) is read instead, then the log is compacted clean; leftover
        temporary files of a crash are ignored; subscriptions of the old one-file-each layout
        are moved into the log.
        """
        legacy = _load_legacy(self.directory)
        previous = self.path.with_name(PREVIOUS_NAME)
        if not self.path.exists() and previous.exists():
            # A crash between a compaction's two renames: the previous generation is the log.
            log.warning("%s: missing, reading the previous generation %s", self.path, previous)
            os.replace(previous, self.path)
        states, records, consumer_records, whole, size, damaged, deleted = _replay(self.path)
        if whole < size:
            self.truncated_bytes = size - whole
            log.warning(
                "%s: cut a torn tail of %d bytes at offset %d, after %d whole records: "
                "acks in it since the subscriptions' earlier records will be redelivered",
                self.path,
                size - whole,
                whole,
                len(records),
            )
            os.truncate(self.path, whole)
            if self._sync_data:
                fsync_path(self.path, self._fsync)
        if damaged:
            self.damaged_records = len(damaged)
            log.warning(
                "%s: skipped %d damaged records (at byte offsets %s), kept every whole record "
                "after them",
                self.path,
                len(damaged),
                ", ".join(map(str, damaged[:20])),
            )
        if (damaged or whole < size) and previous.exists():
            old_states, old_records, old_consumers, *_ = _replay(previous)
            # A subscription the log deleted stays deleted: only what it lost comes back.
            restored = sorted(set(old_states) - set(states) - set(deleted))
            for name in restored:
                states[name] = old_states[name]
                records[name] = old_records[name]
                if name in old_consumers:
                    consumer_records[name] = old_consumers[name]
            if restored:
                self.restored_from_previous = restored
                log.warning(
                    "%s: %d subscriptions read from the previous generation (their newer "
                    "acks are redelivered): %s",
                    self.path,
                    len(restored),
                    ", ".join(map(repr, restored[:20])),
                )
        self._records = records
        self._consumer_records = consumer_records
        self._tombstones = {name: _encode_delete(name) for name in deleted}
        self._live_bytes = self._snapshot_bytes()
        self._log_bytes = whole
        self.path.with_name(LOG_NAME + ".tmp").unlink(missing_ok=True)
        if damaged:
            self.compact(keep_previous=False)  # the damage is not read again at the next load
        if legacy:
            # The log is newer than any old file left over (a crash while they were removed).
            for name, state in legacy.items():
                if name not in states:
                    states[name] = state
                    records[name] = _encode_save(name, state)
            self._live_bytes = self._snapshot_bytes()
            self.compact()
            for path in self.directory.glob("*.json*"):
                path.unlink()
            self._sync_directory()
            log.info("%s: moved %d cursor files into %s", self.directory, len(legacy), LOG_NAME)
        return states

    def _snapshot_bytes(self) -> int:
        assert self._records is not None
        return sum(map(len, self._records.values())) + sum(
            map(len, self._consumer_records.values())
        )

    def _loaded(self) -> dict[str, bytes]:
        if self._records is None:
            self.load_all()
        assert self._records is not None
        return self._records

    def _sync_directory(self) -> None:
        if self._sync_data:
            fsync_path(self.directory, self._fsync)


# -- replaying ------------------------------------------------------------------------------------

_Replayed = tuple[
    dict[str, CursorState], dict[str, bytes], dict[str, bytes], int, int, list[int], set[str]
]


def _replay(path: Path) -> _Replayed:
    """(states, records, consumer records, end of the last whole record, file size, offsets
    of damaged records skipped, names whose last record is a delete). A record that fails its
    checksum or does not decode is skipped when whole records follow it (found as the ledgers
    find them), else it starts the torn tail."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, {}, {}, 0, 0, [], set()
    states: dict[str, CursorState] = {}
    records: dict[str, bytes] = {}
    consumers: dict[str, list[ConsumerGroup]] = {}
    consumer_records: dict[str, bytes] = {}
    damaged: list[int] = []
    deleted: set[str] = set()
    offset, size = 0, len(data)
    while offset < size:
        decoded = _record_at(data, offset, size)
        if decoded is None:
            resume = _resync(data, offset, size)
            if resume is None:
                break
            damaged.append(offset)
            offset = resume
            continue
        end, (name, state) = decoded
        if isinstance(state, list):
            consumers[name] = state
            consumer_records[name] = data[offset:end]
        elif state is None:
            states.pop(name, None)
            records.pop(name, None)
            consumers.pop(name, None)
            consumer_records.pop(name, None)
            deleted.add(name)
        else:
            assert isinstance(state, CursorState)
            states[name] = state
            records[name] = data[offset:end]
            deleted.discard(name)
        offset = end
    for name in list(consumer_records):
        if name not in states:  # consumers of a subscription that is gone
            del consumer_records[name]
    for name, groups in consumers.items():
        if name in states:
            states[name] = replace(states[name], consumers=groups)
    return states, records, consumer_records, offset, size, damaged, deleted


_Decoded = tuple[str, CursorState | list[ConsumerGroup] | None]


def _record_at(data: bytes, offset: int, size: int) -> tuple[int, _Decoded] | None:
    """(end, decoded record) of a whole, readable record at offset, else None."""
    if offset + _HEADER.size > size:
        return None
    length, crc = _HEADER.unpack_from(data, offset)
    end = offset + _HEADER.size + length
    if (
        length < _NAME.size  # zeros, as a file system may leave after a crash
        or end > size
        or crc32c.crc32c(data[offset + _HEADER.size : end]) != crc
    ):
        return None
    try:
        return end, _decode(data, offset + _HEADER.size, end)
    except (ValueError, struct.error, UnicodeDecodeError) as error:
        log.error("cursor record at %d: checksum right and unreadable: %s", offset, error)
        return None


def _resync(data: bytes, offset: int, size: int) -> int | None:
    """Where readable records start again after a bad one at offset; None: a torn tail."""
    if offset + _HEADER.size <= size:
        (length,) = _LENGTH.unpack_from(data, offset)
        candidate = offset + _HEADER.size + length
        if candidate < size and _record_at(data, candidate, size) is not None:
            return candidate
    for candidate in range(offset + 1, size - _HEADER.size - _NAME.size + 1):
        found = _record_at(data, candidate, size)
        if found is not None and (found[0] == size or _record_at(data, found[0], size)):
            return candidate
    return None


# -- records -------------------------------------------------------------------------------------


def _frame(body: bytes) -> bytes:
    return _HEADER.pack(len(body), crc32c.crc32c(body)) + body


def _encode_save(name: str, state: CursorState) -> bytes:
    """A whole save record. Body: ``[u8 1][u32 n][name][u8 flags][u8 m][i64 ledger][i64
    entry][u32 r][mode][r × 4 i64: start, end of each range]`` then, when flags say so,
    ``[u32 p][properties as JSON]``; the acked ranges capped at MAX_UNACKED_RANGES_TO_PERSIST.
    """
    name_bytes = name.encode()
    mode = _MODES.get(state.mode)
    if mode is None:
        mode = _MODES.setdefault(state.mode, state.mode.encode())
    mark = state.mark_delete
    ranges = state.individually_acked
    if len(ranges) > MAX_UNACKED_RANGES_TO_PERSIST:
        ranges = ranges[:MAX_UNACKED_RANGES_TO_PERSIST]
    flags = 0 if mark is None else _HAS_MARK
    if state.properties:
        flags |= _HAS_PROPERTIES
    parts = [
        _NAME.pack(_SAVE, len(name_bytes)),
        name_bytes,
        _STATE.pack(flags, len(mode), *(mark or (0, 0)), len(ranges)),
        mode,
    ]
    if ranges:
        flat = [n for start, end in ranges for n in (*start, *end)]
        parts.append(struct.pack(f">{len(flat)}q", *flat))
    if state.properties:
        encoded = json.dumps(dict(state.properties), separators=(",", ":")).encode()
        parts += (_LENGTH.pack(len(encoded)), encoded)
    return _frame(b"".join(parts))


def _encode_consumers(name: str, groups: list[ConsumerGroup]) -> bytes:
    """A subscription's consumer cursors: ``[u8 3][u32 n][name][u32 g]`` then per group
    ``[u8 flags][i64 ledger][i64 entry][u32 r][r × 4 i64][u8 encoding][u32 count][u32 b][b
    bytes of names]``, the ranges capped at MAX_UNACKED_RANGES_TO_PERSIST."""
    name_bytes = name.encode()
    parts = [_NAME.pack(_CONSUMERS, len(name_bytes)), name_bytes, _LENGTH.pack(len(groups))]
    for group in groups:
        mark = group.mark_delete
        ranges = group.individually_acked[:MAX_UNACKED_RANGES_TO_PERSIST]
        parts.append(_GROUP.pack(0 if mark is None else _HAS_MARK, *(mark or (0, 0)), len(ranges)))
        if ranges:
            flat = [n for start, end in ranges for n in (*start, *end)]
            parts.append(struct.pack(f">{len(flat)}q", *flat))
        joined = "\x00".join(group.names)
        if joined.count("\x00") == len(group.names) - 1:
            encoding, blob = _JOINED, joined.encode()
        else:
            encoding = _PREFIXED
            blob = b"".join(_LENGTH.pack(len(b)) + b for b in (n.encode() for n in group.names))
        parts += (_NAMES.pack(encoding, len(group.names), len(blob)), blob)
    return _frame(b"".join(parts))


def _encode_delete(name: str) -> bytes:
    name_bytes = name.encode()
    return _frame(_NAME.pack(_DELETE, len(name_bytes)) + name_bytes)


def _decode(data: bytes, offset: int, end: int) -> _Decoded:
    """(name, state) of the record body data[offset:end]: the state None for a delete, a list
    of groups for a record of consumer cursors."""
    kind, length = _NAME.unpack_from(data, offset)
    offset += _NAME.size
    name = data[offset : offset + length].decode()
    offset += length
    state: CursorState | list[ConsumerGroup] | None
    if kind == _CONSUMERS:
        state, offset = _decode_groups(data, offset)
    elif kind == _DELETE:
        state = None
    elif kind == _SAVE:
        flags, mode_length, ledger_id, entry_id, count = _STATE.unpack_from(data, offset)
        offset += _STATE.size
        mode = data[offset : offset + mode_length].decode()
        offset += mode_length
        flat = struct.unpack_from(f">{4 * count}q", data, offset)
        offset += 32 * count
        properties = {}
        if flags & _HAS_PROPERTIES:
            (length,) = _LENGTH.unpack_from(data, offset)
            offset += _LENGTH.size
            properties = dict(json.loads(data[offset : offset + length]))
            offset += length
        state = CursorState(
            Position(ledger_id, entry_id) if flags & _HAS_MARK else None,
            [
                (Position(flat[i], flat[i + 1]), Position(flat[i + 2], flat[i + 3]))
                for i in range(0, len(flat), 4)
            ],
            properties,
            mode,
        )
    else:
        raise ValueError(f"unknown record kind {kind}")
    if offset != end:
        raise ValueError(f"record of {end - offset} bytes more or less than its fields")
    return name, state


def _decode_groups(data: bytes, offset: int) -> tuple[list[ConsumerGroup], int]:
    (count,) = _LENGTH.unpack_from(data, offset)
    offset += _LENGTH.size
    groups = []
    for _ in range(count):
        flags, ledger_id, entry_id, ranges = _GROUP.unpack_from(data, offset)
        offset += _GROUP.size
        flat = struct.unpack_from(f">{4 * ranges}q", data, offset)
        offset += 32 * ranges
        encoding, n, size = _NAMES.unpack_from(data, offset)
        offset += _NAMES.size
        blob = data[offset : offset + size]
        offset += size
        if encoding == _JOINED:
            names = blob.decode().split("\x00") if n else []
        elif encoding == _PREFIXED:
            names, at = [], 0
            for _ in range(n):
                (length,) = _LENGTH.unpack_from(blob, at)
                names.append(blob[at + _LENGTH.size : at + _LENGTH.size + length].decode())
                at += _LENGTH.size + length
        else:
            raise ValueError(f"unknown name encoding {encoding}")
        if len(names) != n:
            raise ValueError(f"a group of {n} consumers holds {len(names)} names")
        groups.append(
            ConsumerGroup(
                Position(ledger_id, entry_id) if flags & _HAS_MARK else None,
                [
                    (Position(flat[i], flat[i + 1]), Position(flat[i + 2], flat[i + 3]))
                    for i in range(0, len(flat), 4)
                ],
                names,
            )
        )
    return groups, offset


# -- the previous layout: one JSON file per subscription -------------------------------------


def _load_legacy(directory: Path) -> dict[str, CursorState]:
    """States of ``<percent-encoded name>.json`` files (leftover ``*.tmp`` files ignored)."""
    states = {}
    for path in directory.glob("*.json"):
        try:
            states[unquote(path.name.removesuffix(".json"))] = _decode_json(path.read_bytes())
        except (ValueError, KeyError, TypeError) as error:
            # One unreadable file must not make the topic unusable: that subscription starts
            # again as new (its consumers' initial position), the others keep theirs.
            log.error("skipped an unreadable cursor file %s: %s", path, error)
    return states


def _decode_json(raw: bytes) -> CursorState:
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
    """Cursor states to write, snapshotted where the cursors live (the event loop); `apply`
    runs where blocking on the disk is fine (a thread). Deletes go first, so a subscription
    deleted and created again under the same name ends up saved."""

    store: CursorStore
    saves: list[tuple[str, CursorState]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)

    def apply(self) -> None:
        self.store.write(self.saves, self.deletes)


class ThrottledCursorWriter:
    """Persist each changed cursor at most once per interval (Pulsar's default: once a second).

    Marking a cursor dirty is cheap and keeps only a function of its latest state. `take` (on
    the loop, where that function may run) snapshots what is due; `CursorWrites.apply` writes
    it, as one batch. `tick` and `flush_all` do both in one place, for callers that may block.
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

    def pending(self) -> bool:
        """Whether a change waits to be written (a save or a delete)."""
        return bool(self._dirty or self._deletes)

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
            if name in self._deletes:
                continue
            newer = self._dirty.get(name)
            if newer is None:
                self._dirty[name] = _constant(state)
            elif state.consumers is not None:
                # The newer state may leave the consumers out (unchanged since): keep these.
                self._dirty[name] = _with_consumers_of(state, newer)
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


def _with_consumers_of(
    older: CursorState, newer: Callable[[], CursorState]
) -> Callable[[], CursorState]:
    """The newer state, with the older one's consumer cursors if it has none of its own."""

    def state() -> CursorState:
        latest = newer()
        return (
            latest if latest.consumers is not None else replace(latest, consumers=older.consumers)
        )

    return state
