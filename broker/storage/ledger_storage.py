"""Persistent topics on the storage layer: ledgers behind the group-commit journal, cursors
saved at most once per interval to one log per topic (``<topic>/cursors/cursors.log``, see
broker.storage.cursors.CursorStore). Adapts broker.storage to the core's EntryLog
(LedgerEntryLog) and to the topic's CursorSink (LedgerStorage).

Cursors count entries by a dense index; the ledger table here maps index ↔ (ledger, entry).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from broker.config import BrokerConfig
from broker.core.entry import Entry
from broker.core.topic import SavedCursors
from broker.storage.cursors import (
    MAX_UNACKED_RANGES_TO_PERSIST,
    NO_PROPERTIES,
    ConsumerGroup,
    CursorState,
    CursorStore,
    CursorWrites,
    Range,
    ThrottledCursorWriter,
)
from broker.storage.journal import Journal
from broker.storage.ledger import ManagedLedger
from broker.storage.persist_health import CursorPersistence
from broker.storage.position import Position
from broker.storage.schema_store import SchemaStore
from broker.subscriptions.subscription import Subscription
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import is_batch, payload_offsets

log = logging.getLogger("broker.storage")

MAX_FOLDER_NAME = 255
"""Bytes in one file name on Linux file systems (NAME_MAX); a topic's folder is its quoted name."""
MiB = 1024 * 1024
CATCH_UP_BATCH = 500
EARLIEST = Position(-1, -1)
_NO_RANGES: list[Range] = []
"""Shared by every snapshot without holes, never mutated: one object fewer per snapshot for
the garbage collector to track (100,000 a second at the seed's baseline)."""
NO_RETENTION = (0, 0)
TICKS_PER_INTERVAL = 10
"""The cursor writer is ticked this often per persist interval: a cursor changed just after
its last save waits one interval, plus at most a tick."""


def _entry_facts(payload: bytes) -> tuple[int, bytes, int]:
    """(messages, key, publish ms) from a stored payload section, for entries read back."""
    meta_start, data_start = payload_offsets(payload, verify=False)
    meta = pb.MessageMetadata()
    meta.ParseFromString(payload[meta_start:data_start])
    count = meta.num_messages_in_batch if is_batch(meta) else 1
    return count, meta.ordering_key or meta.partition_key.encode(), meta.publish_time


class LedgerEntryLog:
    def __init__(self, ledger: ManagedLedger, journal: Journal, cache_bytes: int) -> None:
        self.ledger = ledger
        self.journal = journal
        # Rows of (ledger_id, first index, entries) in ledger order.
        self._ids: list[int] = []
        self._rows: list[list[int]] = []
        self._lost = ledger.lost_entries()
        """Ledger id → entry ids of damaged records skipped at open. They have no index: the
        indexes step over them, so cursors (saved as positions) never land on other entries
        and never wait for an entry that cannot be read."""
        index = 0
        for ledger_id, count in ledger.ledger_sizes():
            count -= len(self._lost.get(ledger_id, ()))
            self._ids.append(ledger_id)
            self._rows.append([ledger_id, index, count])
            index += count
        self.first_index = self._rows[0][1] if self._rows else 0
        self.next_index = index
        self._cache: OrderedDict[int, Entry] = OrderedDict()
        # Entries read back for readers behind the tail live apart, so a catch-up never
        # evicts the tail that every other reader needs (nor its own batch).
        self._behind: OrderedDict[int, Entry] = OrderedDict()
        self._behind_bytes = 0
        self._loading: set[int] = set()
        self.on_readable: Callable[[], None] | None = None
        self._cache_bytes = 0
        self._cache_limit = cache_bytes
        self.retention: tuple[int, int] = NO_RETENTION
        """(retentionTimeInMinutes, retentionSizeInMB) in force, set by the topic policies;
        -1 is no limit of that kind, (0, 0) none: ledgers go as soon as every cursor is past."""

    async def append(self, payload: bytes, key: bytes, received_us: int, publish_ms: int) -> Entry:
        done = await self.journal.append(self.ledger, payload, received_us)
        pos = done.position
        if not self._ids or self._ids[-1] != pos.ledger_id:
            first = self._rows[-1][1] + self._rows[-1][2] if self._rows else self.next_index
            self._ids.append(pos.ledger_id)
            self._rows.append([pos.ledger_id, first, 0])
        row = self._rows[-1]
        row[2] = max(row[2], pos.entry_id + 1)
        index = row[1] + pos.entry_id
        self.next_index = max(self.next_index, index + 1)
        count, _, _ = _entry_facts(payload)
        entry = Entry(
            index,
            pos.ledger_id,
            pos.entry_id,
            payload,
            count,
            key,
            received_us,
            done.persist_start_us,
            done.durable_us,
            publish_time_ms=publish_ms,
        )
        self._remember(entry)
        return entry

    def _remember(self, entry: Entry) -> None:
        self._cache[entry.index] = entry
        self._cache_bytes += len(entry.payload)
        while self._cache_bytes > self._cache_limit and self._cache:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= len(old.payload)

    def position_of(self, index: int) -> Position:
        if not self._rows:
            return Position(0, index)
        ledger_id, first, _ = self._rows[-1]
        if index >= first and ledger_id not in self._lost:  # the current ledger: most cursors
            return Position(ledger_id, index - first)
        i = max(0, bisect.bisect_right([r[1] for r in self._rows], index) - 1)
        ledger_id, first, _ = self._rows[i]
        entry_id = index - first
        for lost in self._lost.get(ledger_id, ()):  # ascending: step over each one passed
            if lost > entry_id:
                break
            entry_id += 1
        return Position(ledger_id, entry_id)

    def index_of(self, ledger_id: int, entry_id: int) -> int:
        i = bisect.bisect_left(self._ids, ledger_id)
        if i < len(self._ids) and self._ids[i] == ledger_id:
            lost = self._lost.get(ledger_id) if self._lost else None
            if lost:
                # A lost entry's position names the last entry before it (a mark-delete there
                # acknowledges everything up to it, and no entry after).
                below = bisect.bisect_left(lost, entry_id)
                on_lost = below < len(lost) and lost[below] == entry_id
                return self._rows[i][1] + entry_id - below - on_lost
            return self._rows[i][1] + entry_id
        # An id we no longer (or never) had: before everything or after everything.
        return self.first_index - 1 if i == 0 else self.next_index

    async def publish_time_at(self, index: int) -> int | None:
        """The producer's publish time (ms) of the entry at `index`, from the cache or read
        back on a thread; None when it is gone (broker.core.positions: seek by time)."""
        if not self.first_index <= index < self.next_index:
            return None
        cached = self._cache.get(index) or self._behind.get(index)
        if cached is not None:
            return cached.publish_time_ms
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(None, self.ledger.read, self.position_of(index), 1)
        return _entry_facts(stored[0].data)[2] if stored else None

    def read(self, start: int, limit: int) -> list[Entry]:
        start = max(start, self.first_index)
        end = min(self.next_index, start + limit)
        out: list[Entry] = []
        index = start
        while index < end:
            entry = self._cache.get(index) or self._behind.get(index)
            if entry is None:
                break
            out.append(entry)
            index += 1
        if index < end and self._rows:
            self._fetch(index, self._catch_up_count())
        return out

    def _catch_up_count(self) -> int:
        """Entries per catch-up read: up to CATCH_UP_BATCH, and half of what fits aside."""
        sample = next(iter(self._cache.values()), None) or next(iter(self._behind.values()), None)
        size = len(sample.payload) if sample else 16 * 1024
        return max(1, min(CATCH_UP_BATCH, self._cache_limit // 4 // 2 // max(1, size)))

    def _fetch(self, index: int, count: int) -> None:
        """Catch-up read (a reader far behind the tail) on a thread, never on the event loop;
        readers get the entries from the cache once `on_readable` has called them back."""
        if index in self._loading:
            return
        self._loading.add(index)
        loop = asyncio.get_running_loop()
        position = self.position_of(index)
        future = loop.run_in_executor(None, self.ledger.read, position, count)
        future.add_done_callback(lambda f: self._fetched(index, f))

    def _fetched(self, index: int, future: asyncio.Future) -> None:
        self._loading.discard(index)
        if future.cancelled() or future.exception() is not None:
            log.error("catch-up read at index %d failed: %s", index, future.exception())
            return
        for stored in future.result():
            count, key, publish_ms = _entry_facts(stored.data)
            pos = stored.position
            idx = self.index_of(pos.ledger_id, pos.entry_id)
            # Read back from disk: no stage stamps (they describe a first dispatch only).
            entry = Entry(
                idx,
                pos.ledger_id,
                pos.entry_id,
                stored.data,
                count,
                key,
                stored.received_us,
                0,
                0,
                publish_time_ms=publish_ms,
            )
            if idx not in self._behind:
                self._behind[idx] = entry
                self._behind_bytes += len(entry.payload)
        while self._behind_bytes > self._cache_limit // 4 and self._behind:
            _, old = self._behind.popitem(last=False)
            self._behind_bytes -= len(old.payload)
        if self.on_readable is not None:
            self.on_readable()

    def trim_before(self, index: int) -> None:
        """Whole ledgers below the slowest cursor go (seed 001), unless retention keeps them."""
        if index <= self.first_index or not self._rows:
            return
        bound = self.position_of(min(index, self.next_index - 1))
        if self.retention != NO_RETENTION:
            bound = min(bound, self._retained_from(bound))
        deleted = set(self.ledger.delete_ledgers_before(bound))
        if deleted:
            keep = [r for r in self._rows if r[0] not in deleted]
            self._rows = keep
            self._ids = [r[0] for r in keep]
            self.first_index = keep[0][1] if keep else self.next_index

    def _retained_from(self, bound: Position) -> Position:
        """Where retention starts keeping ledgers that every cursor is past, as Pulsar's
        trimming decides: oldest first, a ledger goes when its last write is older than the
        retention time, or when what stays after it goes is still at least the retention size
        (-1: no limit of that kind); the first ledger that neither lets go is kept, with all
        after it."""
        minutes, megabytes = self.retention
        files = self.ledger.ledger_files()
        total = sum(size for _, _, size in files)
        freed = 0
        now = time.time()
        for ledger_id, path, size in files[:-1]:
            if ledger_id >= bound.ledger_id:
                break
            freed += size
            over_size = megabytes >= 0 and total - freed >= megabytes * MiB
            try:
                expired = minutes >= 0 and now - os.stat(path).st_mtime > minutes * 60
            except FileNotFoundError:
                expired = True
            if not (over_size or expired):
                return Position(ledger_id, 0)
        return bound

    def close(self) -> None:
        self.ledger.close()


def _indexes(
    entry_log: LedgerEntryLog, mark_delete: Position | None, ranges: list[Range]
) -> tuple[int, set[int]]:
    """A saved cursor's (mark-delete, individually acked) in the log's entry indexes."""
    mark = entry_log.first_index - 1 if mark_delete is None else entry_log.index_of(*mark_delete)
    acked: set[int] = set()
    for start, end in ranges:
        acked.update(range(entry_log.index_of(*start) + 1, entry_log.index_of(*end) + 1))
    return mark, acked


class StorageError(OSError):
    """Writing the data folder failed where the broker could not refuse a request instead (at
    shutdown): the message names the folder, the file system it is on and its free space."""

    def __init__(self, data_dir: Path, failures: list[str]) -> None:
        shown = "; ".join(failures[:5]) + (
            f"; and {len(failures) - 5} more" if failures[5:] else ""
        )
        super().__init__(f"writing {describe_disk(data_dir)} failed: {shown}")


def describe_disk(path: Path) -> str:
    """`path` (on the file system mounted at M, B bytes free): what a full disk needs said."""
    try:
        mount = path.resolve()
        while not os.path.ismount(mount) and mount != mount.parent:
            mount = mount.parent
        free = shutil.disk_usage(path).free
    except OSError:
        return str(path)
    return f"{path} (on the file system mounted at {mount}, {free:,} bytes free)"


class LedgerStorage:
    """All persistent topics of one broker: one journal, a ledger and cursor writer per topic.

    Implements broker.core.topic.CursorSink; cursors are snapshotted on the event loop and
    written on a thread, each at most once per managedLedgerCursorPositionPersistIntervalMs.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.root = Path(config.dataDir) / "topics"
        self.root.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(
            max_group_wait_ms=config.journalMaxGroupWaitMSec,
            sync_data=config.journalSyncData,
            max_group_bytes=config.journalBufferedWritesThreshold,
        )
        self.schemas = SchemaStore(
            Path(config.dataDir) / "schemas", sync_data=config.journalSyncData
        )
        """Topic schema histories (broker.core.schemas keeps them through it)."""
        self._interval_s = config.managedLedgerCursorPositionPersistIntervalMs / 1000
        self._writers: dict[str, ThrottledCursorWriter] = {}
        self.persistence: dict[str, CursorPersistence] = {}
        """Per topic: its cursor writes done and failed, and its back-off after a failure."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._logs: dict[str, LedgerEntryLog] = {}
        self._flushing: asyncio.Lock | None = None
        self._writing: asyncio.Future[Any] | None = None
        """The last write handed to a thread: a cancelled flush leaves it running there."""

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task = loop.create_task(self._persist_loop())

    def open_topic(self, name: str) -> tuple[LedgerEntryLog, SavedCursors]:
        """The topic's log and saved cursors. ValueError (InvalidTopicName to the client) for
        a name whose folder name would pass the file system's limit: refused, not failed."""
        folder = quote(name, safe="")
        if len(folder.encode()) > MAX_FOLDER_NAME:
            raise ValueError(
                f"topic name too long for persistent storage: its folder name would be "
                f"{len(folder.encode())} bytes, the limit is {MAX_FOLDER_NAME}"
            )
        directory = self.root / folder
        ledger = ManagedLedger.open(
            directory / "ledgers",
            max_entries_per_ledger=self.config.managedLedgerMaxEntriesPerLedger,
            cache_bytes=8 * MiB,
        )
        for found in ledger.recovery:
            log.warning("%s: recovery: %s", name, found.describe())
        entry_log = LedgerEntryLog(ledger, self.journal, self.config.managedLedgerCacheSizeMB * MiB)
        self._logs[name] = entry_log
        store = CursorStore(directory / "cursors", sync_data=self.config.journalSyncData)
        writer = self._writers[name] = ThrottledCursorWriter(store, self._interval_s)
        self.persistence[name] = CursorPersistence(name, self._interval_s, unsaved=writer.pending)
        cursors: SavedCursors = {}
        for sub_name, state in store.load_all().items():
            mark, acked = _indexes(entry_log, state.mark_delete, state.individually_acked)
            own = {}
            for group in state.consumers or ():
                at = _indexes(entry_log, group.mark_delete, group.individually_acked)
                own.update(dict.fromkeys(group.names, at))
            cursors[sub_name] = (state.mode, mark, acked, own)
        return entry_log, cursors

    def stored_topics(self) -> list[str]:
        """The names of the topics stored here, whether opened since the start or not: each
        topic folder (its quoted name) with its ledgers folder."""
        names = []
        with os.scandir(self.root) as entries:
            for entry in entries:
                if entry.is_dir() and os.path.isdir(os.path.join(entry.path, "ledgers")):
                    names.append(unquote(entry.name))
        return sorted(names)

    # -- CursorSink (called on the event loop) ---------------------------------------------------
    def moved(self, topic: str, subscription: Subscription) -> None:
        self._writers[topic].mark_dirty(subscription.name, _StateWhenDue(self, topic, subscription))

    def deleted(self, topic: str, subscription: str) -> None:
        writer = self._writers.get(topic)
        if writer is not None:
            writer.delete(subscription)

    def state(self, topic: str, sub: Subscription) -> CursorState:
        """Called for every due cursor, on the loop: a few µs, ranges only for holes."""
        entry_log = self._logs[topic]
        first = entry_log.first_index
        mark = sub.mark_delete  # first: for Broadcast, brings the main cursor up to date
        cursor = sub.cursor
        ranges = _NO_RANGES
        position_of = entry_log.position_of
        if cursor.acked:
            ranges = [
                (position_of(start) if start >= first else EARLIEST, position_of(end))
                for start, end in cursor.acked_ranges()[:MAX_UNACKED_RANGES_TO_PERSIST]
            ]
        groups = sub.dispatcher.consumer_cursors()
        consumers = None
        if groups is not None:
            consumers = [
                ConsumerGroup(
                    position_of(own_mark) if own_mark >= first else None,
                    [
                        (position_of(start) if start >= first else EARLIEST, position_of(end))
                        for start, end in own_ranges[:MAX_UNACKED_RANGES_TO_PERSIST]
                    ],
                    names,
                )
                for own_mark, own_ranges, names in groups
            ]
        return CursorState(
            entry_log.position_of(mark) if mark >= first else None,
            ranges,
            NO_PROPERTIES,
            sub.mode,
            consumers,
        )

    async def _persist_loop(self) -> None:
        """Never ends before close: a topic whose write fails is logged, counted and backed
        off (broker.storage.persist_health) while the others keep persisting."""
        while True:
            await asyncio.sleep(self._interval_s / TICKS_PER_INTERVAL)
            try:
                await self._flush(everything=False)
            except Exception:  # not a write (those are logged by topic): still, go on
                log.exception("saving cursors failed")

    async def flush_cursors(self, everything: bool = False) -> None:
        """Snapshot due cursors on the loop, write them on a thread; raises the first topic's
        write error (each is logged and counted, and its writes kept pending)."""
        failed = await self._flush(everything)
        if failed:
            raise failed[0]

    async def _flush(self, everything: bool) -> list[Exception]:
        """The write errors of the topics whose cursors could not be written.

        One write at a time: two would race on the same cursor log (appends at one offset,
        a compaction's temporary file replaced twice). A write outlives a cancelled caller on
        its thread, so the next one waits for it too."""
        if self._flushing is None:
            self._flushing = asyncio.Lock()
        async with self._flushing:
            if self._writing is not None and not self._writing.done():
                await asyncio.wait([self._writing])
            now = time.monotonic()
            persistence = self.persistence
            taken = [
                (name, w, w.take(everything))
                for name, w in self._writers.items()
                if everything or persistence[name].due(now)
            ]
            batches = [(name, w, ws) for name, w, ws in taken if ws.saves or ws.deletes]
            if not batches:
                return []
            for name, _, _ in batches:
                persistence[name].writing += 1

            def write() -> list[tuple[str, ThrottledCursorWriter, CursorWrites, Exception]]:
                failed = []
                for name, writer, writes in batches:
                    try:
                        writes.apply()
                    except Exception as error:  # this topic's alone: the others go on
                        failed.append((name, writer, writes, error))
                return failed

            def settle(done: asyncio.Future[Any]) -> None:
                # Here, not after the await: a cancelled caller must not drop the retries.
                failed = done.result()
                failed_names = {name for name, *_ in failed}
                at = time.monotonic()
                for name, writer, writes, error in failed:
                    writer.retry(writes)
                    persistence[name].record_failure(error, at)
                for name, _, _ in batches:
                    persistence[name].writing -= 1
                    if name not in failed_names:
                        persistence[name].record_success()

            self._writing = asyncio.get_running_loop().run_in_executor(None, write)
            self._writing.add_done_callback(settle)
            failed = await asyncio.shield(self._writing)
        return [error for *_, error in failed]

    async def close(self) -> None:
        """Write and sync what is left, then close every file. A step that fails (a full disk)
        does not skip the others: every ledger is still synced and closed, then StorageError
        names the data folder, its file system and each failure (issue 27)."""
        if self._task is not None:
            self._task.cancel()
        failures: list[str] = []
        try:
            await self.journal.close()
        except Exception as exc:  # noqa: BLE001 - every step runs; all are reported below
            failures.append(f"the journal's last writes: {exc}")
        try:
            await self.flush_cursors(everything=True)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"cursors: {exc}")
        for name, entry_log in self._logs.items():
            try:
                entry_log.ledger.sync()
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{name}: sync: {exc}")
            try:
                entry_log.close()
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{name}: close: {exc}")
        if failures:
            raise StorageError(Path(self.config.dataDir), failures)


class _StateWhenDue:
    """A changed cursor's state, for the writer to take when it saves it (the latest then). A
    slotted object of 56 bytes where a closure over the three was 300: held for every
    subscription acknowledged since the last save, each of the Shared baseline's."""

    __slots__ = ("storage", "topic", "subscription")

    def __init__(self, storage: LedgerStorage, topic: str, subscription: Subscription) -> None:
        self.storage = storage
        self.topic = topic
        self.subscription = subscription

    def __call__(self) -> CursorState:
        return self.storage.state(self.topic, self.subscription)
