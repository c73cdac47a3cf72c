"""Where a topic's entries live: in memory (non-persistent) or in ledgers behind the journal.

Cursors count entries by `index`, a dense sequence over the topic's life; message ids
(ledger_id, entry_id) are derived. Both logs keep a tailing window in memory, because fan-out
readers all sit near the tail; the ledger log serves older entries from disk.
"""

from __future__ import annotations

import time
from typing import Protocol

from broker.core.entry import Entry
from broker.wire.payload import message_count


def now_us() -> int:
    return time.time_ns() // 1000


class EntryLog(Protocol):
    first_index: int
    next_index: int

    async def append(
        self, payload: bytes, key: bytes, received_us: int, publish_ms: int
    ) -> Entry: ...

    def read(self, start: int, limit: int) -> list[Entry]: ...

    def index_of(self, ledger_id: int, entry_id: int) -> int: ...

    def trim_before(self, index: int) -> None: ...

    def close(self) -> None: ...


class MemoryEntryLog:
    """Non-persistent topics: 'durable' once appended, trimmed behind the slowest cursor."""

    def __init__(self, ledger_id: int = 0) -> None:
        self._ledger_id = ledger_id
        self._entries: list[Entry] = []
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
        self.next_index += 1
        return entry

    def read(self, start: int, limit: int) -> list[Entry]:
        lo = max(start, self.first_index) - self.first_index
        return self._entries[lo : lo + limit]

    def index_of(self, ledger_id: int, entry_id: int) -> int:
        return entry_id

    def trim_before(self, index: int) -> None:
        drop = min(index, self.next_index) - self.first_index
        if drop > 0:
            del self._entries[:drop]
            self.first_index += drop

    def close(self) -> None:
        self._entries.clear()
