"""pulsar_protocol.Connection without sockets: a client and a server talking in memory.

As h11's tests: ConnectionPair checks that what one side sends the other receives as the
same events, and every exchange is fed all at once, one byte at a time, and with trailing
bytes of a frame still to come.
"""

from __future__ import annotations

import random
import struct

import pytest

from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol import requests as rq
from pulsar_protocol.commands import (
    SubscribeTemplate,
    T,
    command,
    message_command_bytes,
)
from pulsar_protocol.connection import (
    MAX_PROTOCOL_VERSION,
    Connection,
    ServerCodec,
    server_codec,
)
from pulsar_protocol.errors import LocalProtocolError, RemoteProtocolError
from pulsar_protocol.frames import FrameDecoder, encode_frame, encode_raw_frame, frame_head
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.stamps import EntryStamps, decode_stamps, encode_stamps
from pulsar_protocol.state import CLIENT, SERVER, ConnectionState, ConsumerState, ProducerState

FEEDS = ["whole", "byte_at_a_time", "split_with_partial_tail"]


def feed(conn: Connection | ServerCodec, data: bytes, how: str = "whole") -> list[ev.Event]:
    """Every event `data` yields, fed in the way `how` says."""
    if how == "whole":
        chunks = [data]
    elif how == "byte_at_a_time":
        chunks = [data[i : i + 1] for i in range(len(data))]
    else:
        cut = max(1, len(data) - 3)
        chunks = [data[:cut], data[cut:]]
    out: list[ev.Event] = []
    for chunk in chunks:
        conn.receive_data(chunk)
        while (event := conn.next_event()) is not ev.NEED_DATA:
            out.append(event)
    return out


class ConnectionPair:
    """A client and a server wired back to back (h11's ConnectionPair)."""

    def __init__(self, how: str = "whole", **client_kwargs) -> None:
        self.how = how
        self.client = Connection(CLIENT, **client_kwargs)
        self.server = Connection(SERVER, server_version="test-broker", max_message_size=5 << 20)

    def peer(self, side: Connection) -> Connection:
        return self.server if side is self.client else self.client

    def send(self, side: Connection, event: ev.Event, expect: list | None = None) -> list:
        """`side` sends `event`; the other side must receive `expect` (default: the event)."""
        side.send(event)
        got = feed(self.peer(side), side.data_to_send(), self.how)
        assert got == ([event] if expect is None else expect)
        return got

    def answer(self, side: Connection) -> list[ev.Event]:
        """What `side`'s codec queued by itself, as its peer receives it."""
        return feed(self.peer(side), side.data_to_send(), self.how)

    def handshake(self, version: int = 20, bem: bool = True) -> ev.Connected:
        self.send(self.client, ev.Connect("test-client", version, bem))
        (connected,) = self.answer(self.server)
        assert isinstance(connected, ev.Connected)
        return connected


@pytest.fixture(params=FEEDS)
def pair(request) -> ConnectionPair:
    p = ConnectionPair(request.param)
    p.handshake()
    return p


def sub_request(
    rid: int, consumer_id: int, sub_type: rq.SubType = rq.SubType.SHARED
) -> rq.Subscribe:
    return rq.Subscribe(rid, "t", "s", sub_type, consumer_id)


def subscribe(p: ConnectionPair, consumer_id: int = 1, permits: int = 10) -> None:
    rid = p.client.next_request_id()
    p.send(p.client, sub_request(rid, consumer_id))
    p.send(p.server, ev.Response(command(T.SUCCESS, request_id=rid)))
    p.send(p.client, ev.Flow(consumer_id, permits))
    assert p.client.consumer_state(consumer_id) is ConsumerState.ACTIVE


def section(body: bytes = b"x") -> bytes:
    return encode_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), body
    )


# -- handshake ------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize(("asked", "agreed"), [(20, 20), (25, MAX_PROTOCOL_VERSION), (15, 15)])
def test_the_server_answers_connect_itself_with_the_negotiated_version(how, asked, agreed):
    p = ConnectionPair(how)
    assert p.client.state is ConnectionState.IDLE
    p.send(p.client, ev.Connect("test-client", asked, supports_broker_entry_metadata=True))
    assert p.client.state is ConnectionState.CONNECTING
    assert p.server.state is ConnectionState.CONNECTED
    assert p.server.peer_supports_broker_entry_metadata
    assert p.answer(p.server) == [ev.Connected("test-broker", agreed, 5 << 20)]
    assert (p.client.state, p.client.protocol_version) == (ConnectionState.CONNECTED, agreed)
    assert p.server.protocol_version == agreed
    assert p.client.server_version == "test-broker"


def test_a_server_needs_a_version_to_announce():
    with pytest.raises(LocalProtocolError):
        Connection(SERVER)


def test_nothing_but_connect_goes_first():
    client = Connection(CLIENT)
    with pytest.raises(LocalProtocolError, match="before the handshake"):
        client.send(ev.Ping())
    assert client.state is ConnectionState.ERROR
    server = Connection(SERVER, server_version="b")
    server.receive_data(encode_frame(command(T.PING)))
    with pytest.raises(RemoteProtocolError, match="PING from the client while idle") as info:
        server.next_event()
    assert info.value.server_error == pb.NotAllowedError
    assert server.state is ConnectionState.ERROR
    error = FrameDecoder()
    error.receive_data(server.data_to_send())
    answer = error.next_frame()
    assert answer is not None and answer.command.type == T.ERROR


def test_a_refused_connect_closes_the_connection():
    client = Connection(CLIENT)
    client.send(ev.Connect("c", 20))
    error = encode_frame(command(T.ERROR, request_id=0, error=pb.AuthenticationError, message="no"))
    assert feed(client, error) == [ev.ConnectionRefused(pb.AuthenticationError, "no")]
    assert client.state is ConnectionState.CLOSED


def test_the_server_codec_answers_connect_and_nobody_else_may():
    p = ConnectionPair()
    p.handshake()
    with pytest.raises(LocalProtocolError):
        p.server.send(ev.Connect("x", 20))


# -- keep-alive -----------------------------------------------------------------------------------
def test_pings_are_answered_inside_the_codec_both_ways(pair):
    pair.send(pair.client, ev.Ping(), expect=[])
    assert pair.answer(pair.server) == []  # the PONG: the client sees no event either
    pair.send(pair.server, ev.Ping(), expect=[])
    assert pair.answer(pair.client) == []
    pair.client.send(ev.Ping())
    pong = FrameDecoder()
    pair.server.receive_data(pair.client.data_to_send())
    assert pair.server.next_event() is ev.NEED_DATA
    pong.receive_data(pair.server.data_to_send())
    frame = pong.next_frame()
    assert frame is not None and frame.command.type == T.PONG


def test_pong_is_the_codecs_own(pair):
    with pytest.raises(LocalProtocolError):
        pair.client.send(ev.Pong())


# -- the unknown-command policy -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("side", "cmd"),
    [
        ("server", b"\x08\x24"),  # type 36 (AUTH_CHALLENGE): not in the codec's schema
        ("server", command(T.SUBSCRIBE, topic="t", subscription="s", subType=0)),  # wrong way
        ("client", b"\x08\x25"),  # type 37 (AUTH_RESPONSE)
        ("client", command(T.CONNECTED, server_version="again")),
    ],
)
def test_an_unknown_or_misdirected_command_ends_the_connection_on_both_sides(side, cmd):
    p = ConnectionPair()
    p.handshake()
    receiver = p.client if side == "server" else p.server
    if isinstance(cmd, bytes):
        receiver.receive_data(encode_raw_frame(cmd))
    else:
        if cmd.type == T.SUBSCRIBE:
            cmd.subscribe.consumer_id, cmd.subscribe.request_id = 1, 1
        receiver.receive_data(encode_frame(cmd))
    with pytest.raises(RemoteProtocolError) as info:
        receiver.next_event()
    assert info.value.server_error == pb.NotAllowedError
    assert receiver.state is ConnectionState.ERROR
    with pytest.raises(RemoteProtocolError):
        receiver.next_event()
    with pytest.raises(LocalProtocolError):
        receiver.send(ev.Ping())
    # A broker tells the client why before its shell closes; a client just closes.
    assert bool(receiver.data_to_send()) == (receiver is p.server)


def test_the_servers_error_reply_reaches_the_client_as_a_protocol_error():
    p = ConnectionPair()
    p.handshake()
    p.server.receive_data(encode_raw_frame(b"\x08\x25"))
    with pytest.raises(RemoteProtocolError):
        p.server.next_event()
    decoder = FrameDecoder()
    decoder.receive_data(p.server.data_to_send())
    frame = decoder.next_frame()
    assert frame is not None
    assert (frame.command.type, frame.command.error.error) == (T.ERROR, pb.NotAllowedError)
    assert "unknown command" in frame.command.error.message


# -- requests -------------------------------------------------------------------------------------
def lookup(rid: int) -> rq.Lookup:
    return rq.Lookup(rid, "t")


def lookup_answer(rid: int) -> ev.Response:
    return ev.Response(
        command(
            T.LOOKUP_RESPONSE,
            request_id=rid,
            response=pb.CommandLookupTopicResponse.Connect,
            brokerServiceUrl="pulsar://b:6650",
        )
    )


def test_each_answer_reaches_its_request_once(pair):
    first, second = pair.client.next_request_id(), pair.client.next_request_id()
    assert first != second
    for rid in (first, second):
        pair.send(pair.client, lookup(rid))
    pair.send(pair.server, lookup_answer(second))
    pair.send(pair.server, lookup_answer(first))
    # An answer nobody waits for any more is dropped (Pulsar's clients log and drop them).
    pair.client.receive_data(encode_frame(lookup_answer(first).command))
    assert pair.client.next_event() is ev.NEED_DATA


def test_an_error_settles_any_request(pair):
    rid = pair.client.next_request_id()
    pair.send(pair.client, lookup(rid))
    (got,) = pair.send(
        pair.server,
        ev.Response(command(T.ERROR, request_id=rid, error=pb.ServiceNotReady, message="later")),
    )
    assert got.error == pb.ServiceNotReady


def test_an_answer_of_the_wrong_kind_is_a_remote_protocol_error(pair):
    rid = pair.client.next_request_id()
    pair.send(pair.client, lookup(rid))
    pair.client.receive_data(encode_frame(command(T.SUCCESS, request_id=rid)))
    with pytest.raises(RemoteProtocolError, match="SUCCESS answers LOOKUP"):
        pair.client.next_event()


def test_a_client_cannot_reuse_a_waiting_request_id(pair):
    pair.client.send(lookup(1))
    with pytest.raises(LocalProtocolError, match="already waiting"):
        pair.client.send(lookup(1))


def test_a_server_echoes_request_ids_and_never_keys_on_them():
    """Pulsar's clients may reuse a request_id on one connection (DESIGN.md, the wire)."""
    p = ConnectionPair()
    p.handshake()
    twice = encode_frame(rq.encode(lookup(7))) * 2
    assert feed(p.server, twice) == [lookup(7), lookup(7)]
    p.server.send(lookup_answer(7))
    p.server.send(lookup_answer(7))
    with pytest.raises(LocalProtocolError, match="no request 7"):
        p.server.send(lookup_answer(7))


def test_a_server_codec_reads_and_answers_as_a_servers_connection_without_a_clients_state():
    """A broker's `ServerCodec` is `Connection(SERVER)` less the client's slots (issue 40: a
    connection per consumer): the same events read and the same bytes answered for a client's
    handshake, SUBSCRIBE, FLOW, ACK, lookup (its request id twice) and PING; no request of its
    own, the client's tables read-only; the broker's settings its class's, one class for them;
    96 B smaller."""
    import sys

    def raw(t: int, **fields) -> bytes:
        return encode_raw_frame(command(t, **fields).SerializeToString())

    rid = 5
    hello = raw(T.CONNECT, client_version="test", protocol_version=20)
    ack = raw(
        T.ACK,
        consumer_id=1,
        ack_type=pb.CommandAck.Cumulative,
        message_id=[pb.MessageIdData(ledgerId=3, entryId=0)],
    )
    rest = (
        encode_frame(rq.encode(sub_request(rid, 1)))
        + raw(T.FLOW, consumer_id=1, messagePermits=10)
        + ack
        + encode_frame(rq.encode(lookup(7))) * 2
        + raw(T.PING)
    )
    version, size = "test-broker", 5 << 20
    old = Connection(SERVER, server_version=version, max_message_size=size)
    new = server_codec(version, max_message_size=size)()
    seen = []
    for server in (old, new):
        got = feed(server, hello) + feed(server, rest)
        server.send(ev.Response(command(T.SUCCESS, request_id=rid)))
        server.send(lookup_answer(7))
        seen.append((got, server.data_to_send()))
        with pytest.raises(LocalProtocolError):
            server.next_request_id()
        with pytest.raises(TypeError):
            server._consumers[1] = None  # type: ignore[assignment]
        assert server.consumer_state(1) is None and not server.acks_due
    assert seen[0] == seen[1]
    assert len(seen[0][0]) == 6  # CONNECT, SUBSCRIBE, FLOW, ACK, the lookup twice (PING answered)
    assert sys.getsizeof(new) <= sys.getsizeof(old) - 96
    assert type(new) is server_codec(version, max_message_size=size)
    assert type(new) is not server_codec(version, max_message_size=size + 1)


def test_a_server_codec_class_checks_connect_with_its_brokers_authenticator():
    """The authenticator is a setting of the class (`server_codec`), called with CONNECT's
    credentials as a function of them, not as a method of the codec."""
    seen: list[tuple[str, bytes]] = []

    def check(method: str, data: bytes) -> str | None:
        seen.append((method, data))
        return None if data == b"good" else "bad token"

    codec = server_codec("test-broker", authenticate=check)
    for data in (b"good", b"bad"):
        client, server = Connection(CLIENT), codec()
        client.send(ev.Connect("c", 20, auth_method_name="token", auth_data=data))
        if data == b"good":
            (connect,) = feed(server, client.data_to_send())
            assert isinstance(connect, ev.Connect)
        else:
            with pytest.raises(RemoteProtocolError, match="bad token"):
                feed(server, client.data_to_send())
    assert seen == [("token", b"good"), ("token", b"bad")]


def test_success_from_bytes_settles_a_request_as_the_event_does():
    """`send_success` is `send(Response(SUCCESS))` built from bytes: the same frames on the wire,
    and the server's count of what it owes is kept the same way."""
    p = ConnectionPair()
    p.handshake()
    for cid, rid in enumerate((5, 5, 1 << 40)):
        sub = command(
            T.SUBSCRIBE, topic="t", subscription="s", subType=1, consumer_id=cid, request_id=rid
        )
        assert feed(p.server, encode_frame(sub)) == [sub_request(rid, cid)]
    p.server.send_success(5)
    p.server.send_success(5)
    p.server.send_success(1 << 40)
    with pytest.raises(LocalProtocolError, match="no request 5"):
        p.server.send_success(5)
    assert p.server.state is ConnectionState.ERROR
    decoder = FrameDecoder()
    decoder.receive_data(p.server.data_to_send())
    answers = [frame.command for frame in decoder.frames()]
    assert answers == [command(T.SUCCESS, request_id=r) for r in (5, 5, 1 << 40)]
    with pytest.raises(LocalProtocolError, match="cannot answer"):
        p.client.send_success(5)


def test_successes_of_a_run_are_the_frames_one_success_each_would_queue():
    """`send_successes` queues what `send_success` of each would, in order; when one cannot be
    answered, those before it are still queued and the connection is in ERROR."""
    frames = {}
    for batched in (False, True):
        p = ConnectionPair()
        p.handshake()
        for cid, rid in enumerate((3, 4, 1 << 40, 9)):
            sub = command(
                T.SUBSCRIBE, topic="t", subscription="s", subType=1, consumer_id=cid, request_id=rid
            )
            feed(p.server, encode_frame(sub))
        if batched:
            p.server.send_successes([3, 4, 1 << 40])
        else:
            for rid in (3, 4, 1 << 40):
                p.server.send_success(rid)
        frames[batched] = p.server.data_to_send()
        with pytest.raises(LocalProtocolError, match="no request 5"):
            p.server.send_successes([9, 5, 3])
        assert p.server.state is ConnectionState.ERROR
        decoder = FrameDecoder()
        decoder.receive_data(p.server.data_to_send())
        assert [frame.command for frame in decoder.frames()] == [command(T.SUCCESS, request_id=9)]
    assert frames[True] == frames[False]


def test_only_a_client_requests_and_only_a_server_answers(pair):
    with pytest.raises(LocalProtocolError):
        pair.server.next_request_id()
    with pytest.raises(LocalProtocolError):
        pair.client.send(lookup_answer(1))


# -- consumers ------------------------------------------------------------------------------------
def test_a_consumer_moves_from_subscribing_to_active_with_its_first_flow(pair):
    rid = pair.client.next_request_id()
    pair.send(pair.client, sub_request(rid, 3))
    assert pair.client.consumer_state(3) is ConsumerState.SUBSCRIBING
    pair.send(pair.server, ev.Response(command(T.SUCCESS, request_id=rid)))
    assert pair.client.consumer_state(3) is ConsumerState.SUBSCRIBED
    pair.send(pair.client, ev.Flow(3, 10))
    assert pair.client.consumer_state(3) is ConsumerState.ACTIVE


def test_a_refused_or_closed_consumer_is_forgotten(pair):
    rid = pair.client.next_request_id()
    pair.send(pair.client, sub_request(rid, 1, rq.SubType.EXCLUSIVE))
    pair.send(
        pair.server,
        ev.Response(command(T.ERROR, request_id=rid, error=pb.ConsumerBusy, message="busy")),
    )
    assert pair.client.consumer_state(1) is None
    subscribe(pair, 2)
    pair.send(pair.server, ev.Notice(command(T.CLOSE_CONSUMER, consumer_id=2, request_id=0)))
    assert pair.client.consumer_state(2) is None


def test_closing_a_consumer_ignores_a_late_subscribe_answer(pair):
    sub_rid, close_rid = pair.client.next_request_id(), pair.client.next_request_id()
    pair.send(pair.client, sub_request(sub_rid, 4))
    pair.send(pair.client, rq.CloseConsumer(close_rid, 4))
    assert pair.client.consumer_state(4) is ConsumerState.CLOSING
    pair.send(pair.server, ev.Response(command(T.SUCCESS, request_id=sub_rid)))
    assert pair.client.consumer_state(4) is ConsumerState.CLOSING
    pair.send(pair.server, ev.Response(command(T.SUCCESS, request_id=close_rid)))
    assert pair.client.consumer_state(4) is None


def _template() -> SubscribeTemplate:
    return SubscribeTemplate(
        pb.CommandSubscribe(topic="t", subscription="s", subType=pb.CommandSubscribe.Shared),
        pb.CommandSubscribe(durable=True),
    )


def test_a_subscribe_from_a_template_is_tracked_as_a_subscribe_request(pair):
    rid = pair.client.next_request_id()
    pair.client.send_subscribe(_template(), 3, rid, "c3")
    assert pair.client.consumer_state(3) is ConsumerState.SUBSCRIBING
    (request,) = feed(pair.server, pair.client.data_to_send(), pair.how)
    assert request == rq.Subscribe(rid, "t", "s", rq.SubType.SHARED, 3, "c3")
    pair.send(pair.server, ev.Response(command(T.SUCCESS, request_id=rid)))
    assert pair.client.consumer_state(3) is ConsumerState.SUBSCRIBED
    pair.send(pair.client, ev.Flow(3, 10))
    assert pair.client.consumer_state(3) is ConsumerState.ACTIVE


def test_a_subscribe_from_a_template_is_refused_as_a_request_would_be(pair):
    rid = pair.client.next_request_id()
    pair.client.send_subscribe(_template(), 3, rid, "c3")
    with pytest.raises(LocalProtocolError, match=f"request_id {rid} is already waiting"):
        pair.client.send_subscribe(_template(), 4, rid, "c4")
    assert pair.client.state is ConnectionState.ERROR
    fresh = ConnectionPair()
    with pytest.raises(LocalProtocolError, match="before the handshake"):
        fresh.client.send_subscribe(_template(), 1, 1, "c1")
    with pytest.raises(LocalProtocolError, match="cannot request SUBSCRIBE"):
        fresh.server.send_subscribe(_template(), 1, 1, "c1")


def test_a_flow_for_an_unknown_consumer_is_a_local_protocol_error(pair):
    with pytest.raises(LocalProtocolError, match="consumer 9 is unknown"):
        pair.client.send(ev.Flow(9, 10))
    assert pair.client.state is ConnectionState.ERROR


def test_a_flow_before_the_subscribe_succeeded_is_a_local_protocol_error(pair):
    rid = pair.client.next_request_id()
    pair.send(pair.client, sub_request(rid, 3))
    with pytest.raises(LocalProtocolError, match="consumer 3 is subscribing"):
        pair.client.send(ev.Flow(3, 10))


# -- permits and acknowledgements (moved from test_native_driver_parts.py) ---------------------
def msg_id(entry: int) -> pb.MessageIdData:
    return pb.MessageIdData(ledgerId=1, entryId=entry)


def sent_commands(conn: Connection) -> list[pb.BaseCommand]:
    decoder = FrameDecoder()
    decoder.receive_data(conn.data_to_send())
    return [frame.command for frame in decoder.frames()]


def test_permits_are_given_back_at_half_the_queue(pair):
    subscribe(pair, 5, permits=10)
    for entry in range(4):
        pair.client.acknowledge_consumed(5, 1, msg_id(entry))
    assert sent_commands(pair.client) == []
    pair.client.acknowledge_consumed(5, 1, msg_id(4))
    (flow,) = sent_commands(pair.client)
    assert (flow.flow.consumer_id, flow.flow.messagePermits) == (5, 5)
    pair.client.acknowledge_consumed(5, 6, msg_id(5))  # a batch: 6 messages
    (flow,) = sent_commands(pair.client)
    assert flow.flow.messagePermits == 6


def test_the_server_receives_the_permits_as_flow_events(pair):
    subscribe(pair, 5, permits=4)
    pair.client.acknowledge_consumed(5, 2)
    assert pair.answer(pair.client) == [ev.Flow(5, 2)]


def test_cumulative_acks_carry_the_latest_id_only(pair):
    subscribe(pair, 5, permits=100)
    for entry in range(3):
        pair.client.acknowledge_consumed(5, 1, msg_id(entry))
    assert pair.client.acks_due
    assert pair.client.flush_acks() == 1
    (ack,) = sent_commands(pair.client)
    assert ack.ack.ack_type == pb.CommandAck.Cumulative
    assert [(m.ledgerId, m.entryId) for m in ack.ack.message_id] == [(1, 2)]
    assert not pair.client.acks_due
    assert pair.client.flush_acks() == 0


def test_individual_acks_carry_every_id_in_one_command():
    p = ConnectionPair(individual_acks=True)
    p.handshake()
    subscribe(p, 5, permits=100)
    subscribe(p, 6, permits=100)
    for entry in range(3):
        p.client.acknowledge_consumed(5, 1, msg_id(entry))
    p.client.acknowledge_consumed(6, 1, msg_id(0))
    assert p.client.flush_acks() == 2
    acks = {e.consumer_id: e for e in as_acks(p.answer(p.client))}
    assert not acks[5].cumulative
    assert acks[5].message_ids == ((1, 0), (1, 1), (1, 2))
    assert acks[6].message_ids == ((1, 0),)
    assert p.client.flush_acks() == 0


def as_acks(events) -> list[ev.Ack]:
    """Ack events, with each of an AckRun spelled as the Ack protobuf's path would give."""
    out = []
    for e in events:
        if isinstance(e, ev.AckRun):
            out += [
                ev.Ack(cid, e.cumulative, ((e.ledger_id, e.entry_id),)) for cid in e.consumer_ids
            ]
        elif isinstance(e, ev.Ack):
            out.append(e)
    return out


def test_the_server_reads_every_ack_shape_as_protobuf_does(pair):
    """The common shape is read by hand (FrameDecoder.next_ack_run, a run at a time); others go
    through protobuf. Both say the same, and an ACK with a request id is still tracked for
    its ACK_RESPONSE."""
    shapes = [
        dict(
            consumer_id=7,
            ack_type=pb.CommandAck.Cumulative,
            message_id=[pb.MessageIdData(ledgerId=3, entryId=9)],
        ),
        dict(
            consumer_id=2**40,
            ack_type=pb.CommandAck.Individual,
            message_id=[pb.MessageIdData(ledgerId=2**33, entryId=300_000)],
        ),
        dict(
            consumer_id=1,
            ack_type=pb.CommandAck.Individual,
            message_id=[pb.MessageIdData(ledgerId=1, entryId=1, batch_index=2)],
        ),
        dict(
            consumer_id=1,
            ack_type=pb.CommandAck.Individual,
            message_id=[pb.MessageIdData(ledgerId=1, entryId=e) for e in range(3)],
        ),
        dict(
            consumer_id=5,
            ack_type=pb.CommandAck.Cumulative,
            request_id=77,
            message_id=[pb.MessageIdData(ledgerId=4, entryId=4)],
        ),
    ]
    expected = []
    for fields in shapes:
        cmd = command(T.ACK, **fields)
        expected.append(
            ev.Ack(
                cmd.ack.consumer_id,
                cmd.ack.ack_type == pb.CommandAck.Cumulative,
                tuple((m.ledgerId, m.entryId) for m in cmd.ack.message_id),
                cmd.ack.request_id if cmd.ack.HasField("request_id") else None,
            )
        )
        pair.server.receive_data(encode_frame(cmd))
        assert as_acks([pair.server.next_event()]) == expected[-1:]
    # All in one read, the common ones twice over: runs and single ACKs in their order.
    pair.server.receive_data(
        b"".join(encode_frame(command(T.ACK, **f)) for f in shapes[:2] + shapes + shapes[:1])
    )
    events = []
    while (event := pair.server.next_event()) is not ev.NEED_DATA:
        events.append(event)
    assert [type(e) for e in events] == [ev.AckRun] * 4 + [ev.Ack] * 3 + [ev.AckRun]
    assert as_acks(events) == expected[:2] + expected + expected[:1]
    for _ in range(2):  # two ACKs asked for an answer
        pair.server.send(ev.Response(command(T.ACK_RESPONSE, consumer_id=5, request_id=77)))
    with pytest.raises(LocalProtocolError):  # answered twice: a third answer is refused
        pair.server.send(ev.Response(command(T.ACK_RESPONSE, consumer_id=5, request_id=77)))


def _random_id(rng: random.Random) -> pb.MessageIdData:
    msg_id = pb.MessageIdData(
        ledgerId=rng.choice([0, 5, 2**20, 2**62]), entryId=rng.choice([0, 99, 70_000, 2**40])
    )
    if rng.random() < 0.2:
        msg_id.partition = rng.randrange(4)
    return msg_id


def test_ack_fast_path_agrees_with_protobuf_or_declines():
    """The ACK frame reader on many encodings: protobuf's values, or it declines and consumes
    nothing; never a wrong read."""
    rng = random.Random(11)
    accepted = 0
    for _ in range(3000):
        fields = dict(
            consumer_id=rng.choice([0, 1, 127, 128, 16383, 16384, 2**35, 2**63]),
            ack_type=rng.choice([pb.CommandAck.Individual, pb.CommandAck.Cumulative]),
            message_id=[_random_id(rng) for _ in range(rng.choice([1, 1, 1, 2]))],
        )
        if rng.random() < 0.2:
            fields["request_id"] = rng.randrange(1000)
        raw = command(T.ACK, **fields).SerializeToString()
        decoder = FrameDecoder()
        decoder.receive_data(frame_head(raw, None, 0))
        run = decoder.next_ack_run()
        if run is None:
            assert decoder.next_parts() is not None  # declined: nothing was consumed
            continue
        accepted += 1
        ack = pb.BaseCommand.FromString(raw).ack
        (msg,) = ack.message_id
        cumulative = ack.ack_type == pb.CommandAck.Cumulative
        assert run == ([ack.consumer_id], cumulative, msg.ledgerId, msg.entryId)
    assert accepted > 1000
    flow = FrameDecoder()
    flow.receive_data(
        frame_head(command(T.FLOW, consumer_id=1, messagePermits=1).SerializeToString(), None, 0)
    )
    assert flow.next_ack_run() is None


def test_acks_of_one_message_come_as_one_run_in_order_across_id_lengths():
    """A broadcast client's flush: the same ACK for consumers whose ids take one to five
    bytes. One run, ids in frame order; a different entry, type or command ends it."""
    ids = [1, 127, 128, 5, 16383, 16384, 2**35, 0, 300]

    def ack(cid: int, entry: int = 4, kind: int = pb.CommandAck.Cumulative) -> bytes:
        cmd = command(T.ACK, consumer_id=cid, ack_type=kind, message_id=[msg_id(entry)])
        return encode_frame(cmd)

    decoder = FrameDecoder()
    decoder.receive_data(b"".join(ack(cid) for cid in ids))
    assert decoder.next_ack_run() == (ids, True, 1, 4)
    assert decoder.next_ack_run() is None and decoder.buffered == 0

    flow = encode_frame(command(T.FLOW, consumer_id=9, messagePermits=5))
    decoder.receive_data(
        ack(1)
        + ack(2)
        + ack(3, entry=5)
        + ack(4, entry=5, kind=pb.CommandAck.Individual)
        + ack(5, entry=5, kind=pb.CommandAck.Individual)
        + flow
        + ack(6, entry=5, kind=pb.CommandAck.Individual)
    )
    assert decoder.next_ack_run() == ([1, 2], True, 1, 4)
    assert decoder.next_ack_run() == ([3], True, 1, 5)
    assert decoder.next_ack_run() == ([4, 5], False, 1, 5)
    assert decoder.next_ack_run() is None
    parts = decoder.next_parts()
    assert parts is not None and parts[0].type == T.FLOW
    assert decoder.next_ack_run() == ([6], False, 1, 5)


def test_ack_runs_read_as_protobuf_reads_each_frame():
    """Random sequences of ACK frames, common and not, many sharing a message: the runs and
    single ACKs say exactly what protobuf says of each frame, in order."""
    rng = random.Random(5)
    for _ in range(200):
        frames, expected = [], []
        message = _random_id(rng)
        for _ in range(rng.randrange(1, 40)):
            if rng.random() < 0.1:
                message = _random_id(rng)
            fields = dict(
                consumer_id=rng.choice([0, 1, 127, 128, 16384, 2**35, rng.randrange(2**20)]),
                ack_type=rng.choice([pb.CommandAck.Cumulative] * 5 + [pb.CommandAck.Individual]),
                message_id=[message],
            )
            if rng.random() < 0.05:
                fields["message_id"] = [message, _random_id(rng)]
            cmd = command(T.ACK, **fields)
            frames.append(encode_frame(cmd))
            expected.append(
                ev.Ack(
                    cmd.ack.consumer_id,
                    cmd.ack.ack_type == pb.CommandAck.Cumulative,
                    tuple((m.ledgerId, m.entryId) for m in cmd.ack.message_id),
                )
            )
        p = ConnectionPair()
        p.handshake()
        data = b"".join(frames)
        cut = rng.randrange(1, len(data))  # two reads, split anywhere (b"" would be the end)
        events = feed(p.server, data[:cut]) + feed(p.server, data[cut:])
        assert as_acks(events) == expected


def test_an_ack_frame_with_sizes_that_do_not_add_up_is_left_to_protobuf():
    raw = command(
        T.ACK, consumer_id=3, ack_type=pb.CommandAck.Cumulative, message_id=[msg_id(4)]
    ).SerializeToString()
    good = frame_head(raw, None, 0)
    for position, delta in ((3, 1), (7, -1), (11, 1), (17, -1)):  # total, command, body, id
        bad = bytearray(good)
        bad[position] += delta
        decoder = FrameDecoder()
        decoder.receive_data(bytes(bad) + good)
        assert decoder.next_ack_run() is None
    decoder = FrameDecoder()
    decoder.receive_data(good + good[:-1])  # the second is not whole yet
    assert decoder.next_ack_run() == ([3], True, 1, 4)
    decoder.receive_data(good[-1:])
    assert decoder.next_ack_run() == ([3], True, 1, 4)


def test_a_consumer_no_longer_active_gets_no_flow_and_no_ack(pair):
    subscribe(pair, 5, permits=2)
    close_rid = pair.client.next_request_id()
    pair.send(pair.client, rq.CloseConsumer(close_rid, 5))
    pair.client.acknowledge_consumed(5, 5, msg_id(0))
    assert not pair.client.acks_due
    assert pair.client.data_to_send() == b""


# -- producers ------------------------------------------------------------------------------------
def register(p: ConnectionPair, producer_id: int = 1) -> None:
    rid = p.client.next_request_id()
    p.send(p.client, rq.Producer(rid, "t", producer_id))
    assert p.client.producer_state(producer_id) is ProducerState.REGISTERING
    p.send(p.server, ev.Response(command(T.PRODUCER_SUCCESS, request_id=rid, producer_name="n")))
    assert p.client.producer_state(producer_id) is ProducerState.READY


def test_sends_and_receipts_travel_as_the_same_events(pair):
    register(pair)
    send = ev.Send(1, 0, section(b"hello"))
    (got,) = pair.send(pair.client, send)
    assert got.metadata is not None and got.metadata.producer_name == "p"
    batch = ev.Send(1, 1, section(b"b"), num_messages=3, highest_sequence_id=3)
    pair.send(pair.client, batch)
    pair.send(pair.server, ev.SendReceipt(1, 0, 7, 0))
    pair.send(pair.server, ev.SendReceipt(1, 1, 7, 1, highest_sequence_id=3))
    pair.send(pair.server, ev.SendError(1, 4, pb.PersistenceError, "disk full"))


def test_a_producer_sends_only_once_ready(pair):
    rid = pair.client.next_request_id()
    pair.send(pair.client, rq.Producer(rid, "t", 1))
    with pytest.raises(LocalProtocolError, match="producer 1 is registering"):
        pair.client.send(ev.Send(1, 0, section()))


def test_a_producer_queued_for_exclusive_access_waits_for_the_ready_answer(pair):
    rid = pair.client.next_request_id()
    pair.send(pair.client, rq.Producer(rid, "t", 1))
    waiting = command(T.PRODUCER_SUCCESS, request_id=rid, producer_name="n", producer_ready=False)
    pair.send(pair.server, ev.Response(waiting), expect=[])
    assert pair.client.producer_state(1) is ProducerState.REGISTERING


def test_a_bad_send_is_answered_by_the_servers_codec_and_the_connection_stays(pair):
    register(pair)
    corrupt = bytearray(section(b"payload"))
    corrupt[-1] ^= 0xFF
    pair.send(pair.client, ev.Send(1, 0, bytes(corrupt)), expect=[])
    (error,) = pair.answer(pair.server)
    assert isinstance(error, ev.SendError)
    assert (error.sequence_id, error.error) == (0, pb.ChecksumError)
    pair.send(pair.client, ev.Send(1, 1, section(b"fine")))


# -- deliveries -----------------------------------------------------------------------------------
def test_a_message_event_carries_the_raw_payload_and_entry_metadata(pair):
    stamps = encode_stamps(3, EntryStamps(1, 2, 3, 4, 5))
    msg = pb.CommandMessage(consumer_id=1, message_id=msg_id(3))
    (got,) = pair.send(pair.server, ev.Message(msg, section(b"body"), stamps))
    assert (got.consumer_id, got.message_id.entryId) == (1, 3)
    assert decode_stamps(got.broker_entry_metadata) == EntryStamps(1, 2, 3, 4, 5, 0)


def test_dispatch_frames_built_by_hand_arrive_as_message_events(pair):
    payload = section(b"fan-out")
    cmd = message_command_bytes(9, 1, 2)
    pair.server.send_frames([frame_head(cmd, None, len(payload)), payload])
    (got,) = pair.answer(pair.server)
    assert got == ev.Message(pb.CommandMessage(consumer_id=9, message_id=msg_id(2)), payload)


def test_entry_metadata_goes_only_to_a_client_that_asked():
    p = ConnectionPair()
    p.handshake(bem=False)
    msg = pb.CommandMessage(consumer_id=1, message_id=msg_id(0))
    with pytest.raises(LocalProtocolError, match="did not ask"):
        p.server.send(ev.Message(msg, section(), b"\x08\x01"))


def test_a_message_without_payload_is_a_remote_protocol_error(pair):
    pair.client.receive_data(encode_frame(command(T.MESSAGE, consumer_id=1, message_id=msg_id(0))))
    with pytest.raises(RemoteProtocolError, match="without a payload"):
        pair.client.next_event()


def test_stamps_of_a_real_pulsar_carry_only_the_broker_timestamp():
    bem = pb.BrokerEntryMetadata(broker_timestamp=7, index=3).SerializeToString()
    assert decode_stamps(bem) == EntryStamps(broker_ms=7)
    with pytest.raises(RemoteProtocolError):
        decode_stamps(b"\xff\xff")


# -- framing errors and the end -----------------------------------------------------------------
def test_an_oversized_frame_is_refused_from_its_prefix_alone():
    server = Connection(SERVER, server_version="b", max_frame_size=1024)
    server.receive_data(struct.pack(">I", 1 << 30))
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        server.next_event()
    assert server.state is ConnectionState.ERROR
    assert server.data_to_send()  # the ERROR reply, before the shell closes


def test_local_errors_found_while_reading_are_re_raised_as_remote_with_their_hint(pair):
    pair.client.receive_data(encode_frame(command(T.MESSAGE, consumer_id=1, message_id=msg_id(0))))
    with pytest.raises(RemoteProtocolError) as info:
        pair.client.next_event()
    assert isinstance(info.value.__cause__, LocalProtocolError)
    assert info.value.server_error == info.value.__cause__.server_error


@pytest.mark.parametrize("how", FEEDS)
def test_eof_ends_in_connection_closed(how):
    p = ConnectionPair(how)
    p.handshake()
    p.server.send(ev.Ping())
    data = p.server.data_to_send()
    assert feed(p.client, data) == []
    p.client.receive_data(b"")
    assert p.client.next_event() == ev.ConnectionClosed()
    assert p.client.state is ConnectionState.CLOSED
    assert p.client.next_event() == ev.ConnectionClosed()
    with pytest.raises(LocalProtocolError):
        p.client.receive_data(b"more")


def test_mangled_streams_raise_nothing_but_remote_protocol_errors():
    """The fuzz harness's rule (h11's fuzz/afl-server.py), with a seeded generator in place
    of Hypothesis: any bytes a peer sends end in events or a RemoteProtocolError."""
    import random

    rng = random.Random(1234)
    valid_from_client = b"".join(
        [
            encode_frame(command(T.CONNECT, client_version="c", protocol_version=20)),
            encode_frame(rq.encode(lookup(1))),
            encode_frame(command(T.SEND, producer_id=1, sequence_id=0), section(b"x" * 20)),
            encode_frame(command(T.FLOW, consumer_id=1, messagePermits=5)),
            encode_frame(command(T.PING)),
        ]
    )
    bem = encode_stamps(0, EntryStamps(1, 2, 3, 4, 5))
    valid_from_server = b"".join(
        [
            encode_frame(command(T.CONNECTED, server_version="s", protocol_version=20)),
            encode_raw_frame(message_command_bytes(1, 1, 0), section(b"y"), bem),
            encode_frame(
                command(T.SEND_RECEIPT, producer_id=1, sequence_id=0, message_id=msg_id(0))
            ),
            encode_frame(command(T.PING)),
        ]
    )
    for _ in range(400):
        for role, valid in ((SERVER, valid_from_client), (CLIENT, valid_from_server)):
            data = bytearray(valid)
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            conn = Connection(role, server_version="s") if role is SERVER else Connection(role)
            if role is CLIENT:
                conn.send(ev.Connect("c", 20))
            try:
                feed(conn, bytes(data), rng.choice(FEEDS))
            except RemoteProtocolError:
                assert conn.state is ConnectionState.ERROR


@pytest.mark.parametrize("individual", [False, True])
def test_one_flush_writes_the_acks_protobuf_would_have_written(individual):
    """Many consumers acknowledging the same entry (a broadcast), and one with several ids:
    the flushed bytes are protobuf's encoding of one ACK per consumer, in order."""
    p = ConnectionPair(individual_acks=individual)
    p.handshake()
    consumers = [5, 6, 200, 7]
    for consumer_id in consumers:
        subscribe(p, consumer_id, permits=1000)
    p.client.data_to_send()
    due: dict[int, list[pb.MessageIdData]] = {}
    for consumer_id in consumers:
        entries = [0, 1, 2] if consumer_id == 7 else [4]
        for entry in entries:
            p.client.acknowledge_consumed(consumer_id, 1, msg_id(entry))
            due.setdefault(consumer_id, []).append(msg_id(entry))
    assert p.client.flush_acks() == len(consumers)
    ack_type = pb.CommandAck.Individual if individual else pb.CommandAck.Cumulative
    expected = b"".join(
        encode_frame(
            command(
                T.ACK,
                consumer_id=consumer_id,
                ack_type=ack_type,
                message_id=ids if individual else ids[-1:],
            )
        )
        for consumer_id, ids in due.items()
    )
    assert p.client.data_to_send() == expected


def test_successive_flushes_write_protobufs_acks_as_the_message_id_changes_length():
    """A consumer's ACK head is kept between flushes while the tail's length holds: entries
    whose ids take one, two and three varint bytes, and back, each flush protobuf's bytes."""
    p = ConnectionPair()
    p.handshake()
    consumers = [5, 300]
    for consumer_id in consumers:
        subscribe(p, consumer_id, permits=100_000)
    p.client.data_to_send()
    for entry in (4, 127, 128, 2**14, 9, 10):
        for consumer_id in consumers:
            p.client.acknowledge_run([consumer_id], 1, msg_id(entry).SerializeToString())
        p.client.data_to_send()  # FLOWs
        assert p.client.flush_acks() == 2
        assert p.client.data_to_send() == b"".join(
            encode_frame(
                command(
                    T.ACK,
                    consumer_id=consumer_id,
                    ack_type=pb.CommandAck.Cumulative,
                    message_id=[msg_id(entry)],
                )
            )
            for consumer_id in consumers
        )
