"""Subscription logic without sockets: a fake wire collects what each consumer is sent."""

from __future__ import annotations

import asyncio

import pytest

from broker.core.consumer import NO_UNACKED, Consumer
from broker.core.entry_log import MemoryEntryLog
from broker.core.topic import NOTIFY_SLICE, Topic
from broker.subscriptions.broadcast import SLICE, BroadcastDispatcher
from broker.subscriptions.cursor import Cursor
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.frames import FrameDecoder
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.stamps import decode_stamps
from tests.doubles.quiet_wire import QuietWire


class FakeWire(QuietWire):
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
    assert sub.mark_delete == 1
    assert sub.backlog() == 3
    sub.on_flow(slow, 10)
    _settle(loop)
    assert [e for c, e in wire.received() if c == 2] == [2, 3, 4]
    sub.on_ack(slow, True, [4])
    assert sub.mark_delete == 4


def test_broadcast_flow_serves_only_the_consumer_that_sent_it(loop):
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    wires = [FakeWire() for _ in range(3)]
    consumers = [_consumer(w, i, permits=0) for i, w in enumerate(wires)]
    for c in consumers:
        sub.add_consumer(c)
    _publish(loop, topic, 2)
    sub.on_flow(consumers[1], 5)
    dispatcher = sub.dispatcher
    assert isinstance(dispatcher, BroadcastDispatcher)
    assert dispatcher._targets == {consumers[1]}  # the next round is this consumer, not all three
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


# -- the cursor every subscription (and every Broadcast consumer) has ----------------------------


def test_cursor_individual_acks_leave_holes_and_merge_into_ranges():
    cursor = Cursor(0)
    for index in (2, 3, 5, 7, 6):
        assert cursor.ack(index)
    assert cursor.acked_ranges() == [(1, 3), (4, 7)]  # Pulsar's (open, closed]
    assert [i for i in range(9) if not cursor.is_acked(i)] == [1, 4, 8]
    cursor.ack(4)  # fills the hole between two ranges
    assert cursor.acked_ranges() == [(1, 7)]
    cursor.ack(1)  # the last hole: mark_delete sweeps over everything
    assert (cursor.mark_delete, cursor.acked_ranges()) == (7, [])
    assert not cursor.ack(3)  # already below mark_delete


def test_cursor_cumulative_ack_sweeps_over_the_ranges_it_reaches():
    cursor = Cursor(10, acked=range(21, 31))
    assert not cursor.ack_cumulative(10)
    assert cursor.ack_cumulative(25)
    assert (cursor.mark_delete, cursor.acked_ranges()) == (30, [])


def test_cursor_restores_only_what_is_above_mark_delete():
    assert Cursor(5, [3, 4, 7, 8]).acked_ranges() == [(6, 8)]
    restored = Cursor(5, [6, 7, 9])
    assert (restored.mark_delete, restored.acked_ranges(), restored.read_index) == (7, [(8, 9)], 8)


def test_cursor_hands_back_unacked_entries_counted_and_reads_them_first():
    log = MemoryEntryLog()
    asyncio.run(_append(log, 6))
    cursor = Cursor(-1)
    assert [e.index for e in cursor.next_entries(log, 4)[0]] == [0, 1, 2, 3]
    cursor.ack(1)
    cursor.hand_back([1, 2, 0])  # 1 is acked: nothing to send again
    cursor.hand_back([2])
    assert cursor.redelivery_counts == {0: 1, 2: 2}
    entries, redelivered = cursor.next_entries(log, 10)
    assert ([e.index for e in entries], redelivered) == ([0, 2], True)
    assert [e.index for e in cursor.next_entries(log, 10)[0]] == [4, 5]
    cursor.ack_cumulative(2)
    assert cursor.redelivery_counts == {}  # nothing below mark_delete is kept
    cursor.rewind()
    assert cursor.read_index == 3


async def _append(log: MemoryEntryLog, n: int) -> None:
    for _ in range(n):
        await log.append(SECTION, b"", 1, 1)


class CountingWire(QuietWire):
    """A wire that only counts the MESSAGE frames written to it, in one shared list."""

    sends_broker_entry_metadata = True

    def __init__(self, written: list[int], on_write=None) -> None:
        self.written = written
        self.on_write = on_write

    def write_frames(self, frames: list[bytes]) -> None:
        self.written.append(len(frames) // 2)  # [head, payload] per delivery
        if self.on_write is not None:
            self.on_write()


def _run_until(loop, done) -> None:
    for _ in range(10_000):
        if done():
            return
        loop.run_until_complete(asyncio.sleep(0))
    raise AssertionError("the loop never got there")


def test_an_ack_arriving_during_a_large_broadcast_waits_one_slice_not_the_whole_round(loop):
    """Seed 000's OrderedExecutor lesson: an ACK must not queue behind the sends. A reader's
    callback (here scheduled the way the loop queues a socket's readiness) that becomes ready
    while 20,000 consumers are being served runs after at most one more slice of the round,
    and its ack takes effect at once."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    written: list[int] = []
    arrival: dict[str, int] = {}

    def ack_arrives() -> None:
        if "sent" not in arrival and sum(written) > 20_000:  # the second round has begun
            arrival["sent"] = sum(written)
            loop.call_soon(handle_ack)

    def handle_ack() -> None:
        arrival["handled"] = sum(written)
        sub.on_ack(consumers[0], True, [1])

    wires = [CountingWire(written, ack_arrives) for _ in range(200)]
    consumers = [_consumer(wires[i // 100], i, permits=10) for i in range(20_000)]
    for c in consumers:
        sub.add_consumer(c)
    for round_ in (1, 2):
        loop.run_until_complete(topic.publish(SECTION, b"", 1, 1))
        _run_until(loop, lambda r=round_: sub.messages_out == 20_000 * r)
    _settle(loop)
    assert sum(written) == 40_000
    assert arrival["handled"] - arrival["sent"] <= SLICE
    assert arrival["handled"] < 30_000  # long before the round's end
    assert sub.unacked_messages(consumers[0]) == 0
    assert sub.unacked_messages(consumers[1]) == 2


def test_broadcast_frames_of_a_connection_come_grouped_by_entry_each_consumer_in_order(loop):
    """Consumers catching up on several entries: on their connection the frames come entry by
    entry (all consumers' deliveries of one entry, then the next), so a reader parses each
    entry once; each consumer still gets its entries in order."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=True)
    _publish(loop, topic, 3)  # before anyone has permits
    wire = FakeWire()
    consumers = [_consumer(wire, cid, permits=0) for cid in (1, 2, 3)]
    for c in consumers:
        sub.add_consumer(c)
    for c in consumers:
        sub.on_flow(c, 10)
    _settle(loop)
    got = wire.received()
    assert [e for _, e in got] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for cid in (1, 2, 3):
        assert [e for c, e in got if c == cid] == [0, 1, 2]


class CountingSink:
    """A topic's CursorSink that counts how often it hears of a moved cursor."""

    def __init__(self) -> None:
        self.moves = 0

    def moved(self, topic: str, subscription) -> None:
        self.moves += 1

    def deleted(self, topic: str, subscription: str) -> None:
        pass


def test_broadcast_tells_storage_of_the_slowest_cursor_once_until_it_is_read(loop):
    """A thousand consumers acknowledging the same entry move the main cursor once: storage
    hears of it once, and again only after it read the position; what it reads is right."""
    sink = CountingSink()
    topic = Topic("t", MemoryEntryLog(), persistent=True, loop=loop, cursor_sink=sink)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    consumers = [_consumer(CountingWire([]), cid) for cid in range(1000)]
    for c in consumers:
        sub.add_consumer(c)
    _publish(loop, topic, 2)
    before = sink.moves
    for c in consumers:
        sub.on_ack(c, True, [0])
    assert sink.moves == before + 1
    assert sub.mark_delete == 0  # storage reads it...
    for c in consumers[:-1]:
        sub.on_ack(c, True, [1])
    assert sink.moves == before + 2  # ...so the next move is told again
    assert sub.mark_delete == 0  # the last consumer has not acked entry 1
    sub.on_ack(consumers[-1], True, [1])
    assert sink.moves == before + 3 and sub.mark_delete == 1


def test_a_broadcast_ack_run_does_what_one_ack_per_consumer_does(loop):
    """on_ack_run's inline path (a cumulative ack with nothing acked above the cursor) and its
    general path (holes, hand-backs, stale and repeated acks) leave every virtual cursor, the
    main cursor and storage's notices as on_ack per consumer does."""

    def run(batched: bool) -> tuple[list, int, int]:
        sink = CountingSink()
        topic = Topic("t", MemoryEntryLog(), persistent=True, loop=loop, cursor_sink=sink)
        sub = topic.subscription("all", "Broadcast", initial_earliest=False)
        consumers = [_consumer(CountingWire([]), cid) for cid in range(6)]
        for c in consumers:
            sub.add_consumer(c)
        _publish(loop, topic, 6)
        sub.on_ack(consumers[1], False, [3])  # a hole below 3 and an ack above it
        sub.on_ack(consumers[2], True, [4])  # already past what the run acks
        sub.on_redeliver(consumers[3], [2])  # handed back
        _settle(loop)
        before = sink.moves
        for index in (1, 2, 2, 0):
            group = consumers[:5] if index != 0 else consumers[4:]
            if batched:
                sub.on_ack_run(group, True, index)
            else:
                for c in group:
                    sub.on_ack(c, True, [index])
        sub.on_ack_run(consumers[5:], False, 5) if batched else sub.on_ack(consumers[5], False, [5])
        dispatcher = sub.dispatcher
        assert isinstance(dispatcher, BroadcastDispatcher)
        cursors = [dispatcher.cursor_of(c) for c in consumers]
        state = [(c.mark_delete, sorted(c.acked), sorted(c.redeliver or ())) for c in cursors]
        return state, sub.mark_delete, sink.moves - before

    one_by_one, batched = run(False), run(True)
    assert batched == one_by_one
    assert batched[0][1] == (3, [], [])  # the hole at 2 filled by the run's ack of 2


class RawWire(FakeWire):
    """A wire keeping the bytes it was given."""

    def __init__(self, bem: bool) -> None:
        super().__init__()
        self.sends_broker_entry_metadata = bem
        self.data = b""

    def write_frames(self, frames: list[bytes]) -> None:
        self.data += b"".join(frames)
        super().write_frames(frames)


def test_broadcast_dispatch_of_a_new_entry_writes_what_frames_for_writes(loop):
    """The dispatcher builds a new entry's frames inline for all but the round's first
    consumer: byte for byte what Consumer.frames_for gives, on wires with and without broker
    entry metadata and for consumer ids of one and two varint bytes, with the same counters."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    wires = [RawWire(bem=True), RawWire(bem=False)]
    consumers = [_consumer(wires[i % 2], cid) for i, cid in enumerate((1, 200, 3, 16500))]
    for c in consumers:
        sub.add_consumer(c)
    _publish(loop, topic, 1)
    (entry,) = topic.log.read(0, 1)
    first = wires[0].decoder.next_frame()
    assert first is not None and first.broker_entry_metadata is not None
    dispatch_us = decode_stamps(first.broker_entry_metadata).dispatch_us
    for wire in wires:
        expected = b""
        for c in consumers:
            if c.wire is wire:
                twin = _consumer(wire, c.consumer_id)
                expected += b"".join(twin.frames_for([entry], dispatch_us))
                assert (c.permits, c.messages_out, c.bytes_out) == (
                    twin.permits,
                    twin.messages_out,
                    twin.bytes_out,
                )
        assert wire.data == expected


def test_a_new_entry_reaches_many_subscriptions_in_slices_so_other_work_is_not_queued_behind(loop):
    """The Shared baseline: a subscription per consumer. What the loop has to do once a
    publish returns (the producer's receipt) runs before most subscriptions have dispatched,
    not after all of them; every subscription still gets the entry."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    written: list[int] = []
    count = 3 * NOTIFY_SLICE + 5
    for i in range(count):
        sub = topic.subscription(f"s{i}", "Shared", initial_earliest=False)
        sub.add_consumer(_consumer(CountingWire(written), i))

    async def publish_then_answer() -> int:
        await topic.publish(SECTION, b"", 1, 1)
        answered = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(lambda: answered.set_result(len(written)))
        return await answered

    dispatched_before_the_answer = loop.run_until_complete(publish_then_answer())
    _settle(loop)
    assert dispatched_before_the_answer <= NOTIFY_SLICE
    assert len(written) == count and sum(written) == count


def test_subscriptions_notified_in_one_turn_share_its_dispatch_stamp_and_frame_head(loop):
    """The Shared baseline: a subscription per consumer. Those the topic notifies in one turn
    dispatch at once with that turn's dispatch time, and each gets byte for byte what
    Consumer.frames_for builds with it; a later turn stamps its own time."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    count = NOTIFY_SLICE + 3
    wires = [RawWire(bem=i % 2 == 0) for i in range(count)]
    consumers = [_consumer(wire, 128 * i + 1) for i, wire in enumerate(wires)]
    for i, c in enumerate(consumers):
        topic.subscription(f"s{i}", "Shared", initial_earliest=False).add_consumer(c)
    _publish(loop, topic, 1)
    (entry,) = topic.log.read(0, 1)
    stamped = [w.decoder.next_frame() for w in wires if w.sends_broker_entry_metadata]
    stamps = [
        decode_stamps(f.broker_entry_metadata).dispatch_us
        for f in stamped
        if f and f.broker_entry_metadata is not None
    ]
    assert len(stamps) == len(stamped)
    first_turn = stamps[: NOTIFY_SLICE // 2]
    assert len(set(first_turn)) == 1
    assert stamps[-1] >= first_turn[0]
    for i, (wire, c) in enumerate(zip(wires, consumers, strict=True)):
        twin = _consumer(wire, c.consumer_id)
        dispatch_us = stamps[min(i // 2, len(stamps) - 1)] if i < NOTIFY_SLICE else stamps[-1]
        assert wire.data == b"".join(twin.frames_for([entry], dispatch_us))
        assert (c.permits, c.messages_out, c.bytes_out) == (
            twin.permits,
            twin.messages_out,
            twin.bytes_out,
        )


def test_a_lone_consumer_ack_run_does_what_its_ack_does(loop):
    """on_ack_run's inline path for a one-consumer subscription (a cumulative ack of what it
    was sent, nothing acked or handed back above the cursor) and its general path (holes,
    hand-backs, repeated and never-sent acks) leave the cursor, the consumer's unacknowledged
    entries, the refusals and storage's notices as on_ack does."""

    def run(batched: bool) -> list:
        sink = CountingSink()
        topic = Topic("t", MemoryEntryLog(), persistent=True, loop=loop, cursor_sink=sink)
        sub = topic.subscription("s", "Shared", initial_earliest=False)
        consumer = _consumer(CountingWire([]), 1, permits=8)
        sub.add_consumer(consumer)
        _publish(loop, topic, 10)  # 8 sent (its permits), 2 not
        seen = []
        steps: list[tuple[bool, int]] = [(True, 1), (True, 1), (True, 0), (True, 9)]
        steps += [(False, 4), (True, 2), (True, 5), (True, 7)]
        for cumulative, index in steps:
            if batched:
                sub.on_ack_run([consumer], cumulative, index)
            else:
                sub.on_ack(consumer, cumulative, [index])
            if index == 2:
                sub.on_redeliver(consumer, [3])
            cursor = sub.cursor
            seen.append(
                (
                    cursor.mark_delete,
                    sorted(cursor.acked),
                    sorted(cursor.redeliver or ()),
                    dict(consumer.unacked),
                    sub.acks_refused,
                    sink.moves,
                )
            )
        return seen

    assert run(True) == run(False)


def test_a_shared_consumer_holds_an_unacked_table_only_while_it_owes_entries(loop):
    """`Consumer.unacked` is the one shared NO_UNACKED until the first entry sent, a dict of
    its own from then, and NO_UNACKED again once it leaves (issue 40: an empty dict was 64 B
    of every Shared consumer). What it owes is the same: counted in stats, handed to another
    consumer when it leaves."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("s", "Shared", initial_earliest=False)
    wire = FakeWire()
    first = _consumer(wire, 1)
    sub.add_consumer(first)
    assert first.unacked is NO_UNACKED
    with pytest.raises(TypeError):
        NO_UNACKED[0] = 1
    _publish(loop, topic, 1)
    assert wire.received() == [(1, 0)]
    assert first.unacked == {0: 1} and first.unacked is not NO_UNACKED
    sub.on_ack_run([first], True, 0)
    assert first.unacked == {} and sub.unacked_messages(first) == 0
    _publish(loop, topic, 2)
    assert [e for _, e in wire.received()] == [1, 2]
    assert sub.unacked_messages(first) == 2
    second = _consumer(wire, 2)
    sub.add_consumer(second)
    sub.remove_consumer(first)
    assert first.unacked is NO_UNACKED
    _settle(loop)
    assert wire.received() == [(2, 1), (2, 2)]
    assert sub.unacked_messages(second) == 2
    assert NO_UNACKED == {}
