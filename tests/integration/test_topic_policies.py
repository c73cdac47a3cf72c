"""Topic policies (docs/policies.md) set through Pulsar's REST paths and the broker's defaults,
and what each does, observed with the official pulsar-client: rate limits, TTL, delayed
delivery, backlog quotas, acknowledgement holes, and a workload's `topicPolicies`. Their
window-by-window behaviour is unit-tested on a fake clock (tests/unit/test_policies_clock.py);
these are the compatibility checks with the official client, a few per feature.

Windows are the broker's 1 s windows, aligned on the wall clock (broker.policies.rate_limit),
so what a client saw is counted per `int(time.time())`; the broker and the clients share the
clock here.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.frames import FrameDecoder, encode_frame
from pulsar_protocol.payload import encode_payload
from tests.conftest import ROOT, BrokerProcess, SharedBroker, start_broker

pytestmark = pytest.mark.integration

TOPIC_PATH = "/admin/v2/persistent/public/default"

BACKLOG_BROKER = (
    "--set",
    "journalSyncData=false",
    "--set",
    "backlogQuotaCheckIntervalInSeconds=0.3",
)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBroker]:
    # For the tests that each need only topics of their own (these were twelve broker starts).
    # The backlog quota check runs every 0.3 s, which only the topics given a quota notice. The
    # two tests that restart it put the restarted one back. The tests whose broker settings
    # reach every topic (defaults, TTL's ledger size, the hole compensation) start their own.
    held = SharedBroker(tmp_path_factory.mktemp("policies") / "data", extra=BACKLOG_BROKER)
    yield held
    held.broker.stop()


@pytest.fixture
def broker(shared: SharedBroker) -> BrokerProcess:
    return shared.running().broker


def _call(broker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{broker.admin}{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as reply:
            text = reply.read().decode()
            return reply.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode() or "null")


def _stats(broker, topic: str) -> dict[str, Any]:
    status, stats = _call(broker, "GET", f"{TOPIC_PATH}/{topic}/stats")
    assert status == 200
    return stats


def _metrics(broker) -> str:
    with urllib.request.urlopen(f"{broker.admin}/metrics", timeout=5) as reply:
        return reply.read().decode()


def _metric(broker, name: str, topic: str, subscription: str | None = None) -> int:
    """A topic's (or its subscription's) value of a /metrics counter: the broker serves other
    tests' topics too, so a line is looked for by its labels."""
    labels = f'topic="persistent://public/default/{topic}"'
    if subscription is not None:
        labels += f',subscription="{subscription}"'
    (value,) = [
        line.rsplit(" ", 1)[1]
        for line in _metrics(broker).splitlines()
        if line.startswith(f"{name}{{{labels}}} ")
    ]
    return int(value)


def _per_window(times: list[float]) -> Counter[int]:
    return Counter(int(t) for t in times)


def _within_rate(times: list[float], limit: int, since: float) -> Counter[int]:
    """Assert that what a client saw fits `limit` per broker window, and return the counts.

    A client sees a delivery a little after the broker made it (its threads share two busy
    cores with the broker), which can move it into the next window but never into an earlier
    one: so what was seen up to the end of each window is at most `limit` × the windows so
    far, the broker's own bound. The windows count from `since`, when the client began to
    send: the broker's first window may end before the client sees anything of it (under
    load it did, and the client's first second then held 21 of a limit of 20)."""
    windows = _per_window(times)
    first = int(since)
    seen = 0
    for window in range(first, max(windows) + 1):
        seen += windows.get(window, 0)
        assert seen <= limit * (window - first + 1), windows
    return windows


def _messages_per_window(limit: int, relative: bool = False) -> dict[str, Any]:
    """A dispatch rate body (dispatchRate, subscriptionDispatchRate): `limit` messages a 1 s
    window, bytes unlimited."""
    return {
        "dispatchThrottlingRateInMsg": limit,
        "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": relative,
        "ratePeriodInSecond": 1,
    }


BODIES = {
    "publishRate": {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 1_000_000},
    "dispatchRate": {
        "dispatchThrottlingRateInMsg": 200,
        "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 1,
    },
    "subscriptionDispatchRate": {
        "dispatchThrottlingRateInMsg": 50,
        "dispatchThrottlingRateInByte": 65536,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 1,
    },
    "retention": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
    "delayedDelivery": {"active": True, "tickTime": 500, "maxDeliveryDelayInMillis": 60000},
}


def test_each_policy_is_set_read_and_removed_as_pulsar_admin_does(shared, broker):
    base = f"{TOPIC_PATH}/pol"
    for kind, body in BODIES.items():
        assert _call(broker, "GET", f"{base}/{kind}") == (204, None), kind
        assert _call(broker, "POST", f"{base}/{kind}", body) == (204, None), kind
        assert _call(broker, "GET", f"{base}/{kind}") == (200, body), kind
    assert _call(broker, "POST", f"{base}/messageTTL?messageTTL=120") == (204, None)
    assert _call(broker, "GET", f"{base}/messageTTL") == (200, 120)
    quota = {"limitSize": 10_000_000, "limitTime": -1, "policy": "producer_exception"}
    path = f"{base}/backlogQuota?backlogQuotaType=destination_storage"
    assert _call(broker, "POST", path, quota) == (204, None)
    assert _call(broker, "GET", f"{base}/backlogQuotaMap") == (
        200,
        {"destination_storage": quota},
    )

    # Refused with the reason, never half-applied.
    status, reply = _call(broker, "POST", f"{base}/publishRate", {"publishRateInMsg": 5})
    assert status == 400 and "publishRateInMsg" in reply["reason"]
    status, reply = _call(broker, "POST", path, {**quota, "policy": "drop_everything"})
    assert status == 400 and "policy" in reply["reason"]
    assert _call(broker, "POST", f"{base}/messageTTL?messageTTL=-1")[0] == 400
    assert _call(broker, "GET", f"{base}/publishRate")[1] == BODIES["publishRate"]

    # A restart keeps them all.
    broker = shared.broker = broker.restart()
    for kind, body in BODIES.items():
        assert _call(broker, "GET", f"{base}/{kind}") == (200, body), kind
    assert _call(broker, "GET", f"{base}/messageTTL") == (200, 120)
    assert _call(broker, "GET", f"{base}/backlogQuotaMap")[1] == {"destination_storage": quota}

    for kind in BODIES:
        assert _call(broker, "DELETE", f"{base}/{kind}") == (204, None), kind
        assert _call(broker, "GET", f"{base}/{kind}") == (204, None), kind
    assert _call(broker, "DELETE", f"{base}/messageTTL") == (204, None)
    assert _call(broker, "DELETE", path) == (204, None)
    assert _call(broker, "GET", f"{base}/backlogQuotaMap") == (200, {})
    broker = shared.broker = broker.restart()
    assert _call(broker, "GET", f"{base}/publishRate") == (204, None)


def test_broker_defaults_use_pulsars_names_and_show_as_applied(tmp_path):
    broker = start_broker(
        tmp_path / "data",
        extra=(
            "--set",
            "journalSyncData=false",
            "--set",
            "maxPublishRatePerTopicInMessages=10",
            "--set",
            "dispatchThrottlingRatePerSubscriptionInMsg=7",
        ),
    )
    try:
        base = f"{TOPIC_PATH}/defaults"
        assert _call(broker, "GET", f"{base}/publishRate") == (204, None)
        assert _call(broker, "GET", f"{base}/publishRate?applied=true") == (
            200,
            {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 0},
        )
        applied = _call(broker, "GET", f"{base}/subscriptionDispatchRate?applied=true")[1]
        assert applied["dispatchThrottlingRateInMsg"] == 7

        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            producer = client.create_producer("defaults", batching_enabled=False)
            done, since = [], time.time()
            for i in range(25):
                producer.send(f"m{i}".encode())
                done.append(time.time())
            assert len(_within_rate(done, 10, since)) >= 3  # 25 at 10 a window
            assert _stats(broker, "defaults")["publishRateLimitedTimes"] >= 2
        finally:
            client.close()
    finally:
        broker.stop()


def test_publish_rate_holds_a_producer_to_n_messages_per_window(broker):
    limit = 20
    body = {"publishThrottlingRateInMsg": limit, "publishThrottlingRateInByte": -1}
    assert _call(broker, "POST", f"{TOPIC_PATH}/pub-limited/publishRate", body)[0] == 204
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer("pub-limited", batching_enabled=False)
        done, took, since = [], [], time.time()
        for i in range(3 * limit + 5):
            t0 = time.time()
            producer.send(f"m{i}".encode())
            done.append(time.time())
            took.append(done[-1] - t0)
        windows = _within_rate(done, limit, since)
        assert len(windows) >= 4  # 65 at 20 a window
        # Seed 004: the message after the quota waits for the next window, not a few ms.
        assert max(took) > 0.2, max(took)
        stats = _stats(broker, "pub-limited")
        assert stats["msgInCounter"] == 3 * limit + 5
        # The exact count per window is unit-tested (tests/unit/test_policies_clock.py); here a
        # slow client may not fill its first, partial window.
        throttled = stats["publishRateLimitedTimes"]
        assert throttled >= 1
        labels = '{topic="persistent://public/default/pub-limited"}'
        assert f"pulsar_publish_rate_limit_times{labels} {throttled}" in _metrics(broker)

        # Removed: the producer runs free again, the counter stops rising.
        assert _call(broker, "DELETE", f"{TOPIC_PATH}/pub-limited/publishRate")[0] == 204
        # Sent together: held to 20 a window, 100 would take four windows (4 s) or more;
        # one at a time they measured the round trip instead (2.3 s for 60 at a load of 16).
        t0 = time.time()
        for _ in range(5 * limit):
            producer.send_async(b"free", None)
        producer.flush()
        assert time.time() - t0 < 3.0
        assert _stats(broker, "pub-limited")["publishRateLimitedTimes"] == throttled
    finally:
        client.close()


class Arrivals:
    """A message listener: the client calls it as each message arrives, so the time taken is
    the delivery's, not that of an application loop polling several consumers."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, consumer, msg) -> None:
        self.times.append(time.time())
        consumer.acknowledge(msg)

    def wait_for(self, n: int, timeout_s: float = 20) -> list[float]:
        deadline = time.monotonic() + timeout_s
        while len(self.times) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.times) == n
        return self.times


def test_subscription_dispatch_rate_paces_delivery(broker):
    limit = 15
    body = _messages_per_window(limit)
    assert _call(broker, "POST", f"{TOPIC_PATH}/disp/subscriptionDispatchRate", body)[0] == 204
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        arrivals = Arrivals()
        client.subscribe(
            "disp", "s", consumer_type=pulsar.ConsumerType.Shared, message_listener=arrivals
        )
        producer = client.create_producer("disp", batching_enabled=False)
        since = time.time()
        for i in range(3 * limit + 5):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        times = arrivals.wait_for(3 * limit + 5)
        windows = _within_rate(times, limit, since)
        assert len(windows) >= 4  # 50 at 15 a window
        sub = _stats(broker, "disp")["subscriptions"]["s"]
        assert sub["msgOutCounter"] == 3 * limit + 5
        assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] >= 3
        assert sub["dispatchThrottledMsgEventsByTopicLimit"] == 0
        name = "pulsar_subscription_dispatch_throttled_msg_events"
        assert _metric(broker, name, "disp", "s") >= 3
    finally:
        client.close()


def _wait_for(check, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _internal(broker, topic: str) -> dict[str, Any]:
    status, stats = _call(broker, "GET", f"{TOPIC_PATH}/{topic}/internalStats")
    assert status == 200
    return stats


TTL_BROKER = (
    "--set",
    "journalSyncData=false",
    "--set",
    "managedLedgerMaxEntriesPerLedger=10",
    "--set",
    "messageExpiryCheckIntervalInMinutes=0.01",
)


def test_ttl_moves_the_cursor_and_storage_follows_whole_ledgers(tmp_path):
    broker = start_broker(tmp_path / "data", extra=TTL_BROKER)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.subscribe("ttl", "s", consumer_type=pulsar.ConsumerType.Shared).close()
        assert _call(broker, "POST", f"{TOPIC_PATH}/ttl/messageTTL?messageTTL=2")[0] == 204
        producer = client.create_producer("ttl", batching_enabled=False)
        sent = time.time()  # before any publish time
        for i in range(25):
            producer.send(f"old{i}".encode())
        assert _internal(broker, "ttl")["numberOfEntries"] == 25

        def sub() -> dict[str, Any]:
            return _stats(broker, "ttl")["subscriptions"]["s"]

        _wait_for(lambda: sub()["msgBacklog"] == 0)
        assert time.time() - sent >= 2.0  # not before the TTL
        assert sub()["totalMsgExpired"] == 25
        # Expiry moved the cursor; trimming then deleted the two rolled-over ledgers whole and
        # kept the current one (a ledger is the unit of deletion, seed 001).
        _wait_for(lambda: _internal(broker, "ttl")["numberOfEntries"] == 5)
        assert "pulsar_subscription_total_msg_expired{" in _metrics(broker)

        # What is younger than the TTL stays, and is what a consumer gets.
        for i in range(3):
            producer.send(f"new{i}".encode())
        consumer = client.subscribe("ttl", "s", consumer_type=pulsar.ConsumerType.Shared)
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(3)]
        assert got == [b"new0", b"new1", b"new2"]
    finally:
        client.close()
        broker.stop()


@pytest.mark.parametrize(
    "mode", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared], ids=["Shared", "KeyShared"]
)
def test_delayed_message_is_delivered_no_earlier_than_asked(broker, mode):
    from datetime import timedelta

    topic = f"delayed-{mode}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        got: dict[bytes, float] = {}

        def arrived(consumer, msg) -> None:
            got[msg.data()] = time.time()
            consumer.acknowledge(msg)

        client.subscribe(topic, "s", consumer_type=mode, message_listener=arrived)
        producer = client.create_producer(topic, batching_enabled=False)
        asked = time.time()
        producer.send(b"late", partition_key="k", deliver_after=timedelta(seconds=2))
        for i in range(3):
            producer.send(f"now{i}".encode(), partition_key="k")
        _wait_for(lambda: len(got) == 4, timeout_s=10)
        # The delayed one did not hold back those behind it, and came at its time, not before.
        assert all(got[f"now{i}".encode()] - asked < 1.0 for i in range(3)), got
        # deliver_at_time is in whole milliseconds (the client truncates it): allow 2 ms.
        assert got[b"late"] - asked >= 2.0 - 0.002
        assert got[b"late"] > max(got[f"now{i}".encode()] for i in range(3))
    finally:
        client.close()


def test_delayed_delivery_policy_off_and_exclusive_deliver_at_once(broker):
    from datetime import timedelta

    body = {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}
    assert _call(broker, "POST", f"{TOPIC_PATH}/delay-off/delayedDelivery", body)[0] == 204
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        for topic, mode in (
            ("delay-off", pulsar.ConsumerType.Shared),
            ("delay-exclusive", pulsar.ConsumerType.Exclusive),
        ):
            consumer = client.subscribe(topic, "s", consumer_type=mode)
            producer = client.create_producer(topic, batching_enabled=False)
            asked = time.time()
            producer.send(b"x", deliver_after=timedelta(seconds=5))
            assert consumer.receive(timeout_millis=3000).data() == b"x"
            assert time.time() - asked < 3.0
    finally:
        client.close()


def test_a_topics_max_delivery_delay_refuses_longer_delays_and_keeps_shorter(broker):
    """The refusal itself is checked on the wire (tests/unit/test_broker_max_delivery_delay.py):
    the official C++ client answers SEND_ERROR by reconnecting and sending the same message
    again, so here a raw socket sends the refused one and the official client the rest."""
    from datetime import timedelta

    topic = "delay-capped"
    body = {"active": True, "tickTime": 100, "maxDeliveryDelayInMillis": 1000}
    assert _call(broker, "POST", f"{TOPIC_PATH}/{topic}/delayedDelivery", body)[0] == 204
    assert _call(broker, "GET", f"{TOPIC_PATH}/{topic}/delayedDelivery")[1] == body
    refused = _raw_delayed_send(broker, f"persistent://public/default/{topic}", 5000)
    assert refused.type == T.SEND_ERROR and refused.send_error.error == pb.NotAllowedError
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        asked = time.time()
        producer.send(b"in-time", deliver_after=timedelta(milliseconds=500))
        producer.send(b"now")
        got = [consumer.receive(timeout_millis=5000) for _ in range(2)]
        assert [m.data() for m in got] == [b"now", b"in-time"]
        assert time.time() - asked >= 0.5 - 0.002
        assert _stats(broker, topic)["msgInCounter"] == 2
    finally:
        client.close()


def _raw_delayed_send(broker, topic: str, delay_ms: int) -> pb.BaseCommand:
    """CONNECT, PRODUCER and one SEND asking for `delay_ms` over a plain socket: the answer."""
    host, port = broker.url.removeprefix("pulsar://").rsplit(":", 1)
    now = int(time.time() * 1000)
    meta = pb.MessageMetadata(
        producer_name="raw", sequence_id=0, publish_time=now, deliver_at_time=now + delay_ms
    )
    frames = [
        encode_frame(command(T.CONNECT, client_version="raw", protocol_version=20)),
        encode_frame(command(T.PRODUCER, topic=topic, producer_id=1, request_id=1)),
        encode_frame(command(T.SEND, producer_id=1, sequence_id=0), encode_payload(meta, b"x")),
    ]
    decoder = FrameDecoder()
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"".join(frames))
        while True:
            data = sock.recv(65536)
            assert data, "the broker closed the connection"
            decoder.receive_data(data)
            for frame in decoder.frames():
                if frame.command.type in (T.SEND_ERROR, T.SEND_RECEIPT):
                    return frame.command


def test_backlog_quota_eviction_drops_the_oldest_for_a_subscription_over_it(broker):
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.subscribe("evict", "slow", consumer_type=pulsar.ConsumerType.Shared).close()
        # About ten 1 KB entries (the size is estimated from the newest entries' payloads).
        quota = {"limitSize": 10 * 1100, "limitTime": -1, "policy": "consumer_backlog_eviction"}
        path = f"{TOPIC_PATH}/evict/backlogQuota?backlogQuotaType=destination_storage"
        assert _call(broker, "POST", path, quota)[0] == 204
        producer = client.create_producer("evict", batching_enabled=False)
        for i in range(50):
            producer.send(f"{i:04d}".encode() + b"x" * 1000)

        def sub() -> dict[str, Any]:
            return _stats(broker, "evict")["subscriptions"]["slow"]

        _wait_for(lambda: sub()["msgBacklog"] <= 10)
        kept = sub()["msgBacklog"]
        assert kept >= 5  # evicted down to the quota, not emptied
        assert sub()["msgBacklogEvicted"] == 50 - kept
        assert _stats(broker, "evict")["backlogQuotaEvictions"] >= 1
        name = "pulsar_storage_backlog_quota_exceeded_evictions_total"
        assert _metric(broker, name, "evict") == _stats(broker, "evict")["backlogQuotaEvictions"]
        # The producer was never held: eviction is the consumer's loss, not the producer's.
        assert _stats(broker, "evict")["backlogQuotaHoldTimes"] == 0
        consumer = client.subscribe("evict", "slow", consumer_type=pulsar.ConsumerType.Shared)
        got = [consumer.receive(timeout_millis=5000).data()[:4] for _ in range(kept)]
        assert got == [f"{i:04d}".encode() for i in range(50 - kept, 50)]
    finally:
        client.close()


def test_backlog_quota_hold_stops_reading_the_producer_until_the_backlog_drains(broker):
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.subscribe("hold", "s", consumer_type=pulsar.ConsumerType.Shared).close()
        quota = {"limitSize": 5 * 1100, "limitTime": -1, "policy": "producer_request_hold"}
        path = f"{TOPIC_PATH}/hold/backlogQuota?backlogQuotaType=destination_storage"
        assert _call(broker, "POST", path, quota)[0] == 204
        producer = client.create_producer(
            "hold", batching_enabled=False, send_timeout_millis=30_000
        )
        receipts: list[float] = []

        def receipt(result, msg_id) -> None:
            assert result == pulsar.Result.Ok
            receipts.append(time.time())

        # Paced, so that each SEND is a read of its own: the hold falls between two of them.
        for i in range(40):
            producer.send_async(f"{i:04d}".encode() + b"x" * 1000, receipt)
            time.sleep(0.05)
        _wait_for(lambda: _stats(broker, "hold")["backlogQuotaHoldTimes"] >= 1)
        _wait_for(lambda: len(receipts) == _stats(broker, "hold")["msgInCounter"])
        held_at = len(receipts)
        assert held_at < 40  # held: the rest wait unread
        time.sleep(1.0)  # an idle second: nothing is consumed, so nothing more is published
        assert len(receipts) == held_at

        # The backlog drains: the next check releases the producer, and all are published.
        # (A client of its own: the hold pauses the producer's whole connection, as Pulsar's
        # autoread does, so a consumer sharing it would be held too.)
        reader = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            consumer = reader.subscribe("hold", "s", consumer_type=pulsar.ConsumerType.Shared)
            got: list[bytes] = []
            while len(got) < 40:
                msg = consumer.receive(timeout_millis=10_000)
                got.append(msg.data()[:4])
                consumer.acknowledge(msg)
            assert got == [f"{i:04d}".encode() for i in range(40)]
            _wait_for(lambda: len(receipts) == 40)
        finally:
            reader.close()
    finally:
        client.close()


def test_ack_holes_are_counted_and_redelivered_by_the_compensation_task(tmp_path):
    broker = start_broker(
        tmp_path / "data",
        extra=(
            "--set",
            "journalSyncData=false",
            "--set",
            "ackHoleRedeliveryIntervalSeconds=0.5",
            "--set",
            "ackHoleRedeliveryMinAgeSeconds=1.5",
        ),
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe("holes", "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer("holes", batching_enabled=False)
        for i in range(20):
            producer.send(f"m{i}".encode())
        for _ in range(20):
            msg = consumer.receive(timeout_millis=5000)
            if msg.data() not in (b"m3", b"m7"):  # the consumer "forgets" two
                consumer.acknowledge(msg)

        def sub() -> dict[str, Any]:
            return _stats(broker, "holes")["subscriptions"]["s"]

        _wait_for(lambda: sub()["nonContiguousDeletedMessagesRanges"] == 2, timeout_s=5)
        cursor = _internal(broker, "holes")["cursors"]["s"]
        assert cursor["individuallyDeletedMessages"].count("(") == 2, cursor
        assert sub()["msgBacklog"] == 2

        # Nobody asks for them: the broker sends the two held holes again once old enough.
        again = [consumer.receive(timeout_millis=10_000) for _ in range(2)]
        assert sorted(m.data() for m in again) == [b"m3", b"m7"]
        assert all(m.redelivery_count() == 1 for m in again)
        # Not before the minimum age (1.5 s) since publication, on this host's one clock. (The
        # consumer's own first sight of a message can come late under load: not a bound.)
        assert all(time.time() * 1000 - m.publish_timestamp() >= 1400 for m in again)
        assert sub()["ackHoleRedeliveries"] == 2
        for m in again:
            consumer.acknowledge(m)
        _wait_for(lambda: sub()["nonContiguousDeletedMessagesRanges"] == 0, timeout_s=5)
        assert sub()["msgBacklog"] == 0
    finally:
        client.close()
        broker.stop()


def _bench_run(workload: Path, results: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload), "--no-analysis"]
        + ["--results", str(results)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )


# Asking twice the limit for 4 s (the drain then empties what the client queued, at the limit's
# 20 a second: asking 60 for 6 s left 18 s of drain).
RUN = """\
name: policies
messageSize: 1024
producerRate: 40
subscriptionType: Shared
warmupDurationSeconds: 1
testDurationSeconds: 3
drainSeconds: 1
topicPolicies:
  publishRate: {publishThrottlingRateInMsg: 20, publishThrottlingRateInByte: -1}
"""


def test_a_workloads_topic_policies_are_set_before_the_run(tmp_path):
    workload = tmp_path / "policies.yaml"
    workload.write_text(RUN)
    result = _bench_run(workload, tmp_path / "results")
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["workload"]["topicPolicies"] == {
        "publishRate": {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}
    }
    (stats,) = json.loads((run_dir / "broker" / "topic-stats.json").read_text()).values()
    # A producer asking 40 msg/s of a topic limited to 20 was held back, window after window.
    assert stats["publishRateLimitedTimes"] >= 3


def test_a_policy_the_broker_refuses_stops_the_run_with_its_reason(tmp_path):
    workload = tmp_path / "bad.yaml"
    workload.write_text(RUN.replace("publishThrottlingRateInMsg: 20", "publishRateInMsg: 20"))
    result = _bench_run(workload, tmp_path / "results")
    assert result.returncode != 0
    assert "topicPolicies" in result.stderr and "publishRateInMsg" in result.stderr


def test_backlog_quota_exception_fails_the_producer_until_the_backlog_drains(broker):
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.subscribe("exc", "s", consumer_type=pulsar.ConsumerType.Shared).close()
        quota = {"limitSize": 5 * 1100, "limitTime": -1, "policy": "producer_exception"}
        path = f"{TOPIC_PATH}/exc/backlogQuota?backlogQuotaType=destination_storage"
        assert _call(broker, "POST", path, quota)[0] == 204
        producer = client.create_producer("exc", batching_enabled=False, send_timeout_millis=5000)
        sent = 0
        failure: Exception | None = None
        for _ in range(200):
            try:
                producer.send(b"x" * 1000)
            except pulsar.PulsarException as exc:
                failure = exc
                break
            sent += 1
            time.sleep(0.02)
        assert isinstance(failure, pulsar.ProducerBlockedQuotaExceededException), failure
        assert sent >= 5
        assert _stats(broker, "exc")["backlogQuotaExceptions"] >= 1

        # Drained by a consumer (on a client of its own), the producer is admitted again.
        reader = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            consumer = reader.subscribe("exc", "s", consumer_type=pulsar.ConsumerType.Shared)
            for _ in range(sent):
                consumer.acknowledge(consumer.receive(timeout_millis=5000))
            deadline = time.monotonic() + 40
            while True:
                try:
                    producer.send(b"again")
                    break
                except pulsar.PulsarException:
                    assert time.monotonic() < deadline, "the producer was never admitted again"
                    time.sleep(0.5)
            # (What the failed sends left on the topic, if anything, comes first.)
            for _ in range(200):
                msg = consumer.receive(timeout_millis=5000)
                consumer.acknowledge(msg)
                if msg.data() == b"again":
                    break
            else:
                raise AssertionError("the message sent after the backlog drained never came")
        finally:
            reader.close()
    finally:
        client.close()


def test_subscription_dispatch_rate_paces_a_broadcast_subscriptions_entries(broker):
    """For Broadcast the rate counts the entries the subscription reads: each of them goes to
    every consumer, so each consumer gets at most the rate per window."""
    limit = 10
    body = _messages_per_window(limit)
    assert _call(broker, "POST", f"{TOPIC_PATH}/bc-rate/subscriptionDispatchRate", body)[0] == 204
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        arrivals = [Arrivals() for _ in range(3)]
        for i, listener in enumerate(arrivals):
            client.subscribe(
                "bc-rate",
                "all",
                consumer_name=f"c{i}",
                properties={"subscriptionMode": "broadcast"},
                message_listener=listener,
            )
        producer = client.create_producer("bc-rate", batching_enabled=False)
        n = 3 * limit
        since = time.time()
        for i in range(n):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        for listener in arrivals:
            windows = _within_rate(listener.wait_for(n), limit, since)
            assert len(windows) >= 3
        sub = _stats(broker, "bc-rate")["subscriptions"]["all"]
        assert sub["type"] == "Broadcast"
        assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] >= 2
    finally:
        client.close()


RESTART_DELAY_S = 12.0
"""The delay of the message sent before the restart: longer than a restart and a resubscribe
take under the load of `make test` (with 5 s they once took longer, both were due at once, and
the ordering checked nothing), so the consumer is there before it is due."""


def test_a_delayed_message_stays_delayed_across_a_restart(shared, broker):
    from datetime import timedelta

    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    client.subscribe("delay-restart", "s", consumer_type=pulsar.ConsumerType.Shared).close()
    producer = client.create_producer("delay-restart", batching_enabled=False)
    asked = time.time()
    producer.send(b"later", deliver_after=timedelta(seconds=RESTART_DELAY_S))
    producer.send(b"now")
    client.close()
    broker = shared.broker = broker.restart()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        arrivals: dict[bytes, float] = {}

        def arrived(consumer, msg) -> None:
            arrivals[msg.data()] = time.time()
            consumer.acknowledge(msg)

        client.subscribe(
            "delay-restart",
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            message_listener=arrived,
        )
        subscribed = time.time()
        # The ordering below is a claim only if the consumer came before "later" was due:
        # were the restart ever this slow, the test says so rather than pass or fail on
        # which of two due messages goes first.
        assert subscribed - asked < RESTART_DELAY_S - 1.0, (
            f"the restart and resubscribe took {subscribed - asked:.1f} s of the "
            f"{RESTART_DELAY_S} s delay"
        )
        _wait_for(lambda: len(arrivals) == 2, timeout_s=asked + RESTART_DELAY_S + 10 - time.time())
        # The one not delayed came at once, while the delayed one was still held...
        assert arrivals[b"now"] - asked < RESTART_DELAY_S, arrivals
        # ...and that came at its time, not before: deliver_at_time is in whole
        # milliseconds (the client truncates it), allow 2 ms.
        assert arrivals[b"later"] - asked >= RESTART_DELAY_S - 0.002
        assert arrivals[b"now"] < arrivals[b"later"]
    finally:
        client.close()
