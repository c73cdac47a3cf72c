"""Where a topic's entries live: in memory (non-persistent) or in ledgers behind the journal.

Cursors count entries by `index`, a dense sequence over the topic's life; message ids
(ledger_id, entry_id) are derived. Both logs keep a tailing window in memory, because fan-out
readers all sit near the tail; the ledger log serves older entries from disk.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Protocol

from broker.core.entry import Entry
from pulsar_protocol.extensions import now_us
from pulsar_protocol.payload import message_count


class EntryLog(Protocol):
    first_index: int
    next_index: int

    async def append(
        self, payload: bytes, key: bytes, received_us: int, publish_ms: int
    ) -> Entry: ...

    def read(self, start: int, limit: int) -> list[Entry]: ...

    def index_of(self, ledger_id: int, entry_id: int) -> int: ...

    def position_of(self, index: int) -> tuple[int, int]: ...

    def trim_before(self, index: int) -> None: ...

    def close(self) -> None: ...


class MemoryEntryLog:
    """Non-persistent topics: 'durable' once appended, trimmed behind the slowest cursor."""

    def __init__(self, ledger_id: int = 0, max_bytes: int = 256 * 1024 * 1024) -> None:
        self._ledger_id = ledger_id
        self._entries: deque[Entry] = deque()
        self._bytes = 0
        self._max_bytes = max_bytes
        self.first_index = 0
        self.next_index = 0

    async def append(self, payload: bytes, key: bytes, received_us: int, publish_ms: int) -> Entry:
        start = now_us()
        entry = Entry(
            index=self.next_index,
            ledger_id=self._ledger_id,
            entry_id=self.next_index,
            payload=payload,
            num_messages=message_count(payload),
            key=key,
            received_us=received_us,
            persist_start_us=start,
            durable_us=start,
            publish_time_ms=publish_ms,
        )
        self._entries.append(entry)
        self._bytes += len(payload)
        self.next_index += 1
        # A stalled consumer must not grow broker memory without bound: past the cap the oldest
        # entries go, and readers behind them skip ahead, as Pulsar drops non-persistent
        # messages a consumer cannot take.
        while self._bytes > self._max_bytes and len(self._entries) > 1:
            self._bytes -= len(self._entries.popleft().payload)
            self.first_index += 1
        return entry

    def read(self, start: int, limit: int) -> list[Entry]:
        lo = max(start, self.first_index) - self.first_index
        return list(itertools.islice(self._entries, lo, lo + limit))

    async def publish_time_at(self, index: int) -> int | None:
        """The producer's publish time (ms) of the entry at `index`; None when it is gone
        (broker.core.positions: seek by publish time)."""
        found = self.read(index, 1)
        return found[0].publish_time_ms if found and found[0].index == index else None

    def index_of(self, ledger_id: int, entry_id: int) -> int:
        return entry_id

    def position_of(self, index: int) -> tuple[int, int]:
        return self._ledger_id, index

    def trim_before(self, index: int) -> None:
        drop = min(index, self.next_index) - self.first_index
        for _ in range(max(0, drop)):
            self._bytes -= len(self._entries.popleft().payload)
            self.first_index += 1

    def close(self) -> None:
        self._entries.clear()
