"""The native Pulsar driver against the bundled broker (a real process on loopback), and
against the official Apache pulsar-client in both directions."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator

import gevent
import pulsar
import pytest

from drivers.base import BrokerStamps, ConsumerSpec, DriverError
from drivers.pulsar.driver import PulsarDriver
from drivers.pulsar.producer import PulsarProducer
from drivers.pulsar.settings import ClientConfig, ConsumerConfig, ProducerConfig, PulsarConfig
from tests.conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.integration

WAIT = 10.0
SLACK_US = 2_000  # receive and dispatch stamps come from one clock; allow for its granularity


def at_most(seconds: float) -> gevent.Timeout:
    """A block that ends quietly after `seconds` (the assertion after it says what was due)."""
    # gevent documents exception=False as "expire silently"; types-gevent's stub omits it.
    return gevent.Timeout(seconds, False)  # type: ignore[arg-type]


class Deliveries:
    """A ConsumerCallback that keeps every delivery per consumer (and its kernel time apart)."""

    def __init__(self) -> None:
        self.by_consumer: dict[int, list[tuple[bytes, int, BrokerStamps | None]]] = {}
        self.kernel_us: dict[bytes, int] = {}
        self.count = 0
        self.on_delivery: Callable[[bytes], None] = lambda payload: None

    def message_received(self, consumer_index, payload, receive_us, stamps, kernel_us) -> None:
        self.by_consumer.setdefault(consumer_index, []).append((payload, receive_us, stamps))
        self.kernel_us[payload] = kernel_us
        self.count += 1
        self.on_delivery(payload)

    def messages_received(self, consumer_indexes, payload, receive_us, stamps, kernel_us) -> None:
        for index in consumer_indexes:
            self.message_received(index, payload, receive_us, stamps, kernel_us)

    def wait_for(self, n: int) -> None:
        with at_most(WAIT):
            while self.count < n:
                gevent.sleep(0.005)
        assert self.count == n


def config(**consumer) -> PulsarConfig:
    return PulsarConfig(
        client=ClientConfig(
            source_addresses=0, connect_timeout_seconds=3, operation_timeout_seconds=5
        ),
        producer=ProducerConfig(
            batching_enabled=False, max_pending_messages=100, send_timeout_ms=5000
        ),
        consumer=ConsumerConfig(
            **{
                "receiver_queue_size": 1000,
                "ack_group_time_ms": 20,
                "ack_mode": "cumulative",
                **consumer,
            }
        ),
    )


def free_ports() -> tuple[int, int]:
    """Two adjacent free ports in 20000-29999 (below the ephemeral range), from a start that
    differs between processes so parallel runs do not race for the same ones."""
    start = (os.getpid() * 13) % 10000
    for step in range(0, 10000, 2):
        port = 20000 + (start + step) % 9998
        if all(_bindable(p) for p in (port, port + 1)):
            return port, port + 1
    raise RuntimeError("no free ports in 20000-29999")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path_factory.mktemp("native") / "data",
        *free_ports(),
        ("--set", "journalSyncData=false"),
    )
    yield b
    b.stop()


@pytest.fixture
def native(broker) -> Iterator:
    drivers: list[PulsarDriver] = []

    def make(
        consumers_per_connection: int = 1,
        cfg: PulsarConfig | None = None,
        url: str | None = None,
    ) -> tuple[PulsarDriver, Deliveries]:
        driver, deliveries = PulsarDriver(), Deliveries()
        driver.initialize(
            cfg or config(),
            deliveries,
            consumers_per_connection=consumers_per_connection,
            service_url=url or broker.url,
            admin_url=broker.admin,
        )
        drivers.append(driver)
        return driver, deliveries

    yield make
    for driver in drivers:
        driver.close()


def subscribe_all(driver: PulsarDriver, specs: list[ConsumerSpec]) -> list:
    """Subscribe concurrently, as the connect storm does."""
    tasks = [gevent.spawn(driver.subscribe, spec) for spec in specs]
    gevent.joinall(tasks, timeout=WAIT, raise_error=True)
    return [t.value for t in tasks]


def send_all(producer, bodies: list[bytes], key: bytes | None = None) -> list:
    done: list = []
    for body in bodies:
        producer.send_async(key, body, done.append)
    with at_most(WAIT):
        while len(done) < len(bodies):
            gevent.sleep(0.005)
    return done


def stats(broker: BrokerProcess, topic: str, what: str = "stats") -> dict:
    url = f"{broker.admin}/admin/v2/persistent/public/default/{topic}/{what}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())


def test_broadcast_to_200_consumers_over_4_connections(broker, native):
    driver, deliveries = native(consumers_per_connection=50)
    specs = [ConsumerSpec(i, f"c{i}", "bcast", "all", "Broadcast") for i in range(200)]
    results = subscribe_all(driver, specs)
    assert [r.error for r in results if not r.ok] == []
    assert sorted({r.connection for r in results}) == [0, 1, 2, 3]
    assert all(r.start_us <= r.end_us for r in results)
    assert stats(broker, "bcast")["subscriptions"]["all"]["type"] == "Broadcast"

    producer = driver.create_producer("bcast")
    bodies = [b"message-%02d" % k for k in range(20)]
    assert send_all(producer, bodies) == [None] * 20
    deliveries.wait_for(200 * 20)
    for index in range(200):
        got = deliveries.by_consumer[index]
        assert [body for body, _, _ in got] == bodies
        for _, receive_us, stamps in got:
            assert stamps is not None and stamps.complete
            assert receive_us >= stamps.dispatch_us - SLACK_US
    # Cumulative acks reach the broker: nothing is left for any virtual cursor.
    with at_most(WAIT):
        while stats(broker, "bcast")["subscriptions"]["all"]["msgBacklog"]:
            gevent.sleep(0.05)
    assert stats(broker, "bcast")["subscriptions"]["all"]["msgBacklog"] == 0


@pytest.mark.parametrize("per_connection,subscription_type", [(100, "Broadcast"), (1, "Shared")])
def test_a_group_subscribes_in_one_go_as_consumers_one_by_one(
    broker, native, per_connection, subscription_type
):
    """PulsarDriver.subscribe_group (a Locust user's group): every consumer answered, in the
    order given, on the connections `subscribe` would use; a refused one fails alone."""
    driver, deliveries = native(consumers_per_connection=per_connection)
    topic = f"group-{per_connection}"
    names = [f"sub-{i}" if subscription_type == "Shared" else "all" for i in range(150)]
    specs = [ConsumerSpec(i, f"c{i}", topic, names[i], subscription_type) for i in range(150)]
    with at_most(WAIT):
        results = driver.subscribe_group(specs)
    assert [r.index for r in results] == list(range(150))
    assert [r.error for r in results if not r.ok] == []
    assert all(r.start_us <= r.end_us for r in results)
    expected = {i // per_connection for i in range(150)}
    assert len({r.connection for r in results}) == len(expected)
    producer = driver.create_producer(topic)
    assert send_all(producer, [b"one", b"two"]) == [None, None]
    deliveries.wait_for(150 * 2)
    assert all(
        [body for body, _, _ in deliveries.by_consumer[i]] == [b"one", b"two"] for i in range(150)
    )
    # Three Exclusive consumers of one subscription: one wins, the others are refused alone.
    lone = [ConsumerSpec(200 + i, f"x{i}", topic, "excl", "Exclusive") for i in range(3)]
    outcomes = driver.subscribe_group(lone)
    assert sorted(r.ok for r in outcomes) == [False, False, True]
    assert all(r.error for r in outcomes if not r.ok)


def test_shared_with_one_subscription_per_consumer(broker, native):
    cfg = config(ack_mode="individual")
    cfg = dataclasses.replace(cfg, client=dataclasses.replace(cfg.client, source_addresses=2))
    driver, deliveries = native(consumers_per_connection=1, cfg=cfg)
    specs = [ConsumerSpec(i, f"c{i}", "per-sub", f"sub-{i}", "Shared") for i in range(10)]
    results = subscribe_all(driver, specs)
    assert all(r.ok for r in results)
    assert len({r.connection for r in results}) == 10
    topic = stats(broker, "per-sub")
    addresses = {
        c["address"].rsplit(":", 1)[0]
        for s in topic["subscriptions"].values()
        for c in s["consumers"]
    }
    assert addresses == {"127.0.0.2", "127.0.0.3"}

    producer = driver.create_producer("per-sub")
    bodies = [b"m%d" % k for k in range(5)]
    assert send_all(producer, bodies, key=b"k") == [None] * 5
    deliveries.wait_for(10 * 5)
    assert all([b for b, _, _ in deliveries.by_consumer[i]] == bodies for i in range(10))
    with at_most(WAIT):
        while any(s["msgBacklog"] for s in stats(broker, "per-sub")["subscriptions"].values()):
            gevent.sleep(0.05)
    assert all(s["msgBacklog"] == 0 for s in stats(broker, "per-sub")["subscriptions"].values())


def test_a_partitioned_topic_end_to_end(broker, native):
    driver, deliveries = native(consumers_per_connection=10)
    driver.create_topic("persistent://public/default/parts3", 3)
    driver.create_topic("persistent://public/default/parts3", 3)  # again: already so, fine
    with pytest.raises(DriverError, match="already exists with 3 partitions, not 4"):
        driver.create_topic("persistent://public/default/parts3", 4)
    specs = [ConsumerSpec(i, f"c{i}", "parts3", "all", "Broadcast") for i in range(20)]
    assert all(r.ok for r in subscribe_all(driver, specs))
    producer = driver.create_producer("parts3")
    unkeyed = [b"u%d" % k for k in range(9)]
    keyed = [b"k%d" % k for k in range(6)]
    assert send_all(producer, unkeyed) == [None] * 9
    assert send_all(producer, keyed, key=b"one-key") == [None] * 6
    deliveries.wait_for(20 * 15)
    for index in range(20):
        got = [body for body, _, _ in deliveries.by_consumer[index]]
        assert sorted(got) == sorted(unkeyed + keyed)
        assert [b for b in got if b.startswith(b"k")] == keyed  # one key, one partition: in order
    counts = [stats(broker, f"parts3-partition-{i}")["msgInCounter"] for i in range(3)]
    # Round robin puts 3 unkeyed messages on each partition; the key puts all 6 on one.
    assert sorted(counts) == [3, 3, 9]
    for i in range(3):
        consumers = stats(broker, f"parts3-partition-{i}")["subscriptions"]["all"]["consumers"]
        assert len(consumers) == 20


def test_the_official_client_reads_what_the_native_producer_routes(broker, native):
    driver, _ = native()
    driver.create_topic("persistent://public/default/parts-official", 2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5)
    try:
        official = client.subscribe("parts-official", "s")
        producer = driver.create_producer("parts-official")
        bodies = [b"m%d" % k for k in range(6)]
        assert send_all(producer, bodies) == [None] * 6
        got = sorted(official.receive(timeout_millis=5000).data() for _ in bodies)
        assert got == sorted(bodies)
    finally:
        client.close()


def test_batches_from_the_native_producer_reach_both_consumers_message_by_message(broker, native):
    cfg = config()
    cfg = dataclasses.replace(
        cfg,
        producer=dataclasses.replace(
            cfg.producer,
            batching_enabled=True,
            batching_max_publish_delay_ms=50,
            batching_max_messages=10,
        ),
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=5)
    try:
        official = client.subscribe("batched", "official")
        driver, deliveries = native(cfg=cfg)
        assert driver.subscribe(ConsumerSpec(0, "c0", "batched", "native", "Shared")).ok
        producer = driver.create_producer("batched")
        bodies = [b"m%02d" % k for k in range(25)]
        assert send_all(producer, bodies, key=b"k") == [None] * 25
        got = [official.receive(timeout_millis=5000) for _ in bodies]
        assert [m.data() for m in got] == bodies
        assert {m.partition_key() for m in got} == {"k"}
        deliveries.wait_for(25)
        assert [body for body, _, _ in deliveries.by_consumer[0]] == bodies
        # 25 messages, 10 to a batch: 3 entries on the broker.
        assert len({stamps for _, _, stamps in deliveries.by_consumer[0]}) == 3
        assert stats(broker, "batched")["msgInCounter"] == 25
    finally:
        client.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPING is Linux's")
def test_a_busy_reader_shows_as_client_delay_not_as_arrival_time(native):
    """The reader is kept busy 200 ms by the first delivery, while the second one reaches the
    socket: the kernel time of the second is its arrival, earlier than its read by most of the
    200 ms; the first, read at once, has next to no client delay."""
    driver, deliveries = native()
    assert all(
        r.ok for r in subscribe_all(driver, [ConsumerSpec(0, "c0", "ktime", "s", "Exclusive")])
    )
    producer = driver.create_producer("ktime")
    # Linux turns stamping on a moment after the first socket asks: wait for a stamped read.
    warm = 0
    with at_most(WAIT):
        while not deliveries.kernel_us.get(b"warm"):
            send_all(producer, [b"warm"])
            warm += 1
            deliveries.wait_for(warm)  # one at a time: none is left in flight after the loop
    assert deliveries.kernel_us.get(b"warm")
    assert driver.kernel_timestamps
    deliveries.by_consumer.clear()
    deliveries.count = 0
    busy_s = 0.2

    def busy_after_first(payload: bytes) -> None:
        if payload == b"first":
            deliveries.on_delivery = lambda payload: None
            producer.send_async(None, b"second", lambda error: None)
            gevent.sleep(busy_s)  # the reader greenlet is away; the broker's bytes wait

    deliveries.on_delivery = busy_after_first
    assert send_all(producer, [b"first"]) == [None]
    deliveries.wait_for(2)
    (first, first_read, _), (second, second_read, stamps) = deliveries.by_consumer[0]
    assert (first, second) == (b"first", b"second")
    first_kernel, second_kernel = deliveries.kernel_us[first], deliveries.kernel_us[second]
    assert 0 < first_kernel <= first_read and 0 < second_kernel <= second_read
    assert stamps is not None and second_kernel >= stamps.dispatch_us - SLACK_US
    assert second_read - second_kernel >= 0.75 * busy_s * 1e6
    assert first_read - first_kernel < 0.25 * busy_s * 1e6


def test_partitions_need_an_admin_url(broker):
    driver = PulsarDriver()
    driver.initialize(config(), Deliveries(), consumers_per_connection=1, service_url=broker.url)
    try:
        driver.create_topic("persistent://public/default/whatever", 1)  # plain: nothing to do
        with pytest.raises(DriverError, match="set client.adminUrl"):
            driver.create_topic("persistent://public/default/whatever", 2)
    finally:
        driver.close()


def test_a_second_exclusive_consumer_is_refused_with_consumer_busy(native):
    driver, _ = native(consumers_per_connection=10)
    first = driver.subscribe(ConsumerSpec(0, "c0", "excl", "s", "Exclusive"))
    second = driver.subscribe(ConsumerSpec(1, "c1", "excl", "s", "Exclusive"))
    assert first.ok
    assert not second.ok
    assert second.error.startswith("ConsumerBusy: ")
    assert second.connection == first.connection


def test_the_official_producer_reaches_the_native_consumer(broker, native):
    driver, deliveries = native()
    assert driver.subscribe(ConsumerSpec(0, "c0", "from-official", "s", "Shared")).ok
    client = pulsar.Client(broker.url, operation_timeout_seconds=5)
    try:
        plain = client.create_producer("from-official", batching_enabled=False)
        plain.send(b"plain")
        batched = client.create_producer(
            "from-official",
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=1000,
        )
        for body in (b"b1", b"b2", b"b3"):
            batched.send_async(body, None)
        batched.flush()
    finally:
        client.close()
    deliveries.wait_for(4)
    got = deliveries.by_consumer[0]
    assert [body for body, _, _ in got] == [b"plain", b"b1", b"b2", b"b3"]
    assert len({stamps for _, _, stamps in got[1:]}) == 1  # one entry: the batch


def test_the_native_producer_reaches_the_official_consumer(broker, native):
    client = pulsar.Client(broker.url, operation_timeout_seconds=5)
    try:
        official = client.subscribe("from-native", "s", consumer_type=pulsar.ConsumerType.Shared)
        cfg = config(verify_checksum=True)
        driver, deliveries = native(cfg=cfg)
        assert driver.subscribe(ConsumerSpec(0, "c0", "from-native", "native", "Shared")).ok
        producer = driver.create_producer("from-native")
        body = bytes(range(256)) * 40
        assert send_all(producer, [body], key=b"the-key") == [None]
        msg = official.receive(timeout_millis=5000)  # the C++ client checks the CRC32C
        assert msg.data() == body
        assert msg.partition_key() == "the-key"
        deliveries.wait_for(1)  # and so does the native consumer, verify_checksum=True
        assert deliveries.by_consumer[0][0][0] == body
    finally:
        client.close()


def test_an_unreachable_broker_fails_fast_and_says_where(native):
    driver, _ = native(url="pulsar://127.0.0.1:1")
    started = time.monotonic()
    with pytest.raises(DriverError, match=r"127\.0\.0\.1:1: Connection refused"):
        driver.create_producer("t")
    result = driver.subscribe(ConsumerSpec(0, "c0", "t", "s", "Shared"))
    assert time.monotonic() - started < 5
    assert not result.ok
    assert result.error == "cannot connect to 127.0.0.1:1: Connection refused"


def test_close_ends_the_consumers_and_producers(broker, native):
    driver, _ = native(consumers_per_connection=2)
    specs = [ConsumerSpec(i, f"c{i}", "closing", "s", "Shared") for i in range(4)]
    assert all(r.ok for r in subscribe_all(driver, specs))
    producer = driver.create_producer("closing")
    assert len(stats(broker, "closing")["subscriptions"]["s"]["consumers"]) == 4
    driver.close()
    done: list = []
    producer.send_async(None, b"late", done.append)
    assert isinstance(done[0], DriverError)
    with at_most(WAIT):
        while stats(broker, "closing")["subscriptions"]["s"]["consumers"]:
            gevent.sleep(0.05)
    assert stats(broker, "closing")["subscriptions"]["s"]["consumers"] == []
    assert stats(broker, "closing")["publishers"] == []


def test_consumers_and_producers_come_back_after_the_broker_restarts(tmp_path):
    """kill -9 and a restart on the same port and data: every consumer subscribes again by
    itself (the driver's back-off), the producer registers again and sends what was pending,
    and nothing sent is lost."""
    first = start_broker(
        tmp_path / "data",
        *free_ports(),
        ("--set", "journalSyncData=false")
        + ("--set", "managedLedgerCursorPositionPersistIntervalMs=100"),
    )
    driver, deliveries = PulsarDriver(), Deliveries()
    driver.initialize(config(), deliveries, consumers_per_connection=5, service_url=first.url)
    restarted = None
    try:
        # One durable subscription each (the seed's baseline layout): what is sent while a
        # consumer is away waits in its own subscription. (A late Broadcast consumer starts
        # where the connected ones stand; see the broker's broadcast.py.)
        specs = [ConsumerSpec(i, f"c{i}", "restart", f"sub-{i}", "Shared") for i in range(10)]
        assert all(r.ok for r in subscribe_all(driver, specs))
        producer = driver.create_producer("restart")
        assert send_all(producer, [b"before-0", b"before-1"]) == [None, None]
        deliveries.wait_for(10 * 2)
        # Subscriptions are stored with their cursors, at most every 100 ms here: let them be,
        # or a restart would not know them (a new one starts at the end, as Latest says).
        gevent.sleep(0.5)
        first.kill9()
        restarted = start_broker(first.data_dir, first.port, first.admin_port, first.extra)
        # Sent at once: they wait, pending, until the producer is registered again.
        after = [b"after-%d" % k for k in range(3)]
        assert send_all(producer, after) == [None] * 3
        with at_most(WAIT):
            while driver.resubscribed < 10:
                gevent.sleep(0.05)
        assert driver.resubscribed == 10
        assert isinstance(producer, PulsarProducer)
        assert producer.reconnections == 1
        with at_most(WAIT):
            while any(deliveries.by_consumer[i][-1][0] != after[-1] for i in range(10)):
                gevent.sleep(0.05)
        for index in range(10):
            got = [b for b, _, _ in deliveries.by_consumer[index]]
            # An ack the broker had not stored when killed is delivered again (at least once).
            assert got[:2] == [b"before-0", b"before-1"]
            assert got[-3:] == after
            assert set(got) == {b"before-0", b"before-1", *after}
    finally:
        driver.close()
        first.stop()
        if restarted is not None:
            restarted.stop()
