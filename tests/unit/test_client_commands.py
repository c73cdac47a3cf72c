"""pulsar_protocol.client_commands: a group's SUBSCRIBEs and FLOWs in bulk, byte for byte what
protobuf and the codec's single verbs make, with the same states and the same refusals."""

from __future__ import annotations

import pytest

from drivers.base import ConsumerSpec
from drivers.pulsar.consumer import subscribe_command, subscribe_template
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol import requests as rq
from pulsar_protocol.client_commands import (
    ClientConnection,
    GroupSubscribeTemplate,
    SubscribesAnswered,
    flow_frames,
)
from pulsar_protocol.commands import T, command, type_name
from pulsar_protocol.connection import Connection
from pulsar_protocol.errors import LocalProtocolError
from pulsar_protocol.frames import encode_frame
from pulsar_protocol.state import CLIENT, SERVER, ConnectionState, ConsumerState

IDS = [0, 1, 127, 128, 16383, 16384, 1 << 40]


def _frames(commands: list[pb.BaseCommand]) -> bytes:
    return b"".join(encode_frame(cmd) for cmd in commands)


@pytest.mark.parametrize("mode", ["Exclusive", "Shared", "Failover", "Key_Shared", "Broadcast"])
@pytest.mark.parametrize("topic", [None, "persistent://public/default/t-partition-3"])
def test_a_groups_subscribe_frames_are_protobufs_encoding_byte_for_byte(mode, topic):
    names = ["w0-c0", "c", "é" * 70, "", "x" * 200, "w1-c99", "y"]
    spec = ConsumerSpec(0, "", "persistent://public/default/" + "t" * 120, "sub-0", mode)
    template = subscribe_template(spec, topic)
    assert isinstance(template, GroupSubscribeTemplate)
    request_ids = list(reversed(IDS))
    expected = _frames(
        [
            subscribe_command(ConsumerSpec(0, name, spec.topic, "sub-0", mode), cid, rid, topic)
            for cid, rid, name in zip(IDS, request_ids, names, strict=True)
        ]
    )
    assert template.frames(IDS, request_ids, names) == expected
    assert template.frames([], [], []) == b""


@pytest.mark.parametrize("permits", [1, 127, 128, 1000, 1 << 20])
def test_a_groups_flow_frames_are_protobufs_encoding_byte_for_byte(permits):
    expected = _frames([command(T.FLOW, consumer_id=cid, messagePermits=permits) for cid in IDS])
    assert flow_frames(IDS, permits) == expected
    assert flow_frames([], permits) == b""


def _template() -> GroupSubscribeTemplate:
    return GroupSubscribeTemplate(
        pb.CommandSubscribe(topic="t", subscription="s", subType=pb.CommandSubscribe.Shared),
        pb.CommandSubscribe(durable=True),
    )


def _connected(**options) -> tuple[ClientConnection, Connection]:
    client = ClientConnection(**options)
    server = Connection(SERVER, server_version="test-broker")
    client.send(ev.Connect("test-client", 20, True))
    _feed(server, client.data_to_send())
    _feed(client, server.data_to_send())
    assert client.state is ConnectionState.CONNECTED
    return client, server


def _feed(conn: Connection, data: bytes) -> list[ev.Event]:
    conn.receive_data(data)
    out = []
    while (event := conn.next_event()) is not ev.NEED_DATA:
        out.append(event)
    return out


@pytest.mark.parametrize("individual", [False, True])
def test_a_group_subscribes_and_flows_as_one_consumer_at_a_time_would(individual):
    bulk, server = _connected(individual_acks=individual)
    single, _ = _connected(individual_acks=individual)
    ids = [3, 4, 5]
    rids = [bulk.next_request_id() for _ in ids]
    assert rids == [single.next_request_id() for _ in ids]
    names = ["c3", "c4", "c5"]
    bulk.send_subscribes(_template(), ids, rids, names)
    for cid, rid, name in zip(ids, rids, names, strict=True):
        single.send_subscribe(_template(), cid, rid, name)
    sent = bulk.data_to_send()
    assert sent == single.data_to_send()
    assert _feed(server, sent) == [
        rq.Subscribe(rid, "t", "s", rq.SubType.SHARED, cid, name)
        for cid, rid, name in zip(ids, rids, names, strict=True)
    ]
    assert [bulk.consumer_state(cid) for cid in ids] == [ConsumerState.SUBSCRIBING] * 3
    # 3 answered, 4 refused, 5 not yet: only 3 gets its FLOW.
    answers = [
        command(T.SUCCESS, request_id=rids[0]),
        command(T.ERROR, request_id=rids[1], error=pb.ConsumerBusy, message="busy"),
    ]
    for conn in (bulk, single):
        events = _feed(conn, _frames(answers))
        assert _answers_of(events) == [("SUCCESS", rids[0]), ("ERROR", rids[1])]
    assert bulk.send_flows(ids, 1000) == [3]
    single.send(ev.Flow(3, 1000))
    assert bulk.data_to_send() == single.data_to_send()
    assert bulk.consumer_state(3) is ConsumerState.ACTIVE
    assert bulk.consumer_state(4) is None
    assert bulk.consumer_state(5) is ConsumerState.SUBSCRIBING
    # Permits come back at half the first FLOW, as after a single FLOW.
    for conn in (bulk, single):
        conn.acknowledge_run([3], 499)
        assert not conn.wants_write
        conn.acknowledge_run([3], 1)
    assert (
        bulk.data_to_send()
        == single.data_to_send()
        == encode_frame(command(T.FLOW, consumer_id=3, messagePermits=500))
    )
    assert bulk.send_flows([3], 10) == []  # active already: not a first FLOW


def test_a_group_is_refused_whole_as_a_single_subscribe_would_be():
    client, _ = _connected()
    client.send_subscribes(_template(), [1], [client.next_request_id()], ["c1"])
    client.data_to_send()
    with pytest.raises(LocalProtocolError, match="consumer 1 is subscribing"):
        client.send_subscribes(_template(), [2, 1], [8, 9], ["c2", "c1"])
    assert client.state is ConnectionState.ERROR
    assert not client.wants_write
    assert client.consumer_state(2) is None

    client, _ = _connected()
    rid = client.next_request_id()
    client.send_subscribes(_template(), [1], [rid], ["c1"])
    with pytest.raises(LocalProtocolError, match="already waiting"):
        client.send_subscribes(_template(), [2, 3], [rid + 1, rid], ["c2", "c3"])
    assert client.state is ConnectionState.ERROR

    client, _ = _connected()
    with pytest.raises(LocalProtocolError, match="twice"):
        client.send_subscribes(_template(), [2, 2], [1, 2], ["c2", "c2"])

    fresh = ClientConnection()
    assert fresh.role is CLIENT
    with pytest.raises(LocalProtocolError, match="before the handshake"):
        fresh.send_subscribes(_template(), [1], [1], ["c1"])
    with pytest.raises(LocalProtocolError, match="cannot send"):
        fresh.send_subscribes(_template(), [1], [1], ["c1"])  # in ERROR now


def test_a_group_flow_refuses_what_a_single_flow_refuses():
    client, _ = _connected()
    with pytest.raises(LocalProtocolError, match="0 permits"):
        client.send_flows([1], 0)
    with pytest.raises(LocalProtocolError, match="FLOW"):
        ClientConnection().send_flows([1], 10)


def _answers_of(events: list[ev.Event]) -> list[tuple[str, int]]:
    """Events as (kind, request id): a SubscribesAnswered as the SUCCESS Responses it stands
    for."""
    out = []
    for event in events:
        if isinstance(event, SubscribesAnswered):
            out += [("SUCCESS", rid) for rid in event.request_ids]
        else:
            assert isinstance(event, ev.Response)
            out.append((type_name(event.command.type), event.request_id))
    return out


@pytest.mark.parametrize("how", ["whole", "byte_at_a_time", "in_two"])
def test_subscribe_answers_read_from_bytes_are_those_protobuf_reads(how):
    """The same answers to a fast codec and to the base one: the same events (a
    SubscribesAnswered standing for SUCCESS Responses), the same states, the same requests
    left waiting, whatever the reads; answers the fast path does not take (to a CLOSING
    consumer, to another request, to nothing waited for, an ERROR, a SUCCESS of another shape)
    go the base class's way."""
    codecs = []
    for make in (ClientConnection, lambda: Connection(CLIENT)):
        client = make()
        server = Connection(SERVER, server_version="test-broker")
        client.send(ev.Connect("test-client", 20, True))
        _feed(server, client.data_to_send())
        _feed(client, server.data_to_send())
        ids = list(range(1, 201))  # request ids of one and two varint bytes
        for cid in ids:
            client.send_subscribe(_template(), cid, client.next_request_id(), f"c{cid}")
        client.send(ev.Request(command(T.CLOSE_CONSUMER, consumer_id=7, request_id=1000)))
        close_rid = client.next_request_id()
        client.send(ev.Request(command(T.CLOSE_CONSUMER, consumer_id=8, request_id=close_rid)))
        client.data_to_send()
        codecs.append(client)
    answers = (
        [command(T.SUCCESS, request_id=rid) for rid in range(1, 150)]
        + [command(T.SUCCESS, request_id=5000)]  # waited for by nobody
        + [command(T.ERROR, request_id=150, error=pb.ConsumerBusy, message="busy")]
        + [command(T.SUCCESS, request_id=rid) for rid in range(151, 170)]
        + [command(T.SUCCESS, request_id=close_rid)]  # answers a CLOSE_CONSUMER
        + [command(T.SUCCESS, request_id=rid) for rid in range(170, 190)]
    )
    schema = pb.Schema(name="s", schema_data=b"", type=1)
    data = (
        _frames(answers)
        + encode_frame(command(T.SUCCESS, request_id=195, schema=schema))  # another shape
        + _frames([command(T.SUCCESS, request_id=196)])[:-1]  # the rest is still to come
    )
    got = []
    for client in codecs:
        if how == "whole":
            chunks = [data]
        elif how == "byte_at_a_time":
            chunks = [data[i : i + 1] for i in range(len(data))]
        else:
            chunks = [data[:700], data[700:]]
        events: list[ev.Event] = []
        for chunk in chunks:
            events += _feed(client, chunk)
        got.append(events)
    fast, base = got
    assert any(isinstance(event, SubscribesAnswered) for event in fast)
    assert not any(isinstance(event, SubscribesAnswered) for event in base)
    assert _answers_of(fast) == _answers_of(base)
    bulk, single = codecs
    assert bulk._pending == single._pending
    assert {cid: c.state for cid, c in bulk._consumers.items()} == {
        cid: c.state for cid, c in single._consumers.items()
    }
    assert bulk.consumer_state(1) is ConsumerState.SUBSCRIBED
    assert bulk.consumer_state(7) is ConsumerState.CLOSING  # answered while closing
    assert bulk.consumer_state(8) is None
    assert bulk.consumer_state(150) is None  # refused
    assert bulk.consumer_state(195) is ConsumerState.SUBSCRIBED
    assert bulk.consumer_state(196) is ConsumerState.SUBSCRIBING
