"""The RabbitMQ driver's AMQP codec without sockets: the delivery fast path and the ack it
builds checked against pamqp on the same bytes, fed whole, byte by byte and split; frames
refused early; the publish frames as pamqp reads them."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from pamqp import commands, frame, header
from pamqp.body import ContentBody

from drivers.rabbitmq import protocol
from drivers.rabbitmq.protocol import (
    NEED_DATA,
    ClientParser,
    ConnectionClosed,
    Delivery,
    Heartbeat,
    Method,
    Payloads,
    ProtocolError,
)


def deliver(channel: int, tag: int, body: bytes, frame_max: int = 131072) -> bytes:
    """A basic.deliver as RabbitMQ sends a stream's (x-stream-offset header), by pamqp."""
    properties = commands.Basic.Properties(delivery_mode=2, headers={"x-stream-offset": tag})
    out = [
        frame.marshal(
            commands.Basic.Deliver(
                consumer_tag=f"c{channel}",
                delivery_tag=tag,
                redelivered=False,
                exchange="",
                routing_key="topic.sub",
            ),
            channel,
        ),
        frame.marshal(header.ContentHeader(0, len(body), properties), channel),
    ]
    step = frame_max - 8
    out += [
        frame.marshal(ContentBody(body[at : at + step]), channel)
        for at in range(0, len(body), step)
    ]
    return b"".join(out)


def events(parser: ClientParser, data: bytes, step: int | None = None) -> list[Any]:
    """Every event of `data`, fed whole (step None) or `step` bytes at a time."""
    found: list[Any] = []
    chunks = [data] if step is None else [data[at : at + step] for at in range(0, len(data), step)]
    for chunk in chunks:
        parser.receive_data(chunk)
        while (event := parser.next_event()) is not NEED_DATA:
            found.append(event)
    return found


def pamqp_frames(data: bytes) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    at = 0
    while at < len(data):
        used, channel, value = frame.unmarshal(data[at:])
        out.append((channel, value))
        at += used
    return out


@pytest.mark.parametrize("step", [None, 1, 7, 1000])
def test_deliveries_match_pamqp_whole_byte_by_byte_and_split(step) -> None:
    bodies = [b"x" * 10240, b"", b"y" * 300_000]  # one body frame, none, several
    data = b"".join(deliver(3 + k, 10 + k, body) for k, body in enumerate(bodies))
    got = events(ClientParser(), data, step)
    assert all(type(e) is Delivery for e in got)
    assert [(e.channel, e.delivery_tag, e.payload) for e in got] == [
        (3 + k, 10 + k, body) for k, body in enumerate(bodies)
    ]
    # What pamqp reads from the same bytes: the fast path took its fields, not others.
    methods = [(c, v) for c, v in pamqp_frames(data) if isinstance(v, commands.Basic.Deliver)]
    assert [(c, v.delivery_tag) for c, v in methods] == [(3, 10), (4, 11), (5, 12)]


def test_the_same_message_to_consumers_of_one_connection_is_one_object() -> None:
    """drivers.net.deliveries groups a pass's deliveries by the payload's identity."""
    body = b"m" * 1000
    got = events(ClientParser(), deliver(1, 1, body) + deliver(2, 1, body) + deliver(3, 1, b"n"))
    assert got[0].payload is got[1].payload and got[2].payload == b"n"


@pytest.mark.parametrize("step", [None, 100])
def test_parsers_sharing_payloads_hand_out_one_object_per_message(step) -> None:
    """The connections of a process (one consumer each) share the latest body: the same
    message read by another parser, whole or frame by frame, is that object; a body of the
    same length that differs is not."""
    shared = Payloads()
    first, second, third = (ClientParser(payloads=shared) for _ in range(3))
    body = b"m" * 1000
    (a,) = events(first, deliver(1, 1, body), step)
    (b,) = events(second, deliver(1, 1, body), step)
    (c,) = events(third, deliver(1, 1, b"n" + body[1:]), step)
    assert a.payload == body and b.payload is a.payload
    assert c.payload == b"n" + body[1:] and shared.last is c.payload
    (d,) = events(ClientParser(), deliver(1, 1, body), step)  # a parser of its own
    assert d.payload == body and d.payload is not a.payload


def test_other_methods_are_pamqp_events_and_a_close_says_why() -> None:
    data = (
        frame.marshal(commands.Basic.ConsumeOk(consumer_tag="c1"), 1)
        + frame.marshal(commands.Channel.Close(406, "PRECONDITION_FAILED - no", 50, 10), 1)
        + frame.marshal(commands.Basic.Ack(delivery_tag=7, multiple=True), 2)
        + protocol.HEARTBEAT_FRAME
        + frame.marshal(commands.Connection.Close(530, "NOT_ALLOWED - vhost x", 10, 40), 0)
    )
    got = events(ClientParser(), data, 5)
    assert isinstance(got[0], Method) and isinstance(got[0].method, commands.Basic.ConsumeOk)
    assert isinstance(got[1].method, commands.Channel.Close) and got[1].channel == 1
    assert got[2].method.delivery_tag == 7 and got[2].method.multiple is True
    assert isinstance(got[3], Heartbeat)
    assert got[4] == ConnectionClosed(530, "NOT_ALLOWED - vhost x", 10, 40)
    assert protocol.close_ok_reply(got[1]) == frame.marshal(commands.Channel.CloseOk(), 1)
    assert protocol.close_ok_reply(got[4]) == frame.marshal(commands.Connection.CloseOk(), 0)


def test_a_returned_message_comes_with_its_body() -> None:
    data = frame.marshal(commands.Basic.Return(312, "NO_ROUTE", "ex", "rk"), 4)
    data += frame.marshal(header.ContentHeader(0, 3, commands.Basic.Properties()), 4)
    data += frame.marshal(ContentBody(b"abc"), 4)
    (event,) = events(ClientParser(), data, 2)
    assert isinstance(event.method, commands.Basic.Return) and event.body == b"abc"


def test_an_oversized_frame_is_refused_from_its_size_prefix() -> None:
    parser = ClientParser(frame_max=4096)
    parser.receive_data(struct.pack(">BHI", 3, 1, 4096))  # 4096 + 8 > frame_max; no body yet
    with pytest.raises(ProtocolError, match="frame_max 4096"):
        parser.next_event()


@pytest.mark.parametrize(
    "data, match",
    [
        (struct.pack(">BHI", 1, 0, 4) + b"\x00\x0a\x00\x0a" + b"\x00", "frame end"),
        (struct.pack(">BHI", 9, 0, 0) + b"\xce", "unknown frame type"),
        (frame.marshal(ContentBody(b"x"), 1), "without its header"),
        (frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 1), "without"),
    ],
)
def test_bytes_that_are_no_amqp_are_a_protocol_error(data, match) -> None:
    parser = ClientParser()
    parser.receive_data(data)
    with pytest.raises(ProtocolError, match=match):
        parser.next_event()


@pytest.mark.parametrize("multiple", [True, False])
def test_the_ack_is_pamqps(multiple) -> None:
    expected = frame.marshal(commands.Basic.Ack(delivery_tag=2**40 + 5, multiple=multiple), 513)
    assert protocol.ack(513, 2**40 + 5, multiple) == expected


@pytest.mark.parametrize("persistent", [True, False])
def test_a_publish_is_cut_into_body_frames_of_frame_max(persistent) -> None:
    payload = bytes(range(256)) * 40  # 10,240 bytes
    data = protocol.publish(2, "topic", "", payload, 4096, persistent=persistent)
    frames = pamqp_frames(data)
    assert {channel for channel, _ in frames} == {2}
    publish, content, *bodies = (value for _, value in frames)
    assert isinstance(publish, commands.Basic.Publish) and publish.exchange == "topic"
    assert isinstance(content, header.ContentHeader) and content.body_size == len(payload)
    assert content.properties.delivery_mode == (2 if persistent else 1)
    assert len(bodies) == 3 and b"".join(b.value for b in bodies) == payload


def test_the_handshake_takes_the_smaller_limits() -> None:
    start_ok = pamqp_frames(protocol.start_ok("u", "p\0w"))[0][1]
    assert start_ok.mechanism == "PLAIN" and start_ok.response == "\0u\0p\0w"
    assert start_ok.client_properties["capabilities"]["authentication_failure_close"] is True
    tune = commands.Connection.Tune(channel_max=2047, frame_max=65536, heartbeat=60)
    data, frame_max, channel_max = protocol.tune_ok_and_open(tune, 131072, 0, "/v")
    tune_ok, open_ = (value for _, value in pamqp_frames(data))
    assert (frame_max, channel_max) == (65536, 2047)
    assert (tune_ok.frame_max, tune_ok.channel_max, tune_ok.heartbeat) == (65536, 2047, 0)
    assert open_.virtual_host == "/v"
