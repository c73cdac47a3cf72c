"""Issue 14: a Broadcast consumer's cursor belongs to its name (kept while it is away, then
expired and counted) and storage saves the named cursors grouped by position; acks of what a
cursor cannot have sent are refused and counted."""

from __future__ import annotations

import asyncio

import pytest

from broker.core.consumer import Consumer
from broker.core.entry_log import MemoryEntryLog
from broker.core.topic import Topic
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import encode_payload
from tests.doubles.quiet_wire import QuietWire

SECTION = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"body"
)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _setup(loop, expiry_s: float, entries: int = 5):
    topic = Topic(
        "t", MemoryEntryLog(), persistent=False, loop=loop, consumer_cursor_expiry_s=expiry_s
    )
    sub = topic.subscription("all", "Broadcast", initial_earliest=True)
    for _ in range(entries):
        loop.run_until_complete(topic.publish(SECTION, b"", 1, 1))
    return topic, sub


def _join(loop, sub, cid: int, name: str) -> Consumer:
    consumer = Consumer(consumer_id=cid, name=name, wire=QuietWire())
    sub.add_consumer(consumer)
    sub.on_flow(consumer, 1000)
    loop.run_until_complete(asyncio.sleep(0.01))  # dispatched
    return consumer


def test_a_named_consumer_that_leaves_keeps_its_place_and_holds_the_main_cursor(loop):
    _, sub = _setup(loop, expiry_s=60)
    steady, away = _join(loop, sub, 1, "steady"), _join(loop, sub, 2, "away")
    sub.on_ack_run([steady, away], True, 1)
    sub.remove_consumer(away)
    sub.on_ack_run([steady], True, 4)
    assert sub.mark_delete == 1  # the departed cursor still counts
    back = _join(loop, sub, 3, "away")
    cursor = sub.dispatcher.cursor_of(back)
    assert (cursor.mark_delete, cursor.read_index) == (1, 5)  # resent from 2, all of it
    # A second consumer under a name in use gets a cursor of its own: at the slowest one's
    # place, and its acks move only it.
    twin = _join(loop, sub, 4, "away")
    sub.on_ack_run([twin], True, 3)
    assert sub.dispatcher.cursor_of(twin).mark_delete == 3
    assert sub.dispatcher.cursor_of(back).mark_delete == 1


def test_a_departed_cursor_expires_counted_and_releases_retention(loop):
    _, sub = _setup(loop, expiry_s=0.05)
    steady, gone = _join(loop, sub, 1, "steady"), _join(loop, sub, 2, "gone")
    sub.on_ack_run([steady], True, 4)
    sub.remove_consumer(gone)
    assert sub.mark_delete == -1 and sub.expired_cursors == 0
    loop.run_until_complete(asyncio.sleep(0.15))
    assert sub.expired_cursors == 1
    assert sub.mark_delete == 4
    assert sub.backlog() == 0


def test_acks_past_what_a_cursor_sent_are_refused_and_counted(loop):
    topic, sub = _setup(loop, expiry_s=60)
    consumer = Consumer(consumer_id=1, name="c", wire=QuietWire())
    sub.add_consumer(consumer)
    sub.on_flow(consumer, 2)
    loop.run_until_complete(asyncio.sleep(0.01))  # sent entries 0 and 1 only
    sub.on_ack_run([consumer], True, 3)  # never sent to it
    sub.on_ack(consumer, True, [topic.log.next_index + 100])  # past the log's end
    sub.on_ack(consumer, False, [4])
    assert sub.acks_refused == 3
    assert sub.mark_delete == -1
    sub.on_ack_run([consumer], True, 1)
    assert sub.acks_refused == 3 and sub.mark_delete == 1


def test_named_cursors_are_handed_to_storage_grouped_and_only_when_moved(loop):
    _, sub = _setup(loop, expiry_s=60)
    consumers = [_join(loop, sub, i, f"c{i}") for i in range(4)]
    dispatcher = sub.dispatcher
    assert dispatcher.consumer_cursors() is not None  # they joined
    assert dispatcher.consumer_cursors() is None  # nothing moved since
    sub.on_ack_run(consumers[:3], True, 2)
    sub.on_ack(consumers[3], False, [1])
    groups = dispatcher.consumer_cursors()
    assert groups is not None
    assert sorted((mark, ranges, sorted(names)) for mark, ranges, names in groups) == [
        (-1, [(0, 1)], ["c3"]),
        (2, [], ["c0", "c1", "c2"]),
    ]
    restored = Topic(
        "t", MemoryEntryLog(), persistent=False, loop=loop, consumer_cursor_expiry_s=60
    )
    again = restored.subscription("all", "Broadcast", initial_earliest=True)
    again.dispatcher.restore_consumer_cursors({"c0": (2, set()), "c3": (-1, {1})}, 0)
    assert again.mark_delete == -1


# Issue 40: virtual cursors are arrays by consumer slot, with an object only for the extras of
# the few that have acknowledgement holes; the operations over all of them run on the arrays.


def test_a_hole_gives_a_cursor_its_object_until_the_hole_fills(loop):
    _, sub = _setup(loop, expiry_s=60)
    plain, holed = _join(loop, sub, 1, "plain"), _join(loop, sub, 2, "holed")
    dispatcher = sub.dispatcher
    sub.on_ack(holed, False, [2])  # 0 and 1 not acknowledged: a hole below 2
    sub.on_ack(plain, False, [0])
    assert dispatcher.consumer_hole_ranges() == 1
    cursor = dispatcher.cursor_of(holed)
    assert (cursor.mark_delete, sorted(cursor.acked)) == (-1, [2])
    assert dispatcher.unacked_messages(holed) == 4 and dispatcher.unacked_messages(plain) == 4
    sub.on_ack(holed, False, [0])
    sub.on_ack(holed, False, [1])  # the hole filled: the mark-delete sweeps over 2
    assert dispatcher.cursor_of(holed).mark_delete == 2
    assert dispatcher.consumer_hole_ranges() == 0
    assert list(dispatcher._holes) == []  # back to its slot alone
    assert sub.mark_delete == 0


def test_named_cursors_at_many_places_are_grouped_by_place(loop):
    _, sub = _setup(loop, expiry_s=60, entries=30)
    consumers = [_join(loop, sub, i, f"c{i}") for i in range(60)]
    for i, consumer in enumerate(consumers):
        if i % 25:
            sub.on_ack_run([consumer], True, i % 25)  # 24 places, and -1 for some
    sub.remove_consumer(consumers[7])  # departed ones are saved too
    groups = sub.dispatcher.consumer_cursors()
    assert groups is not None
    expected: dict[int, list[str]] = {}
    for i in range(60):
        expected.setdefault(i % 25 if i % 25 else -1, []).append(f"c{i}")
    found: dict[int, list[str]] = {}
    for mark, ranges, names in groups:  # connected and departed ones at one place apart
        assert ranges == []
        found.setdefault(mark, []).extend(names)
    assert {mark: sorted(names) for mark, names in found.items()} == {
        mark: sorted(names) for mark, names in expected.items()
    }


def test_skip_behind_and_seek_move_every_cursor_on_the_arrays(loop):
    _, sub = _setup(loop, expiry_s=60, entries=8)
    consumers = [_join(loop, sub, i, f"c{i}") for i in range(4)]
    sub.on_ack_run(consumers[:1], True, 1)
    sub.on_ack_run(consumers[1:2], True, 5)
    sub.on_ack(consumers[2], False, [6])  # a hole: the object's path
    sub.remove_consumer(consumers[3])  # departed at -1
    dispatcher = sub.dispatcher
    assert dispatcher.skip_behind(3) == 3  # all but the one at 5
    marks = [dispatcher.cursor_of(c).mark_delete for c in consumers[:3]]
    assert marks == [3, 5, 3] and sub.mark_delete == 3
    assert sorted(dispatcher.cursor_of(consumers[2]).acked) == [6]
    sub.seek(2)
    for consumer in consumers[:3]:
        cursor = dispatcher.cursor_of(consumer)
        assert (cursor.mark_delete, cursor.read_index, cursor.acked) == (1, 2, set())
    assert sub.mark_delete == 1
    sub.on_ack_run(consumers[:3], True, 7)  # sent before the seek: taken, not refused
    assert sub.acks_refused == 0


def test_thousands_of_departed_cursors_come_back_or_expire_together(loop):
    _, sub = _setup(loop, expiry_s=60)

    def join(cid: int, name: str) -> Consumer:
        consumer = Consumer(consumer_id=cid, name=name, wire=QuietWire())
        sub.add_consumer(consumer)
        sub.on_flow(consumer, 1000)
        return consumer

    consumers = [join(i, f"c{i}") for i in range(3000)]
    loop.run_until_complete(asyncio.sleep(0.01))  # dispatched
    sub.on_ack_run(consumers[:1500], True, 2)
    for consumer in consumers:
        sub.remove_consumer(consumer)
    assert sub.departed_cursors == 3000 and sub.consumers == []
    back = [join(10_000 + i, f"c{i}") for i in range(0, 3000, 2)]
    assert sub.departed_cursors == 1500
    assert [sub.dispatcher.cursor_of(c).mark_delete for c in back[:2]] == [2, 2]
    assert sub.dispatcher.cursor_of(back[-1]).mark_delete == -1
    sub.dispatcher.departed_expiry_s = 1e-9  # every departed one is past it now
    sub.dispatcher._expire()
    assert sub.expired_cursors == 1500 and sub.departed_cursors == 0
    assert sub.mark_delete == -1  # the consumers back from above 1500 never acked
    groups = sub.dispatcher.consumer_cursors()
    assert groups is not None and sum(len(names) for _, _, names in groups) == 1500


def test_in_a_storm_a_newcomer_starts_at_the_main_cursor_as_last_brought_up_to_date(
    loop, monkeypatch
):
    from broker.subscriptions import broadcast

    monkeypatch.setattr(broadcast, "MANY", 2)  # as with 10,000 consumers
    _, sub = _setup(loop, expiry_s=60)
    first = [_join(loop, sub, i, f"c{i}") for i in range(3)]
    assert sub.mark_delete == -1  # read: up to date
    sub.on_ack_run(first, True, 2)  # every cursor moved: the main one is stale
    early = _join(loop, sub, 3, "early")
    assert sub.dispatcher.cursor_of(early).mark_delete in (-1, 2)  # never past the slowest
    sub.on_ack_run([*first, early], True, 3)
    loop.run_until_complete(asyncio.sleep(2 * broadcast.START_REFRESH_S))
    late = _join(loop, sub, 4, "late")
    assert sub.dispatcher.cursor_of(late).mark_delete == 3
    assert sub.mark_delete == 3


class CountingWire(QuietWire):
    def __init__(self) -> None:
        self.writes: list[int] = []

    def write_frames(self, frames: list[bytes]) -> None:
        self.writes.append(len(frames) // 2)


def test_consumers_joined_interleaved_get_an_entry_in_one_write_per_connection(loop, monkeypatch):
    from broker.subscriptions import broadcast

    monkeypatch.setattr(broadcast, "SLICE", 4)  # slices shorter than a connection's six
    topic, sub = _setup(loop, expiry_s=60, entries=0)
    wires = [CountingWire() for _ in range(3)]
    consumers = []
    for i in range(18):  # joined in turn over the three connections, as in a storm
        consumer = Consumer(consumer_id=i, name=f"c{i}", wire=wires[i % 3])
        sub.add_consumer(consumer)
        sub.on_flow(consumer, 10)
        consumers.append(consumer)
    sub.remove_consumer(consumers[4])  # a leftover in its connection's group
    loop.run_until_complete(topic.publish(SECTION, b"", 1, 1))
    loop.run_until_complete(asyncio.sleep(0.05))
    assert [w.writes for w in wires] == [[6], [5], [6]]
    assert sub.messages_out == 17


def test_connections_of_one_consumer_and_of_several_each_get_an_entry_in_one_write(loop):
    """A connection's only consumer is kept as itself, not in a group of one: it still gets
    each entry, and so do the consumers of a connection it later shares with another."""
    topic, sub = _setup(loop, expiry_s=60, entries=0)
    alone, shared, later = CountingWire(), CountingWire(), CountingWire()
    for i, wire in enumerate([alone, shared, shared, later]):
        consumer = Consumer(consumer_id=i, name=f"c{i}", wire=wire)
        sub.add_consumer(consumer)
        sub.on_flow(consumer, 10)
    loop.run_until_complete(topic.publish(SECTION, b"", 1, 1))
    loop.run_until_complete(asyncio.sleep(0.05))
    second = Consumer(consumer_id=9, name="c9", wire=later)  # `later` has two from here on
    sub.add_consumer(second)
    sub.on_flow(second, 10)
    loop.run_until_complete(asyncio.sleep(0.05))  # the newcomer is sent what it missed
    loop.run_until_complete(topic.publish(SECTION, b"", 1, 1))
    loop.run_until_complete(asyncio.sleep(0.05))
    assert alone.writes == [1, 1]
    assert shared.writes == [2, 2]
    assert later.writes == [1, 1, 2]  # the newcomer's missed entry, nobody having acked it
    assert sub.messages_out == 10


@pytest.mark.parametrize("seed", range(6))
def test_acks_of_consecutive_slots_move_the_cursors_as_the_loop_does(loop, monkeypatch, seed):
    """Runs of cumulative acks over consumers in consecutive slots (`_ack_range`), over
    consumers not in them (a leaver's slot taken by the last), over some not sent the entry
    (refused) and some past it: every cursor, the refused count and the main cursor's state
    as the loop leaves them."""
    import random

    from broker.subscriptions import broadcast

    def state(ranges: bool) -> list:
        monkeypatch.setattr(broadcast, "ACK_RANGE_FROM", 2 if ranges else 10**9)
        rng = random.Random(seed)
        topic, sub = _setup(loop, expiry_s=60, entries=8)
        consumers = []
        for cid in range(40):
            consumer = Consumer(consumer_id=cid, name=f"c{cid}", wire=QuietWire())
            sub.add_consumer(consumer)
            sub.on_flow(consumer, 1000 if rng.random() < 0.9 else rng.choice([1, 3]))
            consumers.append(consumer)
        loop.run_until_complete(asyncio.sleep(0.01))  # dispatched
        sub.remove_consumer(consumers[rng.randrange(40)])
        dispatcher = sub.dispatcher
        seen = []
        for index in sorted(rng.randrange(0, 8) for _ in range(8)):
            start = rng.randrange(0, 30)
            sub.on_ack_run(consumers[start : start + rng.randrange(2, 12)], True, index)
            seen.append(
                (
                    [c.slot >= 0 and dispatcher.cursor_of(c).mark_delete for c in consumers],
                    dispatcher.acks_refused,
                    dispatcher._slowest_stale,
                    dispatcher._unsaved,
                    sub.mark_delete,
                )
            )
        topic.close()
        return seen

    ranges = state(True)
    assert ranges == state(False)
    assert len({mark for mark in ranges[-1][0] if mark is not False}) > 1
