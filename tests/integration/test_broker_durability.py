"""Durability of the bundled broker: `kill -9`, restart, and count what comes back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pulsar
import pytest

from tests.conftest import SharedBroker, wait_cursors_saved

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBroker]:
    # journalSyncData true (the default, what kill -9 is about) and a 1 MiB entry cache (what
    # the reader far behind is about); the test that kills it puts the restarted one back.
    data = tmp_path_factory.mktemp("durability") / "data"
    held = SharedBroker(data, extra=("--set", "managedLedgerCacheSizeMB=1"))
    yield held
    held.broker.stop()


@pytest.fixture
def running(shared: SharedBroker) -> SharedBroker:
    return shared.running()


def test_acknowledged_sends_survive_kill_9_and_acks_survive_the_persist_window(running):
    broker = running.broker  # journalSyncData defaults to true
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    consumer = client.subscribe("durable", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer("durable", batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(40)]
    assert len({(m.ledger_id(), m.entry_id()) for m in ids}) == 40
    for _ in range(20):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    wait_cursors_saved(broker, "durable", lambda t: t["subscriptions"]["s"]["msgBacklog"] == 20)
    broker.kill9()
    # Closing a client whose broker just died may say NotConnected, depending on whether
    # it noticed the disconnect yet: not what this test is about.
    with contextlib.suppress(pulsar.NotConnected):
        client.close()

    broker = running.broker = broker.restart()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    consumer = client.subscribe("durable", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    got = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=1500)
        except pulsar.Timeout:
            break
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [f"m{i}".encode() for i in range(20, 40)]
    producer = client.create_producer("durable", batching_enabled=False)
    after = producer.send(b"after restart")
    # Message ids keep growing across restarts: a restart opens a new ledger.
    assert (after.ledger_id(), after.entry_id()) > (ids[-1].ledger_id(), ids[-1].entry_id())
    client.close()


def test_a_reader_far_behind_the_cache_catches_up_from_disk_in_order(running):
    # A 1 MiB cache holds ~100 entries of 10 KB: the first 200 of 300 must come from disk.
    broker = running.broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    slow = client.subscribe("behind", "s", receiver_queue_size=1)
    producer = client.create_producer("behind", batching_enabled=False)
    body = b"x" * 10_000
    for i in range(300):
        producer.send(str(i).encode() + b":" + body)
    got = []
    for _ in range(300):
        msg = slow.receive(timeout_millis=5000)
        got.append(int(msg.data().split(b":", 1)[0]))
        slow.acknowledge(msg)
    assert got == list(range(300))
    client.close()
