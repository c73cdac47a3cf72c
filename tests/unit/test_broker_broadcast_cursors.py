"""Issue 14: a Broadcast consumer's cursor belongs to its name (kept while it is away, then
expired and counted) and storage saves the named cursors grouped by position; acks of what a
cursor cannot have sent are refused and counted."""

from __future__ import annotations

import asyncio

import pytest

from broker.core.consumer import Consumer
from broker.core.entry_log import MemoryEntryLog
from broker.core.topic import Topic
from broker.subscriptions.cursor import Cursor
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import encode_payload

SECTION = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"body"
)


class QuietWire:
    writable = True
    sends_broker_entry_metadata = False

    def write_frames(self, frames: list[bytes]) -> None:
        pass

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None:
        pass


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
    cursor = sub.dispatcher._cursors[back]
    assert (cursor.mark_delete, cursor.read_index) == (1, 5)  # resent from 2, all of it
    # A second consumer under a name in use gets a cursor of its own.
    twin = _join(loop, sub, 4, "away")
    assert sub.dispatcher._cursors[twin] is not cursor


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
    again.dispatcher.restore_consumer_cursors({"c0": Cursor(2), "c3": Cursor(-1, [1])})
    assert again.mark_delete == -1
