"""Pulsar client features against the bundled broker, with the official Apache pulsar-client:
Readers and non-durable subscriptions, seek by id and by publish time, producer names and
access modes, schema compatibility, pattern subscriptions, Key_Shared sticky ranges."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.exceptions import NotConnected
from pulsar.schema import AvroSchema, Integer, Record, String, StringSchema

from pulsar_protocol.extensions import key_slot
from tests.conftest import BrokerProcess, start_broker, wait_cursors_saved

pytestmark = pytest.mark.integration

RECEIVE_MS = 5000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the file: every test names topics of its own, and a broker start is
    about 0.75 CPU-s. The test that kills its broker starts its own (`own_broker`)."""
    b = start_broker(
        tmp_path_factory.mktemp("features") / "data", extra=("--set", "journalSyncData=false")
    )
    yield b
    b.stop()


@pytest.fixture
def own_broker(tmp_path) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path / "data", extra=("--set", "journalSyncData=false"))
    yield b
    b.stop()


@pytest.fixture
def client(broker):
    c = pulsar.Client(broker.url, operation_timeout_seconds=10)
    yield c
    c.close()


def _publish(client, topic: str, n: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def _read(reader, n: int) -> list[bytes]:
    return [reader.read_next(timeout_millis=RECEIVE_MS).data() for _ in range(n)]


def _nothing_more(reader, wait_ms: int = 300) -> bool:
    try:
        reader.read_next(timeout_millis=wait_ms)
    except pulsar.Timeout:
        return True
    return False


def _nothing_more_received(consumer, wait_ms: int = 300) -> bool:
    try:
        consumer.receive(timeout_millis=wait_ms)
    except pulsar.Timeout:
        return True
    return False


def _subscriptions(broker, topic: str) -> dict:
    url = f"{broker.admin}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)["subscriptions"]


# -- Readers and non-durable subscriptions ------------------------------------------------------


def test_a_reader_from_earliest_reads_everything_and_leaves_no_subscription(client, broker):
    _publish(client, "rd-earliest", 5)
    reader = client.create_reader("rd-earliest", pulsar.MessageId.earliest)
    assert reader.has_message_available()
    assert _read(reader, 5) == [f"m{i}".encode() for i in range(5)]
    assert not reader.has_message_available()
    assert _nothing_more(reader)
    names = list(_subscriptions(broker, "rd-earliest"))
    assert len(names) == 1 and names[0].startswith("reader-")
    reader.close()
    assert _subscriptions(broker, "rd-earliest") == {}


def test_a_reader_from_latest_reads_only_what_comes_after_it(client):
    _publish(client, "rd-latest", 3)
    reader = client.create_reader("rd-latest", pulsar.MessageId.latest)
    assert not reader.has_message_available()
    producer = client.create_producer("rd-latest", batching_enabled=False)
    producer.send(b"new")
    assert _read(reader, 1) == [b"new"]
    assert _nothing_more(reader)
    # Latest, inclusive: the official client asks for the last message id and seeks to it
    # when asked whether a message is available (as Pulsar, the broker starts at the end).
    last = client.create_reader(
        "rd-latest", pulsar.MessageId.latest, start_message_id_inclusive=True
    )
    assert last.has_message_available()
    assert _read(last, 1) == [b"new"]
    assert _nothing_more(last)


def test_a_reader_from_a_message_id_exclusive_and_inclusive(client):
    ids = _publish(client, "rd-id", 6)
    after = client.create_reader("rd-id", ids[2])
    assert _read(after, 3) == [b"m3", b"m4", b"m5"]
    assert _nothing_more(after)
    inclusive = client.create_reader("rd-id", ids[2], start_message_id_inclusive=True)
    assert _read(inclusive, 4) == [b"m2", b"m3", b"m4", b"m5"]
    assert _nothing_more(inclusive)


def test_a_non_durable_subscription_is_not_saved_across_a_restart(own_broker):
    broker = own_broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    _publish(client, "rd-restart", 2)
    durable = client.subscribe(
        "rd-restart", "kept", initial_position=pulsar.InitialPosition.Earliest
    )
    other = pulsar.Client(broker.url, operation_timeout_seconds=10)
    reader = other.create_reader("rd-restart", pulsar.MessageId.earliest)
    assert _read(reader, 2) == [b"m0", b"m1"]
    wait_cursors_saved(broker, "rd-restart", lambda t: "kept" in t["subscriptions"])
    broker.kill9()
    # The reader does not come back. Closing after the crash may find the connection gone
    # (the client's answer then depends on whether it noticed first): either is a close.
    with contextlib.suppress(NotConnected):
        other.close()
    with contextlib.suppress(NotConnected):
        durable.close()
    with contextlib.suppress(NotConnected):
        client.close()
    restarted = start_broker(broker.data_dir, broker.port, broker.admin_port, broker.extra)
    again = pulsar.Client(restarted.url, operation_timeout_seconds=10)
    try:
        again.create_producer("rd-restart")  # opens the topic, creates no subscription
        assert list(_subscriptions(restarted, "rd-restart")) == ["kept"]
    finally:
        again.close()
        restarted.stop()


# -- seek ---------------------------------------------------------------------------------------


def test_seek_to_a_message_id_delivers_what_follows_it(client):
    """The broker reads from the id (as Pulsar's resetCursor); the official client then drops
    the message sought itself (it is not `startMessageIdInclusive`)."""
    consumer = client.subscribe("seek-id", "s", initial_position=pulsar.InitialPosition.Earliest)
    ids = _publish(client, "seek-id", 6)
    got = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(6)]
    for msg in got:
        consumer.acknowledge(msg)
    consumer.seek(ids[3])
    again = [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(2)]
    assert again == [b"m4", b"m5"]
    assert _nothing_more_received(consumer)
    consumer.seek(ids[0])  # a second seek works too (the client's seek state was completed)
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"m1"


def test_seek_to_a_publish_time_delivers_from_the_first_message_published_then(client):
    consumer = client.subscribe("seek-time", "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer("seek-time", batching_enabled=False)
    for i in range(3):
        producer.send(f"old{i}".encode())
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(3):
        producer.send(f"new{i}".encode())
    for _ in range(6):
        consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_MS))
    consumer.seek(boundary_ms)
    again = [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(3)]
    assert again == [b"new0", b"new1", b"new2"]
    consumer.seek(0)  # before everything: from the first message
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"old0"


def test_a_reader_seeks_by_publish_time(client):
    producer = client.create_producer("rd-seek-time", batching_enabled=False)
    producer.send(b"before")
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    producer.send(b"after")
    reader = client.create_reader("rd-seek-time", pulsar.MessageId.earliest)
    assert _read(reader, 2) == [b"before", b"after"]
    reader.seek(boundary_ms)
    assert _read(reader, 1) == [b"after"]


# -- producers: names and access modes ----------------------------------------------------------


def test_a_second_producer_with_the_same_name_is_refused(client):
    first = client.create_producer("pn", producer_name="writer")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer("pn", producer_name="writer")
    first.close()
    again = client.create_producer("pn", producer_name="writer")  # the name is free again
    again.send(b"ok")


def test_exclusive_access_is_refused_while_another_producer_is_there(client):
    shared = client.create_producer("px")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer("px", access_mode=pulsar.ProducerAccessMode.Exclusive)
    shared.close()
    exclusive = client.create_producer("px", access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer("px")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer("px", access_mode=pulsar.ProducerAccessMode.Exclusive)
    exclusive.send(b"mine")


def test_wait_for_exclusive_gets_the_topic_when_the_holder_leaves(client, broker):
    holder = client.create_producer("pw", access_mode=pulsar.ProducerAccessMode.Exclusive)
    other = pulsar.Client(broker.url, operation_timeout_seconds=10)
    created: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: created.append(
            other.create_producer(
                "pw",
                access_mode=pulsar.ProducerAccessMode.WaitForExclusive,
                batching_enabled=False,
            )
        ),
        daemon=True,
    )
    try:
        waiter.start()
        waiter.join(1.0)
        assert created == []  # still waiting
        holder.close()
        waiter.join(5.0)
        assert created, "the waiting producer got the topic"
        created[0].send(b"now mine")
    finally:
        other.close()


def test_exclusive_with_fencing_takes_the_topic_from_the_others(client):
    consumer = client.subscribe("pf", "s")
    old = client.create_producer("pf", batching_enabled=False, send_timeout_millis=2000)
    old.send(b"before")
    fencer = client.create_producer(
        "pf",
        access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
        batching_enabled=False,
    )
    fencer.send(b"fenced them")
    with pytest.raises(pulsar.PulsarException):
        old.send(b"too late")
    got = [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(2)]
    assert got == [b"before", b"fenced them"]


# -- schemas ------------------------------------------------------------------------------------


class User(Record):
    name = String()
    age = Integer()


class UserV2(Record):
    _avro_namespace = None
    name = String()
    age = Integer()
    email = String(required=True)


def test_a_producer_of_another_schema_type_is_refused(client):
    client.create_producer("sc-type", schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer("sc-type", schema=AvroSchema(User))
    client.create_producer("sc-type", schema=StringSchema())  # the same schema: accepted
    client.create_producer("sc-type")  # bytes (no schema): accepted, as Pulsar's default


def test_avro_schemas_are_checked_for_full_compatibility(client):
    producer = client.create_producer("sc-avro", schema=AvroSchema(User))
    producer.send(User(name="a", age=1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer("sc-avro", schema=AvroSchema(UserV2))
    consumer = client.subscribe(
        "sc-avro",
        "s",
        schema=AvroSchema(User),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    assert consumer.receive(timeout_millis=RECEIVE_MS).value().name == "a"
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe("sc-avro", "t", schema=StringSchema())


def test_a_consumer_with_a_schema_is_refused_on_a_topic_in_use_without_one(client):
    client.create_producer("sc-none")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe("sc-none", "s", schema=StringSchema())
    client.subscribe("sc-none", "bytes")  # no schema: accepted


# -- pattern subscriptions ----------------------------------------------------------------------
# Topics created later are found at the client's next poll of the topic list, every
# `pattern_auto_discovery_period` seconds; pulsar-client 3.13's Python wrapper does not pass that
# setting to its C++ core (60 s always), so that is left to the unit test of the list.


def test_a_pattern_subscription_gets_messages_from_every_matching_topic(client):
    for name in ("pat-a", "pat-b", "other-c"):
        client.create_producer(name).close()
    consumer = client.subscribe(
        re.compile("persistent://public/default/pat-.*"),
        "s",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    for name in ("pat-a", "pat-b", "other-c"):
        producer = client.create_producer(name, batching_enabled=False)
        producer.send(name.encode())
    got = set()
    for _ in range(2):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        got.add(msg.data())
        consumer.acknowledge(msg)
    assert got == {b"pat-a", b"pat-b"}
    try:
        extra = consumer.receive(timeout_millis=300)
    except pulsar.Timeout:
        extra = None
    assert extra is None


# -- Key_Shared ---------------------------------------------------------------------------------


def _sticky(*ranges: tuple[int, int]) -> pulsar.ConsumerKeySharedPolicy:
    return pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=list(ranges)
    )


def test_key_shared_sticky_ranges_route_keys_by_their_hash(client):
    low = client.subscribe(
        "ks-sticky",
        "s",
        consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=_sticky((0, 32767)),
    )
    high = client.subscribe(
        "ks-sticky",
        "s",
        consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=_sticky((32768, 65535)),
    )
    with pytest.raises(pulsar.ConsumerAssignError):
        client.subscribe(
            "ks-sticky",
            "s",
            consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=_sticky((30000, 40000)),
        )
    producer = client.create_producer("ks-sticky", batching_enabled=False)
    keys = [f"k{i}" for i in range(20)]
    for n in range(3):
        for key in keys:
            producer.send(f"{key}:{n}".encode(), partition_key=key)
    seen: dict[str, list[int]] = {}
    for consumer, half in ((low, range(0, 32768)), (high, range(32768, 65536))):
        while True:
            try:
                msg = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                break
            key, n = msg.data().decode().split(":")
            assert key_slot(key.encode()) in half, f"{key} went to the wrong range"
            seen.setdefault(key, []).append(int(n))
            consumer.acknowledge(msg)
    assert seen == {key: [0, 1, 2] for key in keys}
