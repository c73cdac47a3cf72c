"""The bundled broker driven by the official Apache pulsar-client, on loopback."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest

from results_contract.harness_cost import BROKER_CPU_SECONDS, BROKER_DELIVERIES, BROKER_LOOP_LAG
from tests.conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.integration

RECEIVE_MS = 5000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the file: every test names topics of its own, and a broker start is
    about 0.75 CPU-s (these were fifteen). The stats test starts its own, which it stops."""
    b = start_broker(
        tmp_path_factory.mktemp("pulsar-client") / "data", extra=("--set", "journalSyncData=false")
    )
    yield b
    b.stop()


@pytest.fixture
def client(broker):
    c = pulsar.Client(broker.url, operation_timeout_seconds=10)
    yield c
    c.close()


def _drain(consumer, n, ack=True):
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return out


def _nothing_more(consumer, wait_ms=300) -> bool:
    try:
        consumer.receive(timeout_millis=wait_ms)
    except pulsar.Timeout:
        return True
    return False


def test_exclusive_second_consumer_gets_consumer_busy(client):
    client.subscribe("ex", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe("ex", "s", consumer_type=pulsar.ConsumerType.Exclusive)


def test_exclusive_delivers_in_order_with_cumulative_ack(client):
    consumer = client.subscribe("ex-order", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer("ex-order", batching_enabled=False)
    for i in range(50):
        producer.send(f"m{i}".encode())
    msgs = _drain(consumer, 50, ack=False)
    assert [m.data() for m in msgs] == [f"m{i}".encode() for i in range(50)]
    consumer.acknowledge_cumulative(msgs[-1])
    consumer.close()
    again = client.subscribe("ex-order", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    assert _nothing_more(again)


def test_shared_spreads_messages_and_each_goes_to_one_consumer(client):
    consumers = [
        client.subscribe(
            "sh",
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            receiver_queue_size=10,
            consumer_name=f"c{i}",
        )
        for i in range(3)
    ]
    producer = client.create_producer("sh", batching_enabled=False)
    for i in range(30):
        producer.send(f"m{i}".encode())
    seen = []
    counts = []
    for c in consumers:
        got = []
        while True:
            try:
                msg = c.receive(timeout_millis=500)
            except pulsar.Timeout:
                break
            got.append(msg.data())
            c.acknowledge(msg)
        counts.append(len(got))
        seen += got
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(30))
    assert all(n > 0 for n in counts), counts


def test_failover_switches_to_the_next_consumer(client):
    first = client.subscribe(
        "fo", "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a"
    )
    second = client.subscribe(
        "fo", "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b"
    )
    producer = client.create_producer("fo", batching_enabled=False)
    producer.send(b"one")
    assert first.receive(timeout_millis=RECEIVE_MS).data() == b"one"
    assert _nothing_more(second)
    first.close()
    producer.send(b"two")
    got = _drain(second, 2)
    # "one" was never acknowledged, so the new active consumer gets it again, then "two".
    assert [m.data() for m in got] == [b"one", b"two"]


def test_key_shared_keeps_per_key_order_across_consumers(client):
    consumers = [
        client.subscribe(
            "ks", "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"c{i}"
        )
        for i in range(3)
    ]
    producer = client.create_producer("ks", batching_enabled=False)
    keys = [f"k{i}" for i in range(12)]
    for n in range(10):
        for k in keys:
            producer.send(f"{k}:{n}".encode(), partition_key=k)
    owners: dict[str, int] = {}
    per_key: dict[str, list[int]] = {}
    total = 0
    for idx, c in enumerate(consumers):
        while True:
            try:
                msg = c.receive(timeout_millis=500)
            except pulsar.Timeout:
                break
            key, n = msg.data().decode().split(":")
            assert owners.setdefault(key, idx) == idx, f"key {key} went to two consumers"
            per_key.setdefault(key, []).append(int(n))
            c.acknowledge(msg)
            total += 1
    assert total == 120
    assert all(v == list(range(10)) for v in per_key.values())
    assert len(set(owners.values())) > 1


def test_negative_ack_redelivers_with_redelivery_count(client):
    consumer = client.subscribe(
        "nack", "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer("nack", batching_enabled=False)
    producer.send(b"x")
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    assert msg.redelivery_count() == 0
    consumer.negative_acknowledge(msg)
    again = consumer.receive(timeout_millis=RECEIVE_MS)
    assert again.data() == b"x"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_individual_ack_leaves_a_hole_that_is_redelivered(client):
    consumer = client.subscribe("hole", "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer("hole", batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode())
    msgs = _drain(consumer, 5, ack=False)
    for m in msgs:
        if m.data() != b"m2":
            consumer.acknowledge(m)
    consumer.redeliver_unacknowledged_messages()
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"m2"


def test_batches_are_delivered_message_by_message(client):
    consumer = client.subscribe("batch", "s")
    producer = client.create_producer(
        "batch", batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
    )
    for i in range(30):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    msgs = _drain(consumer, 30)
    assert [m.data() for m in msgs] == [f"m{i}".encode() for i in range(30)]


def test_partitioned_topic(client, broker):
    req = urllib.request.Request(
        f"{broker.admin}/admin/v2/persistent/public/default/parts/partitions",
        data=b"3",
        method="PUT",
    )
    urllib.request.urlopen(req, timeout=5)
    consumer = client.subscribe("parts", "s")
    producer = client.create_producer(
        "parts",
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    assert len(client.get_topic_partitions("parts")) == 3
    for i in range(9):
        producer.send(f"m{i}".encode())
    got = sorted(m.data() for m in _drain(consumer, 9))
    assert got == sorted(f"m{i}".encode() for i in range(9))


def test_broadcast_delivers_every_message_to_every_one_of_100_consumers_in_order(client, broker):
    consumers = [
        client.subscribe(
            "bc",
            "all",
            consumer_type=pulsar.ConsumerType.Shared,
            properties={"subscriptionMode": "broadcast"},
            consumer_name=f"c{i}",
            receiver_queue_size=100,
        )
        for i in range(100)
    ]
    producer = client.create_producer("bc", batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    expected = [f"m{i}".encode() for i in range(20)]
    for c in consumers:
        assert [m.data() for m in _drain(c, 20)] == expected
    with urllib.request.urlopen(
        f"{broker.admin}/admin/v2/persistent/public/default/bc/stats", timeout=5
    ) as resp:
        stats = json.load(resp)
    sub = stats["subscriptions"]["all"]
    assert sub["type"] == "Broadcast"
    assert len(sub["consumers"]) == 100


def test_broadcast_slow_consumer_does_not_hold_back_the_others(client):
    slow = client.subscribe(
        "bc-slow",
        "all",
        properties={"subscriptionMode": "broadcast"},
        receiver_queue_size=1,
        consumer_name="slow",
    )
    fast = client.subscribe(
        "bc-slow", "all", properties={"subscriptionMode": "broadcast"}, consumer_name="fast"
    )
    producer = client.create_producer("bc-slow", batching_enabled=False)
    for i in range(50):
        producer.send(f"m{i}".encode())
    assert len(_drain(fast, 50)) == 50
    assert [m.data() for m in _drain(slow, 50)] == [f"m{i}".encode() for i in range(50)]


def test_malformed_frame_closes_only_that_connection(client, broker):
    producer = client.create_producer("still-ok", batching_enabled=False)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as bad:
        bad.sendall(struct.pack(">II", 12, 8) + b"\xff" * 8)
        bad.settimeout(5)
        data = b""
        while chunk := bad.recv(4096):
            data += chunk
    assert data, "the broker answers an Error before closing"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as huge:
        huge.sendall(struct.pack(">I", 1 << 30))
        huge.settimeout(5)
        while huge.recv(4096):
            pass
    consumer = client.subscribe("still-ok", "s", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"fine")
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"fine"


def test_non_persistent_topic_delivers_to_connected_consumers(client):
    topic = "non-persistent://public/default/np"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in _drain(consumer, 10)] == [f"m{i}".encode() for i in range(10)]


def _admin_get(broker, path):
    with urllib.request.urlopen(f"{broker.admin}{path}", timeout=5) as resp:
        return resp.read().decode()


def test_admin_internal_stats_show_the_ack_hole_and_metrics(client, broker):
    consumer = client.subscribe("holes", "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer("holes", batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(6)]
    for msg in _drain(consumer, 6, ack=False):
        if msg.data() != b"m2":
            consumer.acknowledge(msg)
    ledger = ids[0].ledger_id()
    expected_mark = f"{ledger}:{ids[1].entry_id()}"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stats = json.loads(
            _admin_get(broker, "/admin/v2/persistent/public/default/holes/internalStats")
        )
        cursor = stats["cursors"]["s"]
        if (
            cursor["markDeletePosition"] == expected_mark
            and cursor["individuallyDeletedMessages"] != "[]"
        ):
            break
        time.sleep(0.1)
    assert cursor["markDeletePosition"] == expected_mark
    assert cursor["individuallyDeletedMessages"] == (
        f"[({ledger}:{ids[2].entry_id()}..{ledger}:{ids[5].entry_id()}]]"
    )
    topic = json.loads(_admin_get(broker, "/admin/v2/persistent/public/default/holes/stats"))
    assert topic["subscriptions"]["s"]["msgBacklog"] == 1
    assert "msgRateIn" in topic
    metrics = _admin_get(broker, "/metrics")
    assert 'pulsar_subscription_back_log{topic="persistent://public/default/holes",' in metrics


def test_admin_created_broadcast_subscription_is_used_without_a_property(client, broker):
    req = urllib.request.Request(
        f"{broker.admin}/admin/v2/persistent/public/default/pre/subscription/all"
        "?subscriptionMode=broadcast",
        method="PUT",
    )
    urllib.request.urlopen(req, timeout=5)
    consumers = [
        client.subscribe(
            "pre", "all", consumer_type=pulsar.ConsumerType.Shared, consumer_name=f"c{i}"
        )
        for i in range(3)
    ]
    producer = client.create_producer("pre", batching_enabled=False)
    producer.send(b"to everyone")
    for c in consumers:
        assert c.receive(timeout_millis=RECEIVE_MS).data() == b"to everyone"


def test_stats_carry_cumulative_cpu_seconds_and_deliveries(tmp_path):
    """broker/stats-<n>.json has what the harness-cost figures need: the process's cumulative
    CPU seconds and the deliveries dispatched (a Broadcast message to 3 consumers counts 3)."""
    stats_dir = tmp_path / "stats"
    broker = start_broker(tmp_path / "data", extra=("--stats-dir", str(stats_dir)))
    try:
        c = pulsar.Client(broker.url, operation_timeout_seconds=10)
        consumers = [
            c.subscribe(
                "cost",
                "all",
                consumer_type=pulsar.ConsumerType.Shared,
                properties={"subscriptionMode": "broadcast"},
                consumer_name=f"c{i}",
            )
            for i in range(3)
        ]
        producer = c.create_producer("cost", batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        for consumer in consumers:
            _drain(consumer, 5)
        c.close()
    finally:
        broker.stop()  # the broker writes one last snapshot as it stops
    files = sorted(stats_dir.glob("stats-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    snapshots = [json.loads(p.read_text()) for p in files]
    last = snapshots[-1]
    assert last[BROKER_DELIVERIES] == 15
    assert isinstance(last[BROKER_CPU_SECONDS], float) and last[BROKER_CPU_SECONDS] > 0
    # Cumulative: never decreasing from one snapshot to the next.
    cpu = [s[BROKER_CPU_SECONDS] for s in snapshots]
    assert cpu == sorted(cpu)
    # The loop's lag since the previous snapshot: sampled (a timer every 20 ms), ordered. The
    # last snapshot, written as the broker stops, may follow the one before it too closely to
    # hold a sample (all zeros then), so the samples are looked for in every snapshot.
    lags = [s[BROKER_LOOP_LAG] for s in snapshots]
    assert all(0 <= lag["p50_ms"] <= lag["p99_ms"] <= lag["max_ms"] for lag in lags), lags
    assert any(lag["p50_ms"] > 0 for lag in lags), lags
