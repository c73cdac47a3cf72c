"""Group commit across topics: one worker-thread write + fsync for many appends.

BookKeeper's journal groups the adds that arrive within journalMaxGroupWaitMSec (or until
journalBufferedWritesThreshold bytes) into one write and one fsync, and journalSyncData=false
skips the fsync (seed 002). This is the same for our ledgers: the event loop only queues; the
disk work of a whole group runs in one executor call, so the loop never waits on the disk.
While a group is being written the next one gathers, so a slow fsync yields bigger groups
rather than more of them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from broker.storage.ledger import ManagedLedger, MiB
from broker.storage.position import Position


def _realtime_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True, slots=True)
class Appended:
    """Where an entry landed, and when its group's write began and became durable (µs).

    The two times bound latency stage 3 (persistence) of the design doc.
    """

    position: Position
    persist_start_us: int
    durable_us: int


@dataclass(slots=True)
class _Pending:
    ledger: ManagedLedger
    data: bytes
    received_us: int
    future: asyncio.Future[Appended]


class Journal:
    """Group commit for every ledger it is given; it must be their only writer."""

    def __init__(
        self,
        *,
        max_group_wait_ms: float = 1.0,
        sync_data: bool = True,
        max_group_bytes: int = 4 * MiB,
        executor: Executor | None = None,
        fsync: Callable[[int], None] = os.fsync,
        clock_us: Callable[[], int] = _realtime_us,
    ) -> None:
        self._max_group_wait_s = max_group_wait_ms / 1000
        self._sync_data = sync_data
        self._max_group_bytes = max_group_bytes
        self._executor = executor
        self._fsync = fsync
        self._clock_us = clock_us
        self._group: list[_Pending] = []
        self._group_bytes = 0
        self._group_due = False
        self._timer: asyncio.TimerHandle | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    async def append(self, ledger: ManagedLedger, data: bytes, received_us: int) -> Appended:
        """Queue one entry for the next group; returns once that group is durable.

        Raises what the group's write raised (the broker answers SendError). Cancelling the
        caller does not withdraw the entry: it may still be written.
        """
        if self._closed:
            raise RuntimeError("journal is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Appended] = loop.create_future()
        self._group.append(_Pending(ledger, data, received_us, future))
        self._group_bytes += len(data)
        if self._group_bytes >= self._max_group_bytes:
            self._seal()
        elif len(self._group) == 1:
            self._timer = loop.call_later(self._max_group_wait_s, self._seal)
        return await future

    async def close(self) -> None:
        """Refuse new appends and flush what remains."""
        self._closed = True
        self._seal()
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    def _seal(self) -> None:
        """The open group is due (waited long enough, or full): flush it once the writer is free."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._group:
            return
        self._group_due = True
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_due_groups())

    async def _flush_due_groups(self) -> None:
        """Write due groups one at a time, which keeps each ledger's order."""
        try:
            while self._group and self._group_due:
                group = self._group
                self._group, self._group_bytes, self._group_due = [], 0, False
                await self._flush(group)
        finally:
            self._flusher = None

    async def _flush(self, group: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        try:
            positions, persist_start_us, durable_us = await loop.run_in_executor(
                self._executor, self._write, group
            )
        except Exception as error:
            for pending in group:
                if not pending.future.done():  # done: its caller was cancelled
                    pending.future.set_exception(error)
            return
        for pending, position in zip(group, positions, strict=True):
            if not pending.future.done():
                pending.future.set_result(Appended(position, persist_start_us, durable_us))

    def _write(self, group: list[_Pending]) -> tuple[list[Position], int, int]:
        """A group's disk work, in one worker thread: writes in append order, then fsyncs.

        On failure no entry of the group survives, so failing all its futures tells the truth.
        """
        ledgers = list(dict.fromkeys(pending.ledger for pending in group))
        persist_start_us = self._clock_us()
        try:
            positions = [
                pending.ledger.write(pending.data, pending.received_us) for pending in group
            ]
            if self._sync_data:
                for ledger in ledgers:
                    ledger.sync(self._fsync)
        except BaseException:
            for ledger in ledgers:
                ledger.discard_unconfirmed()
            raise
        durable_us = self._clock_us()
        for ledger in ledgers:
            ledger.confirm()
        return positions, persist_start_us, durable_us
