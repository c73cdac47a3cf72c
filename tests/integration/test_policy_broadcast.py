"""Topic policies on a Broadcast subscription (seed 000, docs/policies.md), with the official
pulsar-client: each consumer has its own (virtual) cursor, and backlog eviction or TTL expiry
moves the slowest ones, those of stalled consumers, and leaves the others alone; the hole
compensation sends a consumer its own holes again, and nothing else.
"""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest

from tests.conftest import start_broker
from tests.integration.test_topic_policies import (
    TOPIC_PATH,
    _call,
    _stats,
    _wait_for,
)

pytestmark = pytest.mark.integration

BROKER = (
    "--set",
    "journalSyncData=false",
    "--set",
    "backlogQuotaCheckIntervalInSeconds=0.3",
    "--set",
    "messageExpiryCheckIntervalInMinutes=0.01",
)
BROADCAST = {"subscriptionMode": "broadcast"}


class Acking:
    """A listener that acknowledges each message and keeps its payload."""

    def __init__(self) -> None:
        self.got: list[bytes] = []

    def __call__(self, consumer, msg) -> None:
        self.got.append(msg.data())
        consumer.acknowledge(msg)


def _consumers(broker, topic: str) -> dict[str, dict[str, Any]]:
    sub = _stats(broker, topic)["subscriptions"]["all"]
    return {c["consumerName"]: c for c in sub["consumers"]}


def _setup(broker, client, topic: str, n: int) -> tuple[list[Acking], Any, list[bytes]]:
    """Two consumers that keep up and one stalled one (a receiver that never receives, so never
    acknowledges) on one Broadcast subscription; `n` messages of about 1 KB published and
    taken by the two."""
    fast = [Acking(), Acking()]
    for i, listener in enumerate(fast):
        client.subscribe(
            topic, "all", consumer_name=f"fast{i}", properties=BROADCAST, message_listener=listener
        )
    stalled = client.subscribe(
        topic, "all", consumer_name="stalled", properties=BROADCAST, receiver_queue_size=5
    )
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"{i:04d}".encode() + b"x" * 1000 for i in range(n)]
    for payload in sent:
        producer.send(payload)
    _wait_for(lambda: all(len(f.got) == n for f in fast))
    # The client groups ACKs (100 ms): wait until the broker has them, so that a policy set
    # next finds only the stalled consumer behind.
    _wait_for(
        lambda: all(
            c["unackedMessages"] == 0
            for name, c in _consumers(broker, topic).items()
            if name.startswith("fast")
        )
    )
    return fast, stalled, sent


def test_backlog_eviction_moves_only_the_stalled_consumers_cursor(tmp_path):
    broker = start_broker(tmp_path / "data", extra=BROKER)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        fast, stalled, sent = _setup(broker, client, "bc-evict", 50)
        assert _stats(broker, "bc-evict")["subscriptions"]["all"]["msgBacklog"] == 50

        quota = {"limitSize": 10 * 1100, "limitTime": -1, "policy": "consumer_backlog_eviction"}
        path = f"{TOPIC_PATH}/bc-evict/backlogQuota?backlogQuotaType=destination_storage"
        assert _call(broker, "POST", path, quota)[0] == 204

        def sub() -> dict[str, Any]:
            return _stats(broker, "bc-evict")["subscriptions"]["all"]

        _wait_for(lambda: sub()["msgBacklog"] <= 10)
        kept = sub()["msgBacklog"]
        assert kept >= 5  # down to the quota, not emptied
        assert sub()["msgBacklogEvicted"] == 50 - kept
        assert sub()["consumerCursorsSkipped"] == 1  # the stalled consumer's, no other
        assert _stats(broker, "bc-evict")["backlogQuotaEvictions"] >= 1

        # The stalled consumer gets what it had prefetched, then only what the quota kept.
        got = [stalled.receive(timeout_millis=5000).data() for _ in range(5 + kept)]
        assert got == sent[:5] + sent[50 - kept :]
        # The consumers that kept up lost nothing, and still get everything new.
        client.create_producer("bc-evict", batching_enabled=False).send(b"after")
        _wait_for(lambda: all(len(f.got) == 51 for f in fast))
        for f in fast:
            assert f.got == [*sent, b"after"]
        assert stalled.receive(timeout_millis=5000).data() == b"after"
    finally:
        client.close()
        broker.stop()


def test_ttl_expires_only_for_the_stalled_broadcast_consumer(tmp_path):
    broker = start_broker(tmp_path / "data", extra=BROKER)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        fast, stalled, sent = _setup(broker, client, "bc-ttl", 20)
        # Every message past the 1 s TTL before it is set, so that one check expires them all:
        # under load the 20 were published over more than a second, and two checks moved the
        # stalled consumer's cursor twice (counted twice).
        time.sleep(1.2)
        assert _call(broker, "POST", f"{TOPIC_PATH}/bc-ttl/messageTTL?messageTTL=1")[0] == 204

        def sub() -> dict[str, Any]:
            return _stats(broker, "bc-ttl")["subscriptions"]["all"]

        _wait_for(lambda: sub()["msgBacklog"] == 0)
        assert sub()["totalMsgExpired"] == 20
        assert sub()["consumerCursorsSkipped"] == 1
        assert _consumers(broker, "bc-ttl")["stalled"]["unackedMessages"] == 0

        # Expired for the stalled consumer: it gets its prefetched five, then what is new.
        producer = client.create_producer("bc-ttl", batching_enabled=False)
        producer.send(b"fresh")
        got = [stalled.receive(timeout_millis=5000).data() for _ in range(6)]
        assert got == [*sent[:5], b"fresh"]
        _wait_for(lambda: all(len(f.got) == 21 for f in fast))
        for f in fast:
            assert f.got == [*sent, b"fresh"]
    finally:
        client.close()
        broker.stop()


def test_hole_compensation_resends_only_a_broadcast_consumers_own_holes(tmp_path):
    extra = (
        "--set",
        "journalSyncData=false",
        "--set",
        "ackHoleRedeliveryIntervalSeconds=0.5",
        "--set",
        "ackHoleRedeliveryMinAgeSeconds=1.5",
    )
    broker = start_broker(tmp_path / "data", extra=extra)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        complete = Acking()
        client.subscribe(
            "bc-holes",
            "all",
            consumer_name="complete",
            properties=BROADCAST,
            message_listener=complete,
        )
        forgetful = client.subscribe(
            "bc-holes", "all", consumer_name="forgetful", properties=BROADCAST
        )
        producer = client.create_producer("bc-holes", batching_enabled=False)
        for i in range(20):
            producer.send(f"m{i}".encode())
        first_seen = {}
        for _ in range(20):
            msg = forgetful.receive(timeout_millis=5000)
            first_seen[msg.data()] = time.time()
            if msg.data() not in (b"m3", b"m7"):  # it "forgets" two, acknowledges the rest
                forgetful.acknowledge(msg)

        def sub() -> dict[str, Any]:
            return _stats(broker, "bc-holes")["subscriptions"]["all"]

        # Its cursor's two holes (m3, m7), each before an acknowledged range, in the stats.
        _wait_for(lambda: sub()["nonContiguousDeletedMessagesRanges"] == 2)
        # Only the two holes come again, once old enough, with a redelivery count; nothing it
        # acknowledged after them, and nothing to the consumer that acknowledged everything.
        again = [forgetful.receive(timeout_millis=10_000) for _ in range(2)]
        assert sorted(m.data() for m in again) == [b"m3", b"m7"]
        assert all(m.redelivery_count() == 1 for m in again)
        assert all(time.time() - first_seen[m.data()] >= 1.0 for m in again)
        for m in again:
            forgetful.acknowledge(m)
        _wait_for(lambda: sub()["msgBacklog"] == 0)
        assert sub()["nonContiguousDeletedMessagesRanges"] == 0
        assert sub()["ackHoleRedeliveries"] == 2
        time.sleep(1.0)  # two more passes: nothing left to send
        with pytest.raises(pulsar.Timeout):
            forgetful.receive(timeout_millis=200)
        assert len(complete.got) == 20
        assert sub()["ackHoleRedeliveries"] == 2
    finally:
        client.close()
        broker.stop()
