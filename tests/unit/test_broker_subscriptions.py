"""Subscription logic without sockets: a fake wire collects what each consumer is sent."""

from __future__ import annotations

import asyncio

import pytest

from broker.core.consumer import Consumer
from broker.core.entry_log import MemoryEntryLog
from broker.core.topic import Topic
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.frames import FrameDecoder
from pulsar_protocol.payload import encode_payload


class FakeWire:
    writable = True
    sends_broker_entry_metadata = True

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.changes: list[tuple[int, bool]] = []

    def write_frames(self, frames: list[bytes]) -> None:
        self.decoder.receive_data(b"".join(frames))

    def received(self) -> list[tuple[int, int]]:
        """(consumer id, entry id) of every MESSAGE so far."""
        return [
            (f.command.message.consumer_id, f.command.message.message_id.entryId)
            for f in self.decoder.frames()
        ]

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None:
        self.changes.append((consumer_id, active))

    def consumer_closed_by_broker(self, consumer_id: int) -> None:
        pass


SECTION = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"body"
)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _settle(loop) -> None:
    loop.run_until_complete(asyncio.sleep(0.01))


def _publish(loop, topic: Topic, n: int) -> None:
    for _ in range(n):
        loop.run_until_complete(topic.publish(SECTION, b"", 1, 1))
    _settle(loop)


def _consumer(wire, cid, name=None, permits=1000) -> Consumer:
    return Consumer(consumer_id=cid, name=name or f"c{cid}", wire=wire, permits=permits)


def test_broadcast_slow_consumer_does_not_hold_back_others_and_main_cursor_is_the_slowest(loop):
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    wire = FakeWire()
    fast, slow = _consumer(wire, 1), _consumer(wire, 2, permits=2)
    sub.add_consumer(fast)
    sub.add_consumer(slow)
    _publish(loop, topic, 5)
    got = wire.received()
    assert [e for c, e in got if c == 1] == [0, 1, 2, 3, 4]
    assert [e for c, e in got if c == 2] == [0, 1]
    sub.on_ack(fast, True, [4])
    sub.on_ack(slow, True, [1])
    assert sub.slowest_mark_delete == 1
    assert sub.backlog() == 3
    sub.on_flow(slow, 10)
    _settle(loop)
    assert [e for c, e in wire.received() if c == 2] == [2, 3, 4]
    sub.on_ack(slow, True, [4])
    assert sub.slowest_mark_delete == 4


def test_broadcast_flow_serves_only_the_consumer_that_sent_it(loop):
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    wires = [FakeWire() for _ in range(3)]
    consumers = [_consumer(w, i, permits=0) for i, w in enumerate(wires)]
    for c in consumers:
        sub.add_consumer(c)
    _publish(loop, topic, 2)
    sub.on_flow(consumers[1], 5)
    assert sub._targets == {consumers[1]}  # the next round is this consumer, not all three
    _settle(loop)
    assert [len(w.received()) for w in wires] == [0, 2, 0]


def test_shared_rewind_skips_entries_already_acked_individually(loop):
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("s", "Shared", initial_earliest=False)
    wire = FakeWire()
    first = _consumer(wire, 1)
    sub.add_consumer(first)
    _publish(loop, topic, 4)
    assert [e for _, e in wire.received()] == [0, 1, 2, 3]
    sub.on_ack(first, False, [1, 2, 3])  # entry 0 stays unacked: a hole
    sub.remove_consumer(first)
    second = _consumer(wire, 2)
    sub.add_consumer(second)
    _settle(loop)
    assert wire.received() == [(2, 0)]
    _publish(loop, topic, 1)
    assert wire.received() == [(2, 4)]


def test_failover_switches_and_tells_everyone_who_is_active(loop):
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("f", "Failover", initial_earliest=False)
    wire = FakeWire()
    a, b = _consumer(wire, 1, "a"), _consumer(wire, 2, "b")
    sub.add_consumer(b)
    sub.add_consumer(a)
    _publish(loop, topic, 2)
    assert {c for c, _ in wire.received()} == {1}
    assert wire.changes[-2:] == [(2, False), (1, True)]
    sub.remove_consumer(a)
    _settle(loop)
    assert wire.received() == [(2, 0), (2, 1)]


def test_failover_rewind_with_small_permits_steps_over_acked_entries(loop):
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("f", "Failover", initial_earliest=False)
    wire = FakeWire()
    a = _consumer(wire, 1, "a")
    sub.add_consumer(a)
    _publish(loop, topic, 4)
    assert len(wire.received()) == 4
    sub.on_ack(a, False, [1])  # 0, 2 and 3 stay unacknowledged
    b = _consumer(wire, 2, "b", permits=1)
    sub.add_consumer(b)
    sub.remove_consumer(a)
    _settle(loop)
    assert wire.received() == [(2, 0)]
    sub.on_flow(b, 1)
    _settle(loop)
    assert wire.received() == [(2, 2)]  # entry 1 was acked: skipped, not read forever
    sub.on_flow(b, 1)
    _settle(loop)
    assert wire.received() == [(2, 3)]
