"""The MQTT client codec (drivers/mqtt/packets.py), 3.1.1 and 5, fed whole, byte by byte and
cut at random: the same events every time; lengths checked as soon as the fixed header is in.
The packets the server side sends are written out by hand from the OASIS specifications."""

from __future__ import annotations

import random
import struct

import pytest

from drivers.mqtt import packets
from drivers.mqtt.packets import (
    MQTT_3_1_1,
    MQTT_5,
    NEED_DATA,
    ClientParser,
    ConnAck,
    Disconnect,
    PingResp,
    ProtocolError,
    PubAck,
    Publish,
    SubAck,
    encode_length,
)

PAYLOAD = bytes(range(256)) * 40  # 10,240 bytes: a two-byte remaining length


def u16(n: int) -> bytes:
    return struct.pack(">H", n)


def server_stream(version: int) -> tuple[bytes, list[object]]:
    """What a broker sends a subscriber: CONNACK, SUBACK, deliveries at QoS 0 and 1, PUBACK,
    PINGRESP (and an MQTT 5 DISCONNECT), with the events they should give."""
    props = b"\x00" if version == MQTT_5 else b""
    # MQTT 5 PUBLISH properties: a subscription identifier (0x0B, varint 3) in the length.
    pub_props = b"\x02\x0b\x03" if version == MQTT_5 else b""
    topic = b"\x00\x08fanout-1"
    qos0 = topic + pub_props + PAYLOAD
    qos1 = topic + u16(7) + pub_props + b"hello"
    stream = (
        b"\x20\x02\x00\x00" if version == MQTT_3_1_1 else b"\x20\x03\x00\x00\x00"  # CONNACK
    )
    suback = u16(1) + props + b"\x01"
    stream += b"\x90" + encode_length(len(suback)) + suback
    stream += b"\x30" + encode_length(len(qos0)) + qos0
    stream += b"\x32" + encode_length(len(qos1)) + qos1
    stream += b"\x40\x02" + u16(9)  # PUBACK of our QoS 1 publish
    stream += b"\xd0\x00"  # PINGRESP
    events: list[object] = [
        ConnAck(False, 0),
        SubAck(1, (1,)),
        Publish(b"fanout-1", PAYLOAD, 0, 0),
        Publish(b"fanout-1", b"hello", 1, 7),
        PubAck(9, 0),
        PingResp(),
    ]
    if version == MQTT_5:
        stream += b"\x40\x03" + u16(10) + b"\x97"  # PUBACK: quota exceeded
        stream += b"\xe0\x01\x8b"  # DISCONNECT: server shutting down
        events += [PubAck(10, 0x97), Disconnect(0x8B)]
    return stream, events


def feed(version: int, chunks: list[bytes]) -> list[object]:
    parser = ClientParser(version)
    events: list[object] = []
    for chunk in chunks:
        parser.receive_data(chunk)
        while (event := parser.next_event()) is not NEED_DATA:
            events.append(event)
    return events


@pytest.mark.parametrize("version", [MQTT_3_1_1, MQTT_5])
def test_whole_byte_by_byte_and_cut_at_random_give_the_same_events(version: int) -> None:
    stream, expected = server_stream(version)
    assert feed(version, [stream]) == expected
    assert feed(version, [stream[i : i + 1] for i in range(len(stream))]) == expected
    rng = random.Random(version)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(stream)), 10))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert feed(version, chunks) == expected


@pytest.mark.parametrize(
    "n, encoded",
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (16_383, b"\xff\x7f"),
        (16_384, b"\x80\x80\x01"),
        (2_097_152, b"\x80\x80\x80\x01"),
        (268_435_455, b"\xff\xff\xff\x7f"),
    ],
)
def test_remaining_length_is_the_specification_s_examples(n: int, encoded: bytes) -> None:
    assert encode_length(n) == encoded


def test_a_length_over_the_limit_is_refused_before_the_packet_arrives() -> None:
    parser = ClientParser(MQTT_5)
    parser.receive_data(b"\x30" + encode_length(packets.MAX_PACKET_SIZE + 1))
    with pytest.raises(ProtocolError, match="at most"):
        parser.next_event()


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x30\xff\xff\xff\xff\x01", "longer than 4 bytes"),
        (b"\x36\x03\x00\x01t", "QoS 3"),
        (b"\x90\x02\x00\x01", "SUBACK of 2 bytes"),
        (b"\x41\x02\x00\x01", "flags"),
        (b"\x10\x00", "unexpected packet type 1"),
        (b"\x30\x03\x00\x09t", "shorter than its topic"),
    ],
)
def test_what_the_protocol_does_not_allow_raises(data: bytes, message: str) -> None:
    parser = ClientParser(MQTT_3_1_1)
    parser.receive_data(data)
    with pytest.raises(ProtocolError, match=message):
        parser.next_event()


def test_what_the_client_sends() -> None:
    # CONNECT 3.1.1: "MQTT", level 4, clean session, keep-alive 60, client id "c".
    assert packets.connect(b"c", MQTT_3_1_1, 60) == (
        b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01c"
    )
    # MQTT 5 adds an empty property length after the keep-alive.
    assert packets.connect(b"c", MQTT_5, 60) == b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x01c"
    assert packets.subscribe(1, b"t", 1, MQTT_3_1_1) == b"\x82\x06\x00\x01\x00\x01t\x01"
    assert packets.subscribe(1, b"t", 0, MQTT_5) == b"\x82\x07\x00\x01\x00\x00\x01t\x00"
    assert packets.publish(b"t", b"ab", 0, 0, MQTT_3_1_1) == b"\x30\x05\x00\x01tab"
    assert packets.publish(b"t", b"ab", 1, 5, MQTT_5) == b"\x32\x08\x00\x01t\x00\x05\x00ab"
    assert packets.puback(258) == b"\x40\x02\x01\x02"
    assert packets.PINGREQ == b"\xc0\x00"


def test_what_the_client_sends_reads_back_through_a_server_s_eyes() -> None:
    """A PUBLISH the client encodes is what the parser decodes when a server sends it back
    (the packet layout is the same in both directions)."""
    for version in (MQTT_3_1_1, MQTT_5):
        for qos, packet_id in ((0, 0), (1, 300)):
            data = packets.publish(b"fanout-2", PAYLOAD, qos, packet_id, version)
            assert feed(version, [data]) == [Publish(b"fanout-2", PAYLOAD, qos, packet_id)]
