"""Non-persistent entries stay within their memory cap; readers behind it skip ahead."""

from __future__ import annotations

import asyncio

from broker.core.entry_log import MemoryEntryLog
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import encode_payload

SECTION = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"x" * 10_000
)


def _fill(log: MemoryEntryLog, n: int) -> None:
    async def go():
        for _ in range(n):
            await log.append(SECTION, b"", 1, 1)

    asyncio.run(go())


def test_a_stalled_reader_does_not_grow_memory_past_the_cap():
    log = MemoryEntryLog(max_bytes=50_000)
    _fill(log, 100)
    assert log.next_index == 100
    kept = log.read(0, 1000)
    assert sum(len(e.payload) for e in kept) <= 50_000
    # A reader at 0 gets the oldest entry still held, in order, to the tail.
    assert [e.index for e in kept] == list(range(log.first_index, 100))


def test_trim_before_drops_what_every_cursor_is_past():
    log = MemoryEntryLog()
    _fill(log, 10)
    log.trim_before(7)
    assert log.first_index == 7
    assert [e.index for e in log.read(0, 10)] == [7, 8, 9]
