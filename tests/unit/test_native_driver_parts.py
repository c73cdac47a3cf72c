"""The native driver's parts that need no broker: delivery decoding, settings, subscribe
commands, permits and acks, the connection layout, and what the driver refuses up front."""

from __future__ import annotations

import resource

import pytest
from gevent.pool import Group

from drivers.base import ConsumerSpec, DriverError
from drivers.config import ConfigError
from drivers.pulsar.admin import topic_path
from drivers.pulsar.consumer import subscribe_command, subscribe_template
from drivers.pulsar.delivery import DeliveryDecoder, broker_stamps, message_bodies
from drivers.pulsar.driver import PulsarDriver
from drivers.pulsar.lookup import Route
from drivers.pulsar.partitions import PartitionedProducer, key_partition, partition_names
from drivers.pulsar.pool import FD_MARGIN, ConnectionPool, socket_budget, source_address
from drivers.pulsar.settings import (
    ClientConfig,
    ConsumerConfig,
    ProducerConfig,
    PulsarConfig,
    Settings,
    parse_service_url,
    settings_from,
)
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.frames import FrameDecoder, encode_frame
from pulsar_protocol.payload import encode_payload, join_batch


def single(body: bytes, **meta) -> bytes:
    return encode_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, **meta), body
    )


def batch(*bodies: bytes) -> bytes:
    data = join_batch([(pb.SingleMessageMetadata(), b) for b in bodies])
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=len(bodies)
    )
    return encode_payload(meta, data)


def decoded(frame: bytes) -> pb.BaseCommand:
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    found = decoder.next_frame()
    assert found is not None
    return found.command


# -- delivery decoding ------------------------------------------------------------------------
def test_a_single_message_is_its_body():
    assert message_bodies(single(b"hello"), verify=True) == [b"hello"]


def test_a_batch_delivers_each_message_in_order():
    assert message_bodies(batch(b"a", b"bb", b"ccc"), verify=False) == [b"a", b"bb", b"ccc"]


def test_a_batch_of_one_uses_the_batch_layout():
    assert message_bodies(batch(b"only"), verify=False) == [b"only"]


def test_checksums_are_checked_only_when_asked():
    corrupt = bytearray(single(b"hello"))
    corrupt[-1] ^= 0xFF
    assert message_bodies(bytes(corrupt), verify=False) == [b"hell" + bytes([ord("o") ^ 0xFF])]
    with pytest.raises(RemoteProtocolError, match="checksum"):
        message_bodies(bytes(corrupt), verify=True)


def test_compressed_payloads_are_refused_by_name():
    with pytest.raises(RemoteProtocolError, match="LZ4"):
        message_bodies(single(b"x", compression=pb.LZ4), verify=False)


def test_stamps_from_the_bundled_broker_are_complete():
    bem = pb.BrokerEntryMetadata(
        broker_timestamp=1,
        received_us=10,
        persist_start_us=11,
        durable_us=12,
        notified_us=13,
        dispatch_us=14,
    )
    stamps = broker_stamps(bem.SerializeToString())
    assert (
        stamps.received_us,
        stamps.persist_start_us,
        stamps.durable_us,
        stamps.notified_us,
        stamps.dispatch_us,
        stamps.broker_ms,
    ) == (10, 11, 12, 13, 14, 1)
    assert stamps.complete


def test_stamps_from_a_real_pulsar_carry_only_the_broker_timestamp():
    stamps = broker_stamps(pb.BrokerEntryMetadata(broker_timestamp=7, index=3).SerializeToString())
    assert stamps.broker_ms == 7
    assert not stamps.complete


def test_the_decoder_reuses_what_it_decoded_for_identical_bytes():
    decoder = DeliveryDecoder(verify=True)
    section = single(b"x" * 100)
    first = decoder.bodies(section)
    assert decoder.bodies(bytes(section)) is first
    assert decoder.bodies(single(b"y")) == [b"y"]
    bem = pb.BrokerEntryMetadata(received_us=5).SerializeToString()
    assert decoder.stamps(bem) is decoder.stamps(bytes(bem))
    assert decoder.stamps(None) is None


def test_the_decoder_remembers_entries_read_in_any_order():
    """Sockets read at different entries (a client behind): each entry decoded once, the same
    objects back for it whatever came between; a named entry whose bytes differ is decoded
    again (names are a hint, the bytes decide)."""
    decoder = DeliveryDecoder(verify=True)
    sections = {n: single(b"%d" % n * 50) for n in range(5)}
    first = {n: decoder.bodies(sections[n], (1, n, -1)) for n in range(5)}
    for n in (3, 0, 4, 1, 2, 0):
        assert decoder.bodies(bytes(sections[n]), (1, n, -1)) is first[n]
    assert decoder.bodies(single(b"other"), (1, 2, -1)) == [b"other"]
    stamps = [pb.BrokerEntryMetadata(dispatch_us=n).SerializeToString() for n in range(3)]
    known = [decoder.stamps(bem) for bem in stamps]
    assert [decoder.stamps(bytes(bem)) for bem in reversed(stamps)] == known[::-1]
    assert all(decoder.stamps(bytes(b)) is k for b, k in zip(stamps, known, strict=True))


# -- settings ---------------------------------------------------------------------------------
def test_settings_fall_back_to_the_bundled_defaults():
    s = settings_from(None, consumers_per_connection=10, service_url="pulsar://127.0.0.1:6651")
    assert (s.host, s.port, s.consumers_per_connection) == ("127.0.0.1", 6651, 10)
    assert (s.client, s.producer, s.consumer) == (
        ClientConfig(),
        ProducerConfig(),
        ConsumerConfig(),
    )
    assert (s.consumer.receiver_queue_size, s.consumer.ack_mode) == (1000, "cumulative")
    assert (s.auth_method_name, s.auth_data, s.tls) == ("", b"", None)


def test_settings_read_the_drivers_config():
    config = PulsarConfig(
        client=ClientConfig(
            source_addresses=3, connect_timeout_seconds=2, operation_timeout_seconds=4
        ),
        producer=ProducerConfig(
            batching_enabled=False, max_pending_messages=5, send_timeout_ms=700
        ),
        consumer=ConsumerConfig(receiver_queue_size=8, ack_group_time_ms=0, ack_mode="individual"),
    )
    s = settings_from(config, consumers_per_connection=1, service_url="pulsar://localhost")
    assert s.port == 6650
    assert (s.client, s.producer, s.consumer) == (config.client, config.producer, config.consumer)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("pulsar://a:1,b:2", "one broker"),
        ("http://h:8080", "expected pulsar:// or pulsar\\+ssl://"),
        ("pulsar://:6650", "no host"),
    ],
)
def test_service_urls_the_driver_cannot_use(url, message):
    with pytest.raises(DriverError, match=message):
        parse_service_url(url)


def test_bad_values_are_refused():
    """Section values when the file is parsed (once); what only a worker knows, then."""
    with pytest.raises(ConfigError, match="consumer.ackMode"):
        PulsarConfig.parse({"consumer": {"ackMode": "sometimes"}}, "d.yaml: ")
    with pytest.raises(DriverError, match="consumers per connection"):
        settings_from(None, consumers_per_connection=0, service_url="pulsar://127.0.0.1:6650")


def test_source_addresses_need_a_loopback_broker():
    client = ClientConfig(source_addresses=2)
    with pytest.raises(DriverError, match="loopback"):
        settings_from(
            PulsarConfig(client=client),
            consumers_per_connection=1,
            service_url="pulsar://192.0.2.1:6650",
        )


def test_lookup_answers_for_the_same_broker_are_recognized():
    route = Route("127.0.0.1", 6650)
    assert route.same_broker("pulsar://127.0.0.1:6650")
    assert route.same_broker("pulsar://localhost:6650")
    assert not route.same_broker("pulsar://127.0.0.1:6651")
    assert not route.same_broker("pulsar://192.0.2.1:6650")
    assert not Route("127.0.0.1", 6650, proxy_to="pulsar://b:6650").same_broker(
        "pulsar://127.0.0.1:6650"
    )


# -- subscribe, permits and acknowledgements ------------------------------------------------------
def decoded_subscribe(spec: ConsumerSpec) -> pb.CommandSubscribe:
    cmd = decoded(encode_frame(subscribe_command(spec, 7, 9)))
    assert cmd.type == T.SUBSCRIBE
    return cmd.subscribe


def test_broadcast_subscribes_shared_with_the_broadcast_property():
    spec = ConsumerSpec(3, "c3", "t", "s", "Broadcast")
    sub = decoded_subscribe(spec)
    assert sub.subType == pb.CommandSubscribe.Shared
    assert [(kv.key, kv.value) for kv in sub.metadata] == [("subscriptionMode", "broadcast")]
    assert (sub.consumer_name, sub.consumer_id, sub.request_id) == ("c3", 7, 9)
    assert sub.initialPosition == pb.CommandSubscribe.Latest


@pytest.mark.parametrize(
    ("name", "sub_type"),
    [("Exclusive", 0), ("Shared", 1), ("Failover", 2), ("Key_Shared", 3)],
)
def test_the_four_wire_subscription_types(name, sub_type):
    sub = decoded_subscribe(ConsumerSpec(0, "c", "t", "s", name))
    assert sub.subType == sub_type
    assert not sub.metadata


def test_an_unknown_subscription_type_is_a_driver_error():
    with pytest.raises(DriverError, match="Fanout"):
        subscribe_command(ConsumerSpec(0, "c", "t", "s", "Fanout"), 1, 1)
    with pytest.raises(DriverError, match="Fanout"):
        subscribe_template(ConsumerSpec(0, "c", "t", "s", "Fanout"))


@pytest.mark.parametrize("mode", ["Exclusive", "Shared", "Failover", "Key_Shared", "Broadcast"])
@pytest.mark.parametrize(
    ("consumer_id", "request_id", "name"),
    [(1, 1, "w0-c0"), (127, 128, "c"), (16384, 1 << 40, "é" * 70), (0, 0, ""), (5, 6, "x" * 200)],
)
@pytest.mark.parametrize("topic", [None, "persistent://public/default/t-partition-3"])
def test_the_subscribe_template_is_protobufs_encoding_byte_for_byte(
    mode, consumer_id, request_id, name, topic
):
    spec = ConsumerSpec(0, name, "persistent://public/default/" + "t" * 120, "sub-0", mode)
    expected = subscribe_command(spec, consumer_id, request_id, topic).SerializeToString()
    template = subscribe_template(spec, topic)
    assert template.command_bytes(consumer_id, request_id, name) == expected


# Permits and acknowledgements are the codec's now: tests/unit/test_protocol_connection.py.


# -- layout -----------------------------------------------------------------------------------
def test_source_addresses_go_round_robin_from_127_0_0_2():
    assert [source_address(i, 3) for i in range(4)] == [
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.2",
    ]
    assert source_address(5, 0) is None


def test_the_socket_budget_is_the_file_limit_minus_a_margin(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (20000, 20000))
    assert socket_budget() == 20000 - FD_MARGIN


class _NoCallback:
    def message_received(self, consumer_index, payload, receive_us, stamps, kernel_us) -> None:
        raise AssertionError("no deliveries here")

    def messages_received(self, consumer_indexes, payload, receive_us, stamps, kernel_us) -> None:
        raise AssertionError("no deliveries here")


NO_CALLBACK = _NoCallback()


def test_more_connections_than_the_budget_is_a_clear_error():
    group = Group()
    settings = Settings(host="127.0.0.1", port=1, consumers_per_connection=50)
    pool = ConnectionPool(settings, callback=NO_CALLBACK, group=group, max_connections=0)
    try:
        with pytest.raises(DriverError, match="consumersPerConnection=50") as info:
            pool.for_consumer(0)
        assert "open-file limit" in str(info.value)
    finally:
        pool.close()
        group.kill()


# -- the driver ---------------------------------------------------------------------------------


def test_the_driver_must_be_initialized_first():
    with pytest.raises(DriverError, match="initialize"):
        PulsarDriver().subscribe(ConsumerSpec(0, "c", "t", "s", "Shared"))


# -- partitioned topics -------------------------------------------------------------------------
class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[bytes | None] = []
        self.closed = False

    def send_async(self, key, payload, on_done) -> None:
        self.sent.append(key)
        on_done(None)

    def close(self) -> None:
        self.closed = True


def test_partition_names_follow_pulsar():
    assert partition_names("persistent://t/n/x", 2) == [
        "persistent://t/n/x-partition-0",
        "persistent://t/n/x-partition-1",
    ]
    assert partition_names("persistent://t/n/x", 0) == []


def test_keys_stick_to_a_partition_and_spread_over_all():
    assert {key_partition(b"same", 7) for _ in range(5)} == {key_partition(b"same", 7)}
    used = {key_partition(b"key-%d" % i, 7) for i in range(200)}
    assert used == set(range(7))


def test_the_partitioned_producer_routes_by_key_else_round_robin():
    parts = [RecordingProducer() for _ in range(3)]
    producer = PartitionedProducer("t", parts)
    done: list = []
    for _ in range(6):
        producer.send_async(None, b"x", done.append)
    assert [len(p.sent) for p in parts] == [2, 2, 2]
    for _ in range(4):
        producer.send_async(b"k", b"x", done.append)
    assert parts[key_partition(b"k", 3)].sent.count(b"k") == 4
    assert done == [None] * 10
    producer.close()
    assert all(p.closed for p in parts)


def test_admin_paths_name_the_topic_as_the_admin_api_does():
    assert topic_path("persistent://public/default/a b") == "persistent/public/default/a%20b"
    assert topic_path("non-persistent://t/n/x") == "non-persistent/t/n/x"
    with pytest.raises(DriverError, match="expected persistent://tenant/namespace/name"):
        topic_path("public/default/x")
