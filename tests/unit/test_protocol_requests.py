"""pulsar_protocol.requests: each client request decoded once, from protobuf, into its typed
event; optional fields absent as None; a value the protocol does not allow refused by the
codec itself with the codec's own ProtocolError, and the connection kept."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol import requests as rq
from pulsar_protocol.commands import T, command
from pulsar_protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from pulsar_protocol.frames import encode_raw_frame
from pulsar_protocol.state import ConnectionState
from tests.unit.test_protocol_connection import FEEDS, ConnectionPair, feed

SCHEMA = rq.Schema("user", 4, b'{"type":"record"}', (("k", "v"),))

CASES: list[ev.Event] = [
    rq.Lookup(1, "persistent://public/default/t", authoritative=True, advertised_listener_name="l"),
    rq.Lookup(2, "t"),
    rq.PartitionedMetadata(3, "t", metadata_auto_creation_enabled=False),
    rq.Producer(
        4,
        "t",
        producer_id=9,
        producer_name="p",
        schema=SCHEMA,
        access_mode=rq.ProducerAccessMode.WAIT_FOR_EXCLUSIVE,
        epoch=2,
        topic_epoch=5,
        metadata=(("a", "b"),),
        encrypted=True,
        user_provided_producer_name=False,
    ),
    rq.Producer(5, "t", 10),
    rq.Subscribe(
        6,
        "t",
        "s",
        rq.SubType.KEY_SHARED,
        consumer_id=11,
        consumer_name="c",
        priority_level=3,
        durable=False,
        start_message_id=rq.MessageId(-1, -1),
        metadata=(("subscriptionMode", "broadcast"),),
        read_compacted=True,
        schema=SCHEMA,
        initial_position=rq.InitialPosition.EARLIEST,
        key_shared=rq.KeySharedMeta(rq.KeySharedMode.STICKY, ((0, 99), (200, 300)), True),
        subscription_properties=(("x", "y"),),
        consumer_epoch=4,
    ),
    rq.Subscribe(7, "t", "s", rq.SubType.SHARED, 12),
    rq.Unsubscribe(8, 11, force=True),
    rq.GetLastMessageId(9, 11),
    rq.Seek(10, 11, message_id=rq.MessageId(3, 4, partition=1, batch_index=2)),
    rq.Seek(11, 11, publish_time_ms=1_700_000_000_000),
    rq.GetSchema(12, "t", schema_version=b"\x00" * 8),
    rq.GetSchema(13, "t"),
    rq.GetTopicsOfNamespace(14, "public/default", rq.TopicDomain.ALL, "t.*", "abc"),
    rq.GetTopicsOfNamespace(15, "public/default"),
    rq.RedeliverUnacknowledged(11, (rq.MessageId(1, 2), rq.MessageId(1, 3)), consumer_epoch=4),
    rq.RedeliverUnacknowledged(11),
]


@pytest.mark.parametrize("event", CASES, ids=lambda e: type(e).__name__)
def test_decoding_what_was_encoded_gives_the_event_back(event: ev.Event) -> None:
    assert rq.decode(rq.encode(event)) == event


@pytest.mark.parametrize("how", FEEDS)
def test_what_a_client_sends_is_what_the_server_receives(how: str) -> None:
    p = ConnectionPair(how)
    p.handshake()
    for event in CASES:
        p.send(p.client, event)


def test_close_requests_travel_typed_and_settle_the_clients_state() -> None:
    p = ConnectionPair()
    p.handshake()
    p.send(p.client, rq.Subscribe(1, "t", "s", rq.SubType.SHARED, 1))
    p.send(p.server, ev.Response(command(T.SUCCESS, request_id=1)))
    p.send(p.client, rq.CloseConsumer(2, 1))
    p.send(p.client, rq.Producer(3, "t", 2))
    p.send(p.server, ev.Response(command(T.PRODUCER_SUCCESS, request_id=3, producer_name="n")))
    p.send(p.client, rq.CloseProducer(4, 2))
    p.send(p.server, ev.Response(command(T.SUCCESS, request_id=2)))
    p.send(p.server, ev.Response(command(T.SUCCESS, request_id=4)))
    assert p.client.consumer_state(1) is None and p.client.producer_state(2) is None


def test_a_request_sent_as_its_command_arrives_typed() -> None:
    """The native driver sends `Request(command)`; the broker still reads a typed event."""
    p = ConnectionPair()
    p.handshake()
    cmd = command(T.LOOKUP, topic="t", request_id=1, authoritative=True)
    p.send(p.client, ev.Request(cmd), expect=[rq.Lookup(1, "t", authoritative=True)])
    cmd = command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES, consumer_id=3)
    p.send(p.client, ev.Notice(cmd), expect=[rq.RedeliverUnacknowledged(3)])


def test_absent_optional_fields_are_none_and_defaults_are_pulsars() -> None:
    producer = rq.decode(command(T.PRODUCER, topic="t", producer_id=1, request_id=2))
    assert producer == rq.Producer(2, "t", 1)
    assert producer.producer_name is None and producer.schema is None
    assert producer.topic_epoch is None
    assert producer.access_mode is rq.ProducerAccessMode.SHARED
    subscribe = rq.decode(
        command(T.SUBSCRIBE, topic="t", subscription="s", subType=2, consumer_id=1, request_id=3)
    )
    assert isinstance(subscribe, rq.Subscribe)
    assert subscribe.sub_type is rq.SubType.FAILOVER
    assert subscribe.consumer_name is None and subscribe.start_message_id is None
    assert subscribe.key_shared is None and subscribe.schema is None
    assert subscribe.consumer_epoch is None
    assert subscribe.durable and subscribe.initial_position is rq.InitialPosition.LATEST
    schema = rq.decode(command(T.GET_SCHEMA, topic="t", request_id=4))
    assert schema == rq.GetSchema(4, "t", None)
    # An empty version is a version given, not an absent one.
    given = rq.decode(command(T.GET_SCHEMA, topic="t", request_id=4, schema_version=b""))
    assert given == rq.GetSchema(4, "t", b"")
    listing = rq.decode(command(T.GET_TOPICS_OF_NAMESPACE, namespace="a/b", request_id=5))
    assert listing == rq.GetTopicsOfNamespace(5, "a/b", rq.TopicDomain.PERSISTENT, None, None)


def test_message_ids_come_as_pulsar_means_them() -> None:
    """Ledger and entry are int64 on uint64 fields: earliest (-1, -1) travels as 2**64 - 1."""
    earliest = pb.MessageIdData(ledgerId=2**64 - 1, entryId=2**64 - 1)
    seek = rq.decode(command(T.SEEK, consumer_id=1, request_id=2, message_id=earliest))
    assert seek == rq.Seek(2, 1, message_id=rq.MessageId(-1, -1))
    assert rq.MessageId(-1, -1).to_pb() == earliest  # and back, defaults left out
    latest = pb.MessageIdData(ledgerId=2**63 - 1, entryId=2**63 - 1)
    assert rq.MessageId.of(latest) == rq.MessageId(2**63 - 1, 2**63 - 1)


def test_a_seek_with_both_takes_the_id_as_pulsar_does() -> None:
    both = command(
        T.SEEK,
        consumer_id=1,
        request_id=2,
        message_id=pb.MessageIdData(ledgerId=1, entryId=2),
        message_publish_time=5,
    )
    assert rq.decode(both) == rq.Seek(2, 1, message_id=rq.MessageId(1, 2))


BAD_UTF8 = b"\xff\xfe\xfd\xfc"
PLACEHOLDER = "zzzz"


def _with_bad_utf8(cmd: pb.BaseCommand) -> bytes:
    """`cmd` serialized with PLACEHOLDER's bytes (same length) made invalid UTF-8."""
    raw = cmd.SerializeToString()
    assert raw.count(PLACEHOLDER.encode()) == 1
    return raw.replace(PLACEHOLDER.encode(), BAD_UTF8)


BAD: list[tuple[str, pb.BaseCommand | bytes, int]] = [
    (
        "unknown access mode",
        command(T.PRODUCER, topic="t", producer_id=1, request_id=1, producer_access_mode=7),
        pb.NotAllowedError,
    ),
    ("seek to nothing", command(T.SEEK, consumer_id=1, request_id=1), pb.MetadataError),
    (
        "topic not UTF-8",
        _with_bad_utf8(command(T.LOOKUP, topic=PLACEHOLDER, request_id=1)),
        pb.InvalidTopicName,
    ),
    (
        "subscription not UTF-8",
        _with_bad_utf8(
            command(
                T.SUBSCRIBE,
                topic="t",
                subscription=PLACEHOLDER,
                subType=1,
                consumer_id=1,
                request_id=1,
            )
        ),
        pb.NotAllowedError,
    ),
    (
        "schema name not UTF-8",
        _with_bad_utf8(
            command(
                T.PRODUCER,
                topic="t",
                producer_id=1,
                request_id=1,
                schema=pb.Schema(name=PLACEHOLDER, type=1, schema_data=b""),
            )
        ),
        pb.NotAllowedError,
    ),
    (
        "property not UTF-8",
        _with_bad_utf8(
            command(
                T.SUBSCRIBE,
                topic="t",
                subscription="s",
                subType=1,
                consumer_id=1,
                request_id=1,
                metadata=[pb.KeyValue(key="k", value=PLACEHOLDER)],
            )
        ),
        pb.NotAllowedError,
    ),
]


def _parsed(raw: pb.BaseCommand | bytes) -> pb.BaseCommand:
    return raw if isinstance(raw, pb.BaseCommand) else pb.BaseCommand.FromString(raw)


@pytest.mark.parametrize(("raw", "server_error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_value_raises_the_codecs_own_error(raw, server_error) -> None:
    with pytest.raises(ProtocolError) as raised:
        rq.decode(_parsed(raw))
    assert isinstance(raised.value, LocalProtocolError)
    assert raised.value.server_error == server_error


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize(("raw", "server_error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_request_is_refused_by_the_codec_and_the_connection_stays(
    raw, server_error, how
) -> None:
    p = ConnectionPair(how)
    p.handshake()
    cmd = _parsed(raw)
    frame = encode_raw_frame(raw if isinstance(raw, bytes) else raw.SerializeToString())
    assert feed(p.server, frame, how) == []  # nothing reaches the broker
    assert p.server.state is ConnectionState.CONNECTED
    out = p.server.data_to_send()
    (size,) = struct.unpack(">I", out[4:8])
    answer = pb.BaseCommand.FromString(out[8 : 8 + size])
    assert len(out) == 8 + size  # one frame: the refusal, in the shape the client waits for
    if cmd.type == T.LOOKUP:
        assert answer.type == T.LOOKUP_RESPONSE
        assert answer.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
        assert (answer.lookupTopicResponse.request_id, answer.lookupTopicResponse.error) == (
            1,
            server_error,
        )
    else:
        assert answer.type == T.ERROR
        assert (answer.error.request_id, answer.error.error) == (1, server_error)
    # The connection goes on: the next request is read.
    next_one = encode_raw_frame(rq.encode(rq.Lookup(2, "t")).SerializeToString())
    assert feed(p.server, next_one, how) == [rq.Lookup(2, "t")]
    # The refusal answered request 1: the server owes it nothing more.
    with pytest.raises(LocalProtocolError, match="no request 1"):
        p.server.send_success(1)


def test_a_lookup_is_refused_in_its_own_shape() -> None:
    """commands.refusal through `Connection.refuse`: a LOOKUP's client waits for a
    LOOKUP_RESPONSE (marked Failed), a GET_SCHEMA's for its error_code, others for ERROR."""
    p = ConnectionPair()
    p.handshake()
    for request in (rq.Lookup(1, "t"), rq.GetSchema(2, "t"), rq.Unsubscribe(3, 1)):
        p.send(p.client, request)
        p.server.refuse(request, pb.TopicNotFound, "no")
        (answer,) = p.answer(p.server)
        assert isinstance(answer, ev.Response)
        body = answer.body
        if isinstance(request, rq.Lookup):
            assert answer.type == T.LOOKUP_RESPONSE
            assert body.response == pb.CommandLookupTopicResponse.Failed
            assert body.error == pb.TopicNotFound
        elif isinstance(request, rq.GetSchema):
            assert answer.type == T.GET_SCHEMA_RESPONSE and body.error_code == pb.TopicNotFound
        else:
            assert answer.error == pb.TopicNotFound
    with pytest.raises(LocalProtocolError, match="no request 1"):
        p.server.refuse(rq.Lookup(1, "t"), pb.TopicNotFound, "twice")


# -- properties (Hypothesis) ----------------------------------------------------------------------
_uint64 = st.integers(0, 2**64 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_text_st = st.text(max_size=8)
_props = st.lists(st.tuples(_text_st, _text_st), max_size=3).map(tuple)
_message_ids = st.builds(
    rq.MessageId, _int64, _int64, st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1)
)
_schemas = st.builds(rq.Schema, _text_st, st.integers(-(2**31), 2**31 - 1), st.binary(), _props)
_key_shared = st.builds(
    rq.KeySharedMeta,
    st.sampled_from(rq.KeySharedMode),
    st.lists(st.tuples(st.integers(0, 65535), st.integers(0, 65535)), max_size=3).map(tuple),
    st.booleans(),
)
_REQUESTS = st.one_of(
    st.builds(
        rq.Subscribe,
        _uint64,
        _text_st,
        _text_st,
        st.sampled_from(rq.SubType),
        _uint64,
        st.none() | _text_st,
        st.integers(-(2**31), 2**31 - 1),
        st.booleans(),
        st.none() | _message_ids,
        _props,
        st.booleans(),
        st.none() | _schemas,
        st.sampled_from(rq.InitialPosition),
        st.none() | _key_shared,
        _props,
        st.none() | _uint64,
    ),
    st.builds(
        rq.Producer,
        _uint64,
        _text_st,
        _uint64,
        st.none() | _text_st,
        st.none() | _schemas,
        st.sampled_from(rq.ProducerAccessMode),
        _uint64,
        st.none() | _uint64,
        _props,
        st.booleans(),
        st.booleans(),
    ),
    st.builds(rq.Seek, _uint64, _uint64, message_id=_message_ids),
    st.builds(rq.Seek, _uint64, _uint64, publish_time_ms=_uint64),
    st.builds(rq.GetSchema, _uint64, _text_st, st.none() | st.binary(max_size=8)),
    st.builds(
        rq.GetTopicsOfNamespace,
        _uint64,
        _text_st,
        st.sampled_from(rq.TopicDomain),
        st.none() | _text_st,
        st.none() | _text_st,
    ),
    st.builds(rq.RedeliverUnacknowledged, _uint64, st.lists(_message_ids, max_size=3).map(tuple)),
)


@settings(max_examples=300, deadline=None)
@given(_REQUESTS)
def test_any_request_decodes_to_what_was_encoded(event: ev.Event) -> None:
    assert rq.decode(rq.encode(event)) == event


@settings(max_examples=200, deadline=None)
@given(_REQUESTS, st.lists(st.tuples(st.integers(0), st.integers(0, 255)), min_size=1, max_size=6))
def test_a_mangled_request_ends_in_an_event_a_refusal_or_a_remote_protocol_error(
    event: ev.Event, changes: list[tuple[int, int]]
) -> None:
    """h11's fuzz rule for the request decoders: whatever bytes arrive, the server's codec
    hands out typed events (never a protobuf `Request`) or raises RemoteProtocolError."""
    p = ConnectionPair()
    p.handshake()
    data = bytearray(encode_raw_frame(rq.encode(event).SerializeToString()))
    for where, value in changes:
        data[where % len(data)] = value
    try:
        got = feed(p.server, bytes(data))
    except RemoteProtocolError:
        assert p.server.state is ConnectionState.ERROR
        return
    assert not any(isinstance(e, ev.Request | ev.Notice) for e in got)
