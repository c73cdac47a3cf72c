"""Issue 40: a Broadcast connection whose consumers are all at the tail is served whole
(`BroadcastDispatcher._serve_at_tail`, heads kept up to the ids between entries:
`MessageTemplate.id_heads`): the same bytes, counters, permits and read positions as serving
each consumer in turn, with connections mixing consumers at the tail, catching up, without
permits, leaving mid-round and of ids of several varint lengths."""

from __future__ import annotations

import asyncio
import random
from typing import cast

import pytest

from broker.admin.stats import subscription_stats
from broker.core import entry_log
from broker.core import topic as topic_module
from broker.core.consumer import Consumer
from broker.core.entry_log import MemoryEntryLog
from broker.core.topic import Topic
from broker.subscriptions import broadcast
from broker.subscriptions.broadcast import BroadcastDispatcher
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import encode_varint
from pulsar_protocol.message_template import MessageTemplate
from pulsar_protocol.payload import encode_payload
from tests.doubles.quiet_wire import QuietWire

SINGLE = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"body"
)
BATCH = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=3),
    b"three messages in a batch",
)


def test_heads_kept_up_to_the_ids_make_the_frames_of_any_entry_of_their_prefix_key() -> None:
    payload = b"\x0e\x01" + bytes(range(256)) * 4
    ids = [encode_varint(i) for i in (0, 1, 127, 128, 300, 16_383, 16_384, 2**21, 2**35)]
    for bem in (None, b"\x08\x01"):
        for redeliveries, partition in ((0, -1), (3, 2)):
            first = MessageTemplate(7, 2**20, len(payload), bem, redeliveries, partition)
            heads = first.id_heads(ids)
            assert first.frames_from_id_heads(heads, payload) == first.frames(ids, payload)
            # The next entry (same varint lengths): the kept heads serve it too.
            after = MessageTemplate(7, 2**20 + 1, len(payload), bem, redeliveries, partition)
            assert after.prefix_key == first.prefix_key
            assert after.frames_from_id_heads(heads, payload) == after.frames(ids, payload)
    base = MessageTemplate(7, 2**20, 100)
    assert MessageTemplate(7, 2**20, 101).prefix_key != base.prefix_key  # payload size
    assert MessageTemplate(7, 2**28, 100).prefix_key != base.prefix_key  # entry id's length
    assert MessageTemplate(7, 2**20, 100, b"\x08\x01").prefix_key != base.prefix_key


class RawWire(QuietWire):
    def __init__(self, bem: bool, on_write=None) -> None:
        self.sends_broker_entry_metadata = bem
        self.data = b""
        self.writes = 0
        self.on_write = on_write

    def write_frames(self, frames: list[bytes]) -> None:
        self.data += b"".join(frames)
        self.writes += 1
        if self.on_write is not None:
            self.on_write()


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _run(loop, monkeypatch, seed: int, whole: bool) -> tuple[list, int]:
    """A seeded broadcast to connections of mixed consumers: what every wire was sent, each
    consumer's counters and read position, the subscription's count; and how many times a
    connection was served whole. With `whole` False, never (each consumer in turn)."""
    rng = random.Random(seed)
    monkeypatch.setattr(broadcast, "SLICE", 8)  # connections of up to 12: some split
    for module in (broadcast, topic_module, entry_log):  # the stamps in broker entry metadata
        monkeypatch.setattr(module, "now_us", lambda: 1_700_000_000_000_000)
    served_whole = 0
    serve_at_tail = BroadcastDispatcher._serve_at_tail

    def counted(self, group, newest):
        nonlocal served_whole
        n = serve_at_tail(self, group, newest) if whole else 0
        served_whole += n > 0
        return n

    monkeypatch.setattr(BroadcastDispatcher, "_serve_at_tail", counted)
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    dispatcher = cast(BroadcastDispatcher, sub.dispatcher)
    wires = [RawWire(bem=rng.random() < 0.5) for _ in range(6)]
    consumers: list[Consumer] = []
    cid = 0

    def join(wire: RawWire, permits: int) -> Consumer:
        nonlocal cid
        cid += rng.choice([1, 1, 150, 20_000])  # ids of one, two and three varint bytes
        consumer = Consumer(consumer_id=cid, name=f"c{cid}", wire=wire)
        sub.add_consumer(consumer)
        sub.on_flow(consumer, permits)
        consumers.append(consumer)
        return consumer

    for wire in wires:  # each connection's consumers in one run, as a subscribe run joins them
        for _ in range(rng.randrange(1, 13)):
            join(wire, rng.choice([1000, 1000, 1000, 1, 2]))
    loop.run_until_complete(asyncio.sleep(0.01))

    def leave() -> None:
        """A consumer leaving while the round goes on (its slot refilled by the last one's),
        on some of the first connection's writes: drawn by that write's number, not by when
        it comes among the slice's writes to other connections (their order is free)."""
        draw = random.Random(seed * 1000 + wires[0].writes)
        live = [c for c in consumers if c.slot >= 0]
        if live and draw.random() < 0.3:
            sub.remove_consumer(draw.choice(live))

    wires[0].on_write = leave
    for step in range(12):
        loop.run_until_complete(topic.publish(BATCH if step % 5 == 4 else SINGLE, b"", 1, 1))
        loop.run_until_complete(asyncio.sleep(0.01))
        live = [c for c in consumers if c.slot >= 0]
        for consumer in rng.sample(live, k=min(3, len(live))):
            sub.on_flow(consumer, rng.choice([1, 1000]))
        if live and rng.random() < 0.5:
            sub.on_redeliver(rng.choice(live), None)  # catching up from its mark-delete
        if step % 4 == 3:
            join(rng.choice(wires), 1000)  # a newcomer behind the others of its connection
        loop.run_until_complete(asyncio.sleep(0.01))
    state = [
        (
            c.consumer_id,
            c.permits,
            c.messages_out,
            c.bytes_out,
            c.slot >= 0 and dispatcher.cursor_of(c).read_index,
        )
        for c in consumers
    ]
    sent = [(w.data, w.writes) for w in wires]
    topic.close()
    return [state, sent, sub.messages_out], served_whole


@pytest.mark.parametrize("seed", range(8))
def test_connections_served_whole_get_what_each_consumer_in_turn_gets(loop, monkeypatch, seed):
    whole, served_whole = _run(loop, monkeypatch, seed, whole=True)
    each, _ = _run(loop, monkeypatch, seed, whole=False)
    assert whole == each
    assert served_whole > 0  # not vacuous: the whole-connection path was taken


def test_a_connection_at_the_tail_is_served_whole_only_while_every_consumer_can_take(
    loop, monkeypatch
):
    """One consumer without permits, or one behind, takes its connection off the whole
    path for that entry; the others still get it, and it gets nothing it has no permit for."""
    calls: list[int] = []
    serve_at_tail = BroadcastDispatcher._serve_at_tail

    def recorded(self, group, newest):
        n = serve_at_tail(self, group, newest)
        calls.append(n)
        return n

    monkeypatch.setattr(BroadcastDispatcher, "_serve_at_tail", recorded)
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    dispatcher = cast(BroadcastDispatcher, sub.dispatcher)
    wire = RawWire(bem=False)
    group = [Consumer(consumer_id=i, name=f"c{i}", wire=wire) for i in range(4)]
    for consumer in group:
        sub.add_consumer(consumer)
        sub.on_flow(consumer, 2)
    for _ in range(3):
        loop.run_until_complete(topic.publish(SINGLE, b"", 1, 1))
        loop.run_until_complete(asyncio.sleep(0.01))
    # The first entry is read for the round (served each), the second whole, the third finds
    # every consumer out of permits.
    assert [c.permits for c in group] == [0, 0, 0, 0]
    assert [c.messages_out for c in group] == [2, 2, 2, 2]
    assert 4 in calls
    calls.clear()
    sub.on_flow(group[1], 5)  # only this one can take: it is sent the third entry alone
    loop.run_until_complete(asyncio.sleep(0.01))
    assert [c.messages_out for c in group] == [2, 3, 2, 2]
    assert dispatcher.cursor_of(group[1]).read_index == 3
    assert dispatcher.cursor_of(group[0]).read_index == 2
    for consumer in (group[0], group[2], group[3]):
        sub.on_flow(consumer, 5)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert [c.messages_out for c in group] == [3, 3, 3, 3]
    loop.run_until_complete(topic.publish(SINGLE, b"", 1, 1))
    loop.run_until_complete(asyncio.sleep(0.01))
    assert calls[-1] == 4  # all at the tail again: whole
    assert [c.permits for c in group] == [3, 3, 3, 3]
    assert [c.bytes_out for c in group] == [4 * len(SINGLE)] * 4
    topic.close()


def test_permits_and_counters_follow_the_consumer_through_moves_leaving_and_return(loop):
    """A Broadcast consumer's permits and counters stay exact across a slot moved by
    another's leaving, FLOWs, entries served whole and one by one, its leaving and return."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    wire = RawWire(bem=False)
    group = [Consumer(consumer_id=i, name=f"c{i}", wire=wire, permits=10 + i) for i in range(5)]
    for consumer in group:
        sub.add_consumer(consumer)
    assert [c.permits for c in group] == [10, 11, 12, 13, 14]
    sub.on_flow(group[2], 100)
    loop.run_until_complete(topic.publish(SINGLE, b"", 1, 1))
    loop.run_until_complete(asyncio.sleep(0.01))
    sub.remove_consumer(group[1])  # the last one takes its slot
    assert (group[1].permits, group[1].messages_out, group[1].bytes_out) == (10, 1, len(SINGLE))
    assert group[4].slot == 1
    for body in (SINGLE, BATCH):
        loop.run_until_complete(topic.publish(body, b"", 1, 1))
        loop.run_until_complete(asyncio.sleep(0.01))
    live = [group[0], group[2], group[3], group[4]]
    assert [c.permits for c in live] == [10 - 5, 112 - 5, 13 - 5, 14 - 5]
    assert [c.messages_out for c in live] == [5, 5, 5, 5]
    assert [c.bytes_out for c in live] == [2 * len(SINGLE) + len(BATCH)] * 4
    assert sub.messages_out == 1 * 5 + 1 * 4 + 3 * 4
    stats = subscription_stats(sub)
    assert [c["availablePermits"] for c in stats["consumers"]] == [5, 9, 107, 8]  # by slot
    sub.remove_consumer(group[3])
    back = group[3]
    assert (back.permits, back.messages_out) == (8, 5)
    sub.add_consumer(back)  # its name's cursor again; its counters carried on
    assert (back.permits, back.messages_out) == (8, 5)
    assert [c.permits for c in (group[0], group[2], group[4])] == [5, 107, 9]
    topic.close()


def test_an_ack_run_of_an_entry_none_of_them_was_sent_is_refused_whole(loop):
    """Consecutive slots all read up to an entry and not past it (out of permits): a
    cumulative ack of it is refused for each, and one of the entry before taken by all."""
    topic = Topic("t", MemoryEntryLog(), persistent=False, loop=loop)
    sub = topic.subscription("all", "Broadcast", initial_earliest=False)
    dispatcher = cast(BroadcastDispatcher, sub.dispatcher)
    wire = RawWire(bem=False)
    group = [Consumer(consumer_id=i, name=f"c{i}", wire=wire, permits=2) for i in range(10)]
    for consumer in group:
        sub.add_consumer(consumer)
    for _ in range(5):
        loop.run_until_complete(topic.publish(SINGLE, b"", 1, 1))
    loop.run_until_complete(asyncio.sleep(0.01))
    assert {dispatcher.cursor_of(c).read_index for c in group} == {2}
    sub.on_ack_run(group, True, 2)  # never sent
    assert dispatcher.acks_refused == 10
    assert {dispatcher.cursor_of(c).mark_delete for c in group} == {-1}
    sub.on_ack_run(group, True, 1)
    assert dispatcher.acks_refused == 10
    assert {dispatcher.cursor_of(c).mark_delete for c in group} == {1}
    topic.close()
