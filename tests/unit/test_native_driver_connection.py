"""The native driver's connection and producer against a scripted broker on a socketpair.

The test plays the broker's end of the pair with the project's codec: it reads what the
driver writes and writes exactly the frames a case needs (several in one write, to check what
one recv delivers). Every wait is bounded by a gevent.Timeout.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

import gevent
import pytest
from gevent import socket
from gevent.pool import Group

from drivers.base import BrokerStamps, ConsumerSpec, DriverError
from drivers.net import rx_timestamps
from drivers.pulsar import connection as connection_module
from drivers.pulsar.connection import Connection, RequestFailed, RequestTimeout, connect_socket
from drivers.pulsar.producer import PulsarProducer
from drivers.pulsar.settings import ClientConfig, ConsumerConfig, ProducerConfig, Settings
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command, message_command_bytes, type_name
from pulsar_protocol.frames import Frame, FrameDecoder, encode_frame, encode_raw_frame
from pulsar_protocol.payload import decode_payload, encode_payload, join_batch, split_batch

WAIT = 2.0


@dataclass
class Deliveries:
    """A ConsumerCallback that keeps what it is given."""

    got: list[tuple[int, bytes, int, BrokerStamps | None]] = field(default_factory=list)
    kernel: list[int] = field(default_factory=list)
    batches: list[tuple[tuple[int, ...], bytes]] = field(default_factory=list)

    def message_received(self, consumer_index, payload, receive_us, stamps, kernel_us) -> None:
        self.got.append((consumer_index, payload, receive_us, stamps))
        self.kernel.append(kernel_us)

    def messages_received(self, consumer_indexes, payload, receive_us, stamps, kernel_us) -> None:
        self.batches.append((tuple(consumer_indexes), payload))
        for index in consumer_indexes:
            self.message_received(index, payload, receive_us, stamps, kernel_us)

    def wait_for(self, n: int) -> None:
        with gevent.Timeout(WAIT):
            while len(self.got) < n:
                gevent.sleep(0.001)


class FakeBroker:
    def __init__(self, sock: socket.socket, settings: Settings) -> None:
        self.sock = sock
        self.settings = settings
        self.decoder = FrameDecoder()

    def next_frame(self) -> Frame:
        with gevent.Timeout(WAIT):
            while (frame := self.decoder.next_frame()) is None:
                data = self.sock.recv(65536)
                assert data, "the driver closed the connection"
                self.decoder.receive_data(data)
        return frame

    def expect(self, type_: int) -> pb.BaseCommand:
        cmd = self.next_frame().command
        assert cmd.type == type_, f"expected {type_name(type_)}, got {cmd}"
        return cmd

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))


@dataclass
class Wire:
    conn: Connection
    broker: FakeBroker
    deliveries: Deliveries
    group: Group


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    return ours, theirs


def sectioned(**overrides: Any) -> dict[str, Any]:
    """Settings' sections from their fields given flat (`ack_mode="individual"`): each goes
    to the section that has it."""
    sections: dict[str, Any] = {}
    left = dict(overrides)
    for name, kind in (
        ("client", ClientConfig),
        ("producer", ProducerConfig),
        ("consumer", ConsumerConfig),
    ):
        own = {f.name: left.pop(f.name) for f in fields(kind) if f.name in left}
        if own:
            sections[name] = kind(**own)
    assert not left, f"not a field of any section: {sorted(left)}"
    return sections


@pytest.fixture
def make_wire() -> Iterator:
    made: list[Wire] = []

    def make(tcp: bool = False, **overrides) -> Wire:
        """A socketpair by default (no kernel receive times); `tcp`: a loopback TCP pair."""
        settings = Settings(host="127.0.0.1", port=6650, **sectioned(**overrides))
        group = Group()
        ours, theirs = tcp_pair() if tcp else socket.socketpair()
        deliveries = Deliveries()
        conn = Connection(1, settings, deliveries, group)
        broker = FakeBroker(theirs, settings)
        conn.start(ours)
        broker.expect(T.CONNECT)
        broker.send(encode_frame(command(T.CONNECTED, server_version="fake", protocol_version=20)))
        conn.wait_ready()
        wire = Wire(conn, broker, deliveries, group)
        made.append(wire)
        return wire

    yield make
    for wire in made:
        wire.conn.close()
        wire.group.kill()
        wire.broker.sock.close()


def subscribe(wire: Wire, spec: ConsumerSpec) -> int:
    """Run a subscribe through the fake broker; returns the consumer id."""
    task = gevent.spawn(wire.conn.subscribe, spec, [spec.topic])
    sub = wire.broker.expect(T.SUBSCRIBE).subscribe
    wire.broker.send(encode_frame(command(T.SUCCESS, request_id=sub.request_id)))
    flow = wire.broker.expect(T.FLOW).flow
    assert flow.consumer_id == sub.consumer_id
    assert flow.messagePermits == wire.conn._settings.consumer.receiver_queue_size
    task.get(timeout=WAIT)
    return sub.consumer_id


def section(body: bytes) -> bytes:
    return encode_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), body
    )


def message(consumer_id: int, entry_id: int, payload: bytes, dispatch_us: int = 0) -> bytes:
    bem = pb.BrokerEntryMetadata(
        received_us=1, persist_start_us=2, durable_us=3, notified_us=4, dispatch_us=dispatch_us or 5
    ).SerializeToString()
    return encode_raw_frame(message_command_bytes(consumer_id, 1, entry_id), payload, bem)


SPEC = ConsumerSpec(4, "c4", "topic", "sub", "Broadcast")


# -- handshake and keep-alive -------------------------------------------------------------------
def test_connect_asks_for_protocol_20_and_broker_entry_metadata():
    settings = Settings(host="127.0.0.1", port=6650)
    ours, theirs = socket.socketpair()
    group = Group()
    conn = Connection(1, settings, Deliveries(), group)
    try:
        conn.start(ours)
        connect = FakeBroker(theirs, settings).expect(T.CONNECT).connect
        assert connect.protocol_version == 20
        assert connect.client_version == "fanout-bench"
        assert connect.feature_flags.supports_broker_entry_metadata
    finally:
        conn.close()
        group.kill()
        theirs.close()


def test_broker_pings_are_answered(make_wire):
    wire = make_wire()
    wire.broker.send(encode_frame(command(T.PING)))
    wire.broker.expect(T.PONG)
    wire.conn.ping()
    wire.broker.expect(T.PING)


# -- deliveries ---------------------------------------------------------------------------------
def test_one_clock_read_stamps_everything_one_recv_returned(make_wire, monkeypatch):
    wire = make_wire()
    consumer_id = subscribe(wire, SPEC)
    reads = iter(range(1_000, 100_000, 1_000))
    clock_reads = []

    def fake_clock() -> int:
        clock_reads.append(next(reads))
        return clock_reads[-1]

    monkeypatch.setattr(rx_timestamps, "now_us", fake_clock)  # the read's own clock read
    wire.broker.send(*(message(consumer_id, e, section(b"m%d" % e)) for e in range(3)))
    wire.deliveries.wait_for(3)
    assert clock_reads == [1_000]
    assert [(i, body, at) for i, body, at, _ in wire.deliveries.got] == [
        (4, b"m0", 1_000),
        (4, b"m1", 1_000),
        (4, b"m2", 1_000),
    ]
    wire.broker.send(message(consumer_id, 3, section(b"m3")))
    wire.deliveries.wait_for(4)
    assert wire.deliveries.got[3][2] == 2_000
    assert clock_reads == [1_000, 2_000]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPING is Linux's")
def test_on_tcp_every_delivery_of_a_read_carries_its_kernel_receive_time(make_wire):
    wire = make_wire(tcp=True)
    consumer_id = subscribe(wire, SPEC)
    # Linux turns stamping on a moment after the first socket asks (deferred work): the
    # first reads of a process may come unstamped. Send until one is stamped.
    got, entry = wire.deliveries.got, 0
    with gevent.Timeout(WAIT):
        while not wire.deliveries.kernel or not wire.deliveries.kernel[-1]:
            wire.broker.send(message(consumer_id, entry, section(b"warm")))
            entry += 1
            wire.deliveries.wait_for(entry)
    first = len(got)
    wire.broker.send(*(message(consumer_id, entry + e, section(b"m%d" % e)) for e in range(3)))
    wire.deliveries.wait_for(first + 3)
    kernel = set(wire.deliveries.kernel[first:])
    assert len(kernel) == 1  # one read, one kernel time
    (kernel_us,) = kernel
    assert 0 < kernel_us <= got[first][2]  # arrived before it was read
    assert wire.conn.kernel_timestamps


def test_without_kernel_times_deliveries_carry_zero_and_the_connection_says_so(make_wire):
    wire = make_wire()  # a socketpair: the option is taken, but no read carries a stamp
    consumer_id = subscribe(wire, SPEC)
    wire.broker.send(message(consumer_id, 0, section(b"m0")))
    wire.deliveries.wait_for(1)
    assert wire.deliveries.kernel == [0]
    assert wire.deliveries.got[0][2] > 0  # the read time is still there
    assert not wire.conn.kernel_timestamps


def test_a_refused_option_reads_with_plain_recv(make_wire, monkeypatch):
    monkeypatch.setattr(connection_module.rx_timestamps, "enable", lambda sock: False)
    wire = make_wire(tcp=True)
    assert not wire.conn.kernel_timestamps
    consumer_id = subscribe(wire, SPEC)
    wire.broker.send(message(consumer_id, 0, section(b"m0")))
    wire.deliveries.wait_for(1)
    assert wire.deliveries.kernel == [0]


def test_deliveries_carry_the_broker_stamps(make_wire):
    wire = make_wire()
    consumer_id = subscribe(wire, SPEC)
    wire.broker.send(message(consumer_id, 0, section(b"x"), dispatch_us=99))
    wire.deliveries.wait_for(1)
    stamps = wire.deliveries.got[0][3]
    assert stamps == BrokerStamps(1, 2, 3, 4, 99)
    assert stamps.complete


def test_one_entry_to_many_consumers_in_one_read_is_handed_over_once(make_wire):
    """A broadcast read: identical MESSAGEs to the consumers of a connection go to the harness
    as one messages_received with their indexes, in delivery order; the next entry, or
    different bytes, starts a new group. Every consumer still gets its permits and acks."""
    wire = make_wire()
    specs = [ConsumerSpec(i, f"c{i}", "topic", "sub", "Broadcast") for i in (4, 9, 7)]
    ids = [subscribe(wire, spec) for spec in specs]
    frames = [message(cid, 0, section(b"e0")) for cid in ids]
    frames += [message(cid, 1, section(b"e1")) for cid in ids[:2]]
    frames += [message(ids[2], 1, section(b"e1"), dispatch_us=77)]  # other broker stamps
    frames += [message(ids[0], 2, section(b"e2"))]
    wire.broker.send(b"".join(frames))
    wire.deliveries.wait_for(7)
    assert wire.deliveries.batches == [
        ((4, 9, 7), b"e0"),
        ((4, 9), b"e1"),
        ((7,), b"e1"),
        ((4,), b"e2"),
    ]
    assert [(i, body) for i, body, _, _ in wire.deliveries.got] == [
        (4, b"e0"),
        (9, b"e0"),
        (7, b"e0"),
        (4, b"e1"),
        (9, b"e1"),
        (7, b"e1"),
        (4, b"e2"),
    ]
    assert wire.deliveries.got[5][3] == BrokerStamps(1, 2, 3, 4, 77)
    acks = {}
    for _ in ids:
        ack = wire.broker.expect(T.ACK).ack
        acks[ack.consumer_id] = [(m.ledgerId, m.entryId) for m in ack.message_id]
    assert acks == {ids[0]: [(1, 2)], ids[1]: [(1, 1)], ids[2]: [(1, 1)]}


@dataclass
class BatchedDeliveries(Deliveries):
    """A callback with the engine's batch entry point (as the harness's Recorder has)."""

    passes: list[tuple[bytes, tuple[int, ...], list[tuple]]] = field(default_factory=list)

    def deliveries_received(self, payload, consumer_indexes, reads) -> None:
        self.passes.append((payload, tuple(consumer_indexes), [tuple(r) for r in reads]))
        at = 0
        for count, receive_us, kernel_us, stamps in reads:
            for index in consumer_indexes[at : at + count]:
                self.message_received(index, payload, receive_us, stamps, kernel_us)
            at += count


def test_one_entry_to_one_consumer_subscriptions_is_handed_over_once_with_each_stamp():
    """The Shared baseline: each consumer on the connection is in a subscription of its own,
    whose dispatcher stamps its own dispatch time, so no two frames are alike; the entry still
    goes to the harness in one call, each consumer with its own stamps, and each is acked."""
    settings = Settings(host="127.0.0.1", port=6650)
    ours, theirs = socket.socketpair()
    group = Group()
    callback = BatchedDeliveries()
    conn = Connection(1, settings, callback, group)
    broker = FakeBroker(theirs, settings)
    try:
        conn.start(ours)
        broker.expect(T.CONNECT)
        broker.send(encode_frame(command(T.CONNECTED, server_version="fake", protocol_version=20)))
        conn.wait_ready()
        wire = Wire(conn, broker, callback, group)
        specs = [ConsumerSpec(i, f"c{i}", "topic", f"sub{i}", "Shared") for i in (4, 9, 7, 2)]
        ids = [subscribe(wire, spec) for spec in specs]
        frames = [message(cid, 0, section(b"e0"), 100 + n) for n, cid in enumerate(ids)]
        broker.send(b"".join(frames))
        callback.wait_for(4)
        assert len(callback.passes) == 1
        payload, indexes, reads = callback.passes[0]
        assert (payload, indexes) == (b"e0", (4, 9, 7, 2))
        assert [(count, stamps) for count, _, _, stamps in reads] == [
            (1, BrokerStamps(1, 2, 3, 4, 100 + n)) for n in range(4)
        ]
        acks = {}
        for _ in ids:
            ack = broker.expect(T.ACK).ack
            acks[ack.consumer_id] = [(m.ledgerId, m.entryId) for m in ack.message_id]
        assert acks == {cid: [(1, 0)] for cid in ids}
    finally:
        conn.close()
        group.kill()
        theirs.close()


def test_a_run_skips_consumers_gone_and_keeps_order_with_other_shapes(make_wire):
    """Deliveries to a consumer the driver closed, or never had, are neither handed over nor
    acknowledged; a MESSAGE in a shape the codec's runs decline (protobuf path) is handed
    over in its place in the stream."""
    wire = make_wire(ack_group_time_ms=20)
    specs = [ConsumerSpec(i, f"c{i}", "topic", "sub", "Broadcast") for i in (4, 9, 7)]
    ids = [subscribe(wire, spec) for spec in specs]
    wire.conn.close_consumers([ids[1]])
    assert wire.broker.expect(T.CLOSE_CONSUMER).close_consumer.consumer_id == ids[1]
    odd = command(
        T.MESSAGE,
        consumer_id=ids[2],
        message_id=pb.MessageIdData(ledgerId=1, entryId=0),
        ack_set=[1],
    )
    frames = [message(cid, 0, section(b"e0")) for cid in (ids[0], ids[1], 999)]
    frames += [encode_frame(odd, section(b"e0"))]
    frames += [message(cid, 1, section(b"e1")) for cid in (ids[2], ids[0])]
    wire.broker.send(b"".join(frames))
    wire.deliveries.wait_for(4)
    assert wire.deliveries.batches == [((4,), b"e0"), ((7,), b"e0"), ((7, 4), b"e1")]
    acks = {}
    for _ in range(2):
        ack = wire.broker.expect(T.ACK).ack
        acks[ack.consumer_id] = [(m.ledgerId, m.entryId) for m in ack.message_id]
    assert acks == {ids[0]: [(1, 1)], ids[2]: [(1, 1)]}


def test_a_batch_is_split_into_its_messages(make_wire):
    wire = make_wire(receiver_queue_size=6)
    consumer_id = subscribe(wire, SPEC)
    data = join_batch([(pb.SingleMessageMetadata(), b) for b in (b"a", b"b", b"c")])
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3
    )
    wire.broker.send(message(consumer_id, 0, encode_payload(meta, data)))
    wire.deliveries.wait_for(3)
    assert [body for _, body, _, _ in wire.deliveries.got] == [b"a", b"b", b"c"]
    assert len({id(stamps) for _, _, _, stamps in wire.deliveries.got}) == 1
    # Permits count messages: three of a queue of six is half, so they come back at once.
    assert wire.broker.expect(T.FLOW).flow.messagePermits == 3


def test_permits_come_back_when_half_the_queue_was_delivered(make_wire):
    wire = make_wire(receiver_queue_size=4)
    consumer_id = subscribe(wire, SPEC)
    wire.broker.send(message(consumer_id, 0, section(b"a")))
    wire.deliveries.wait_for(1)
    wire.broker.send(message(consumer_id, 1, section(b"b")))
    flow = wire.broker.expect(T.FLOW).flow
    assert (flow.consumer_id, flow.messagePermits) == (consumer_id, 2)


def test_acks_are_grouped_into_one_cumulative_ack(make_wire):
    wire = make_wire(ack_group_time_ms=20)
    consumer_id = subscribe(wire, SPEC)
    for entry in range(3):
        wire.broker.send(message(consumer_id, entry, section(b"x")))
    ack = wire.broker.expect(T.ACK).ack
    assert ack.ack_type == pb.CommandAck.Cumulative
    assert [(m.ledgerId, m.entryId) for m in ack.message_id] == [(1, 2)]


def test_individual_acks_of_several_consumers_leave_in_one_flush(make_wire):
    wire = make_wire(ack_group_time_ms=20, ack_mode="individual")
    first = subscribe(wire, SPEC)
    second = subscribe(wire, ConsumerSpec(5, "c5", "topic", "sub", "Broadcast"))
    wire.broker.send(*(message(c, e, section(b"x")) for e in range(2) for c in (first, second)))
    acks = {cmd.ack.consumer_id: cmd.ack for cmd in (wire.broker.expect(T.ACK) for _ in "12")}
    assert set(acks) == {first, second}
    assert all(a.ack_type == pb.CommandAck.Individual for a in acks.values())
    assert [m.entryId for m in acks[first].message_id] == [0, 1]


def test_a_bad_checksum_is_dropped_only_when_verifying(make_wire):
    wire = make_wire(verify_checksum=True)
    consumer_id = subscribe(wire, SPEC)
    corrupt = bytearray(section(b"bad"))
    corrupt[-1] ^= 0xFF
    wire.broker.send(
        message(consumer_id, 0, bytes(corrupt)), message(consumer_id, 1, section(b"ok"))
    )
    wire.deliveries.wait_for(1)
    assert [body for _, body, _, _ in wire.deliveries.got] == [b"ok"]


# -- requests -----------------------------------------------------------------------------------
def test_an_error_answer_names_the_server_error(make_wire):
    wire = make_wire()
    task = gevent.spawn(wire.conn.subscribe, SPEC, [SPEC.topic])
    rid = wire.broker.expect(T.SUBSCRIBE).subscribe.request_id
    wire.broker.send(
        encode_frame(
            command(
                T.ERROR,
                request_id=rid,
                error=pb.ConsumerBusy,
                message="exclusive consumer already attached",
            )
        )
    )
    with pytest.raises(RequestFailed, match="^ConsumerBusy: exclusive consumer already attached$"):
        task.get(timeout=WAIT)
    assert not wire.conn.consumers


def test_an_unanswered_subscribe_times_out_and_is_closed(make_wire):
    wire = make_wire(operation_timeout_seconds=0.1)
    task = gevent.spawn(wire.conn.subscribe, SPEC, [SPEC.topic])
    consumer_id = wire.broker.expect(T.SUBSCRIBE).subscribe.consumer_id
    with pytest.raises(RequestTimeout, match="^timeout$"):
        task.get(timeout=WAIT)
    assert wire.broker.expect(T.CLOSE_CONSUMER).close_consumer.consumer_id == consumer_id


def test_of_concurrent_subscribes_only_the_unanswered_one_times_out(make_wire):
    wire = make_wire(operation_timeout_seconds=0.2)
    specs = [ConsumerSpec(i, f"c{i}", "topic", "sub", "Broadcast") for i in range(3)]
    tasks = [gevent.spawn(wire.conn.subscribe, spec, [spec.topic]) for spec in specs]
    subs = [wire.broker.expect(T.SUBSCRIBE).subscribe for _ in specs]
    wire.broker.send(*(encode_frame(command(T.SUCCESS, request_id=s.request_id)) for s in subs[:2]))
    assert [task.get(timeout=WAIT)[1] for task in tasks[:2]] == [[s.consumer_id] for s in subs[:2]]
    with pytest.raises(RequestTimeout, match="^timeout$"):
        tasks[2].get(timeout=WAIT)
    flows = {wire.broker.expect(T.FLOW).flow.consumer_id for _ in range(2)}
    assert flows == {s.consumer_id for s in subs[:2]}
    assert wire.broker.expect(T.CLOSE_CONSUMER).close_consumer.consumer_id == subs[2].consumer_id
    # A late SUCCESS for the abandoned consumer does not bring it back.
    wire.broker.send(encode_frame(command(T.SUCCESS, request_id=subs[2].request_id)))
    assert sorted(wire.conn.consumers) == sorted(s.consumer_id for s in subs[:2])
    assert not wire.conn._waiting and not wire.conn._deadlines._pending


class RecordingSocket:
    """The connection's socket, keeping each write."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.writes: list[bytes] = []

    def send(self, data: bytes) -> int:
        sent = self.sock.send(data)
        self.writes.append(bytes(data[:sent]))
        return sent

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.sock.sendall(data)

    def __getattr__(self, name: str):
        return getattr(self.sock, name)


def test_concurrent_subscribes_leave_in_one_write(make_wire):
    wire = make_wire()
    wire.conn._sock = recording = RecordingSocket(wire.conn._sock)
    writes = recording.writes
    specs = [ConsumerSpec(i, f"c{i}", "topic", "sub", "Broadcast") for i in range(50)]
    tasks = [gevent.spawn(wire.conn.subscribe, spec, [spec.topic]) for spec in specs]
    subs = [wire.broker.expect(T.SUBSCRIBE).subscribe for _ in specs]
    assert len(writes) == 1
    assert [s.consumer_name for s in subs] == [spec.name for spec in specs]
    wire.broker.send(*(encode_frame(command(T.SUCCESS, request_id=s.request_id)) for s in subs))
    assert {wire.broker.expect(T.FLOW).flow.consumer_id for _ in specs} == {
        s.consumer_id for s in subs
    }
    gevent.joinall(tasks, timeout=WAIT, raise_error=True)
    assert len(writes) < 5  # the FLOWs of one read's answers leave together too


def test_one_consumer_on_several_partitions_subscribes_to_all_at_once(make_wire):
    wire = make_wire()
    names = [f"topic-partition-{i}" for i in range(3)]
    task = gevent.spawn(wire.conn.subscribe, SPEC, names)
    subs = [wire.broker.expect(T.SUBSCRIBE).subscribe for _ in names]
    assert [sub.topic for sub in subs] == names  # all sent before any answer
    assert {sub.subscription for sub in subs} == {"sub"}
    assert len({sub.consumer_id for sub in subs}) == 3
    wire.broker.send(*(encode_frame(command(T.SUCCESS, request_id=s.request_id)) for s in subs))
    flows = {wire.broker.expect(T.FLOW).flow.consumer_id for _ in names}
    assert flows == {sub.consumer_id for sub in subs}
    assert task.get(timeout=WAIT)[1] == [sub.consumer_id for sub in subs]
    # Deliveries from any partition reach the harness as the one consumer, index 4.
    wire.broker.send(*(message(s.consumer_id, 0, section(b"p")) for s in subs))
    wire.deliveries.wait_for(3)
    assert [i for i, *_ in wire.deliveries.got] == [4, 4, 4]


def test_one_refused_partition_fails_the_consumer_and_closes_the_others(make_wire):
    wire = make_wire()
    task = gevent.spawn(wire.conn.subscribe, SPEC, ["topic-partition-0", "topic-partition-1"])
    first, second = (wire.broker.expect(T.SUBSCRIBE).subscribe for _ in range(2))
    wire.broker.send(
        encode_frame(command(T.SUCCESS, request_id=first.request_id)),
        encode_frame(
            command(
                T.ERROR,
                request_id=second.request_id,
                error=pb.ConsumerBusy,
                message="Exclusive consumer is already connected",
            )
        ),
    )
    with pytest.raises(RequestFailed, match="^ConsumerBusy"):
        task.get(timeout=WAIT)
    assert wire.broker.expect(T.CLOSE_CONSUMER).close_consumer.consumer_id == first.consumer_id
    assert wire.conn.consumers == {}


def test_a_group_subscribes_in_one_write_each_consumer_all_or_nothing(make_wire):
    wire = make_wire(operation_timeout_seconds=0.3)
    wire.conn._sock = recording = RecordingSocket(wire.conn._sock)
    specs = [ConsumerSpec(i, f"c{i}", "topic", "sub", "Broadcast") for i in range(4)]
    topics = [["topic"], ["topic"], ["topic"], ["topic-partition-0", "topic-partition-1"]]
    task = gevent.spawn(wire.conn.subscribe_group, specs, topics)
    subs = [wire.broker.expect(T.SUBSCRIBE).subscribe for _ in range(5)]
    assert len(recording.writes) == 1
    assert [s.consumer_name for s in subs] == ["c0", "c1", "c2", "c3", "c3"]
    assert [s.topic for s in subs] == ["topic"] * 3 + topics[3]
    wire.broker.send(
        encode_frame(command(T.SUCCESS, request_id=subs[0].request_id)),
        encode_frame(command(T.SUCCESS, request_id=subs[3].request_id)),
        *(
            encode_frame(
                command(T.ERROR, request_id=subs[k].request_id, error=pb.ConsumerBusy, message=m)
            )
            for k, m in ((1, "busy"), (4, "no"))
        ),
    )
    outcomes, ids = task.get(timeout=WAIT)
    assert type(outcomes[0]) is int and outcomes[0] > 0
    assert [str(o) for o in outcomes[1:]] == ["ConsumerBusy: busy", "timeout", "ConsumerBusy: no"]
    assert isinstance(outcomes[2], RequestTimeout)
    assert ids == [[s.consumer_id] for s in subs[:3]] + [[subs[3].consumer_id, subs[4].consumer_id]]
    # The unanswered one and the partition that succeeded are closed; only c0 gets its FLOW.
    closed = {wire.broker.expect(T.CLOSE_CONSUMER).close_consumer.consumer_id for _ in range(2)}
    assert closed == {subs[2].consumer_id, subs[3].consumer_id}
    flow = wire.broker.expect(T.FLOW).flow
    assert (flow.consumer_id, flow.messagePermits) == (
        subs[0].consumer_id,
        wire.conn._settings.consumer.receiver_queue_size,
    )
    assert list(wire.conn.consumers) == [subs[0].consumer_id]
    assert wire.conn.consumers[subs[0].consumer_id].index == 0
    assert not wire.conn._groups
    # Deliveries reach the harness as consumer 0.
    wire.broker.send(message(subs[0].consumer_id, 0, section(b"p")))
    wire.deliveries.wait_for(1)
    assert wire.deliveries.got[0][0] == 0


def test_a_group_of_several_subscriptions_sends_each_consumers_own(make_wire):
    """A group's SUBSCRIBEs come from one template per run of a subscription and type: each
    consumer's own subscription and mode reach the wire, in order, in one write."""
    wire = make_wire()
    wire.conn._sock = recording = RecordingSocket(wire.conn._sock)
    plan = [("a", "Shared"), ("a", "Shared"), ("b", "Shared"), ("b", "Failover"), ("a", "Shared")]
    specs = [ConsumerSpec(i, f"c{i}", "topic", sub, mode) for i, (sub, mode) in enumerate(plan)]
    task = gevent.spawn(wire.conn.subscribe_group, specs, [["topic"]] * len(specs))
    subs = [wire.broker.expect(T.SUBSCRIBE).subscribe for _ in specs]
    assert len(recording.writes) == 1
    assert [(s.subscription, s.subType, s.consumer_name) for s in subs] == [
        ("a", pb.CommandSubscribe.Shared, "c0"),
        ("a", pb.CommandSubscribe.Shared, "c1"),
        ("b", pb.CommandSubscribe.Shared, "c2"),
        ("b", pb.CommandSubscribe.Failover, "c3"),
        ("a", pb.CommandSubscribe.Shared, "c4"),
    ]
    wire.broker.send(*(encode_frame(command(T.SUCCESS, request_id=s.request_id)) for s in subs))
    outcomes, ids = task.get(timeout=WAIT)
    assert all(type(o) is int for o in outcomes)
    assert ids == [[s.consumer_id] for s in subs]


def test_a_lost_connection_fails_a_group_waiting_on_it(make_wire):
    wire = make_wire()
    lost: list = []
    wire.conn._on_consumers_lost = lost.extend
    specs = [ConsumerSpec(i, f"c{i}", "topic", "sub", "Broadcast") for i in range(3)]
    task = gevent.spawn(wire.conn.subscribe_group, specs, [["topic"]] * 3)
    subs = [wire.broker.expect(T.SUBSCRIBE).subscribe for _ in specs]
    wire.broker.send(encode_frame(command(T.SUCCESS, request_id=subs[0].request_id)))
    gevent.sleep(0.05)
    wire.broker.sock.close()
    outcomes, _ = task.get(timeout=WAIT)
    assert type(outcomes[0]) is int
    assert all("closed by the broker" in str(o) for o in outcomes[1:])
    assert wire.conn.closed and not wire.conn._groups and not wire.conn.consumers
    # The one that subscribed is handed back to be subscribed again, as a lost consumer is.
    assert [(state.index, state.consumer_id) for state in lost] == [(0, subs[0].consumer_id)]
    with pytest.raises(RequestFailed, match="closed by the broker"):
        wire.conn.subscribe_group(specs, [["topic"]] * 3)


def test_a_lost_connection_fails_what_waits_on_it(make_wire):
    wire = make_wire()
    task = gevent.spawn(wire.conn.partitions, "topic")
    wire.broker.expect(T.PARTITIONED_METADATA)
    wire.broker.sock.close()
    with pytest.raises(RequestFailed, match="closed by the broker"):
        task.get(timeout=WAIT)
    assert wire.conn.closed


def _stuck_write(wire: Wire) -> tuple[gevent.Greenlet, int]:
    """A send of more than the socket takes while the broker reads nothing: (its greenlet,
    the PINGs it carries), once it waits for room."""
    wire.conn._raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    pings = 20_000  # 160 KB
    task = gevent.spawn(wire.conn.send, *[ev.Ping()] * pings)
    gevent.sleep(0.05)
    assert not task.ready()
    return task, pings


def test_a_write_the_socket_cannot_take_at_once_waits_for_room_and_arrives_whole(make_wire):
    wire = make_wire()
    task, pings = _stuck_write(wire)
    for _ in range(pings):
        wire.broker.expect(T.PING)
    task.get(timeout=WAIT)
    assert wire.conn._write_watcher is None and not wire.conn.closed


def test_a_write_waiting_for_room_hears_that_the_connection_closed(make_wire):
    wire = make_wire()
    task, _ = _stuck_write(wire)
    wire.conn.close()
    with pytest.raises(RequestFailed):
        task.get(timeout=WAIT)


# -- sockets ------------------------------------------------------------------------------------
def test_connections_can_come_from_another_loopback_address():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    try:
        sock = connect_socket("127.0.0.1", listener.getsockname()[1], "127.0.0.3", 2.0)
        with gevent.Timeout(WAIT):
            accepted, peer = listener.accept()
        assert peer[0] == "127.0.0.3"
        accepted.close()
        sock.close()
    finally:
        listener.close()


# -- producer -----------------------------------------------------------------------------------
def open_producer(wire: Wire) -> PulsarProducer:
    producer = PulsarProducer(wire.conn, "topic", wire.conn._settings, wire.group)
    task = gevent.spawn(producer.open)
    rid = wire.broker.expect(T.PRODUCER).producer.request_id
    wire.broker.send(
        encode_frame(command(T.PRODUCER_SUCCESS, request_id=rid, producer_name="fake-producer"))
    )
    task.get(timeout=WAIT)
    return producer


def receipt(sequence_id: int, producer_id: int = 1) -> bytes:
    return encode_frame(
        command(
            T.SEND_RECEIPT,
            producer_id=producer_id,
            sequence_id=sequence_id,
            message_id=pb.MessageIdData(ledgerId=1, entryId=sequence_id),
        )
    )


def test_sends_carry_metadata_and_settle_in_fifo_order(make_wire):
    wire = make_wire()
    producer = open_producer(wire)
    done: list[tuple[int, Exception | None]] = []
    for k in range(3):
        producer.send_async(
            b"key" if k == 1 else None,
            b"body%d" % k,
            partial(lambda k, error: done.append((k, error)), k),
        )
    frames = [wire.broker.next_frame() for _ in range(3)]
    for k, frame in enumerate(frames):
        assert frame.command.send.sequence_id == k
        payload = decode_payload(frame.payload, verify=True)
        assert payload.data == b"body%d" % k
        assert payload.metadata.producer_name == "fake-producer"
        assert payload.metadata.sequence_id == k
        assert payload.metadata.publish_time > 0
    assert decode_payload(frames[1].payload).metadata.partition_key == "key"
    assert not decode_payload(frames[0].payload).metadata.HasField("partition_key")
    wire.broker.send(receipt(0), receipt(1), receipt(2))
    with gevent.Timeout(WAIT):
        while len(done) < 3:
            gevent.sleep(0.001)
    assert done == [(0, None), (1, None), (2, None)]


def test_a_send_error_fails_that_send_only(make_wire):
    wire = make_wire()
    producer = open_producer(wire)
    done: list[Exception | None] = []
    for _ in range(2):
        producer.send_async(None, b"x", done.append)
    wire.broker.send(
        encode_frame(
            command(
                T.SEND_ERROR,
                producer_id=1,
                sequence_id=0,
                error=pb.PersistenceError,
                message="disk full",
            )
        ),
        receipt(1),
    )
    with gevent.Timeout(WAIT):
        while len(done) < 2:
            gevent.sleep(0.001)
    assert isinstance(done[0], DriverError)
    assert "PersistenceError: disk full" in str(done[0])
    assert done[1] is None


def test_sends_without_a_receipt_time_out(make_wire):
    wire = make_wire(send_timeout_ms=50)
    producer = open_producer(wire)
    done: list[Exception | None] = []
    producer.send_async(None, b"x", done.append)
    with gevent.Timeout(WAIT):
        while not done:
            gevent.sleep(0.005)
    assert "timed out" in str(done[0])
    wire.broker.send(receipt(0))  # a late receipt is ignored
    producer.send_async(None, b"y", done.append)
    wire.broker.send(receipt(1))
    with gevent.Timeout(WAIT):
        while len(done) < 2:
            gevent.sleep(0.001)
    assert done[1] is None


def test_a_full_producer_blocks_its_sender(make_wire):
    wire = make_wire(max_pending_messages=2)
    producer = open_producer(wire)
    done: list[Exception | None] = []

    def send_three() -> None:
        for _ in "123":
            producer.send_async(None, b"x", done.append)

    sender = gevent.spawn(send_three)
    for _ in range(2):
        wire.broker.next_frame()
    gevent.sleep(0.02)
    assert not sender.ready()
    wire.broker.send(receipt(0))
    assert wire.broker.next_frame().command.send.sequence_id == 2
    sender.get(timeout=WAIT)


def test_a_lost_connection_fails_pending_and_later_sends(make_wire):
    wire = make_wire()
    producer = open_producer(wire)
    done: list[Exception | None] = []
    producer.send_async(None, b"x", done.append)
    wire.broker.next_frame()
    wire.broker.sock.close()
    with gevent.Timeout(WAIT):
        while not done:
            gevent.sleep(0.001)
    producer.send_async(None, b"y", done.append)
    assert len(done) == 2
    assert all("closed by the broker" in str(error) for error in done)


# -- producer batching ----------------------------------------------------------------------------
def batch_receipt(first: int, last: int) -> bytes:
    return encode_frame(
        command(
            T.SEND_RECEIPT,
            producer_id=1,
            sequence_id=first,
            highest_sequence_id=last,
            message_id=pb.MessageIdData(ledgerId=1, entryId=first),
        )
    )


def wait_done(done: list, n: int) -> None:
    with gevent.Timeout(WAIT):
        while len(done) < n:
            gevent.sleep(0.001)


def test_a_batch_goes_out_as_one_send_after_its_delay_and_one_receipt_settles_it(make_wire):
    wire = make_wire(batching_enabled=True, batching_max_publish_delay_ms=20)
    producer = open_producer(wire)
    done: list = []
    for k in range(3):
        producer.send_async(None, b"body%d" % k, partial(lambda k, e: done.append((k, e)), k))
    frame = wire.broker.next_frame()
    send = frame.command.send
    assert (send.sequence_id, send.num_messages, send.highest_sequence_id) == (0, 3, 2)
    payload = decode_payload(frame.payload, verify=True)
    assert payload.metadata.num_messages_in_batch == 3
    messages = split_batch(payload)
    assert [body for _, body in messages] == [b"body0", b"body1", b"body2"]
    assert [single.sequence_id for single, _ in messages] == [0, 1, 2]
    assert done == []  # no receipt yet
    wire.broker.send(batch_receipt(0, 2))
    wait_done(done, 3)
    assert done == [(0, None), (1, None), (2, None)]


def test_a_new_key_or_a_full_batch_sends_the_batch_at_once(make_wire):
    wire = make_wire(
        batching_enabled=True, batching_max_publish_delay_ms=10_000, batching_max_messages=2
    )
    producer = open_producer(wire)
    done: list = []
    for key in (b"a", b"b", b"b", b"b"):
        producer.send_async(key, key, done.append)
    frames = [wire.broker.next_frame() for _ in range(2)]  # [a] cut by the key, [b b] full
    keys = [decode_payload(f.payload).metadata.partition_key for f in frames]
    assert keys == ["a", "b"]
    assert [f.command.send.num_messages for f in frames] == [1, 2]
    wire.broker.send(batch_receipt(0, 0), batch_receipt(1, 2))
    wait_done(done, 3)
    assert done == [None] * 3  # the 4th waits in an open batch for 10 s...
    producer.close()  # ...or until the producer closes, which sends it first
    assert wire.broker.next_frame().command.send.sequence_id == 3
