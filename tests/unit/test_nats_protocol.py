"""The NATS client codec (drivers/nats/protocol.py) fed whole, byte by byte and cut at random:
the same events every time, and a protocol error as early as the bytes allow."""

from __future__ import annotations

import json
import random

import pytest

from drivers.nats import protocol
from drivers.nats.protocol import (
    MAX_CONTROL_LINE,
    NEED_DATA,
    ClientParser,
    Err,
    Info,
    Msg,
    Ok,
    Ping,
    Pong,
    ProtocolError,
)

PAYLOAD = bytes(range(256)) * 40  # 10,240 bytes, CRLF among them
STREAM = (
    b'INFO {"server_id":"x","version":"2.9.10","max_payload":1048576}\r\n'
    b"+OK\r\n"
    b"PING\r\n"
    b"MSG fanout-1 7 " + str(len(PAYLOAD)).encode() + b"\r\n" + PAYLOAD + b"\r\n"
    b"MSG fanout-1 8 " + str(len(PAYLOAD)).encode() + b"\r\n" + PAYLOAD + b"\r\n"
    b"MSG fanout-1 9 _INBOX.r 5\r\nhello\r\n"
    b"MSG fanout-1 10 0\r\n\r\n"
    b"PONG\r\n"
    b"-ERR 'Slow Consumer Detected'\r\n"
)
EXPECTED = [
    Info({"server_id": "x", "version": "2.9.10", "max_payload": 1048576}),
    Ok(),
    Ping(),
    Msg(b"fanout-1", 7, None, PAYLOAD),
    Msg(b"fanout-1", 8, None, PAYLOAD),
    Msg(b"fanout-1", 9, b"_INBOX.r", b"hello"),
    Msg(b"fanout-1", 10, None, b""),
    Pong(),
    Err("Slow Consumer Detected"),
]


def feed(chunks: list[bytes]) -> list[object]:
    parser = ClientParser()
    events: list[object] = []
    for chunk in chunks:
        parser.receive_data(chunk)
        while (event := parser.next_event()) is not NEED_DATA:
            events.append(event)
    return events


def test_a_stream_read_whole_gives_every_event() -> None:
    assert feed([STREAM]) == EXPECTED


def test_the_same_stream_byte_by_byte() -> None:
    assert feed([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("seed", range(20))
def test_the_same_stream_cut_at_random(seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(STREAM)), 12))
    chunks = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
    assert feed(chunks) == EXPECTED


def test_a_payload_equal_to_the_one_before_is_the_same_object() -> None:
    """A broadcast's copies cost a compare, not a copy, and group by identity."""
    events = [e for e in feed([STREAM]) if isinstance(e, Msg)]
    assert events[0].payload is events[1].payload
    assert events[2].payload is not events[1].payload


def test_info_sets_the_payload_limit_and_a_larger_msg_is_refused_at_its_line() -> None:
    parser = ClientParser()
    parser.receive_data(b'INFO {"max_payload":100}\r\n')
    assert isinstance(parser.next_event(), Info)
    parser.receive_data(b"MSG s 1 101\r\n")  # refused before any of the 101 bytes arrives
    with pytest.raises(ProtocolError, match="max_payload is 100"):
        parser.next_event()


@pytest.mark.parametrize(
    "data, message",
    [
        (b"MSG s 1 5\r\nhelloXX", "not followed by CRLF"),
        (b"MSG s 1\r\n", "2 arguments"),
        (b"MSG s x 5\r\nhello\r\n", "bad size or sid"),
        (b"HMSG s 1 0 5\r\nhello\r\n", "unknown operation"),
        (b"INFO [1]\r\n", "not a JSON object"),
        (b"INFO {\r\n", "not JSON"),
        (b"X" * (MAX_CONTROL_LINE + 1), "control line longer"),
    ],
)
def test_what_the_protocol_does_not_allow_raises(data: bytes, message: str) -> None:
    parser = ClientParser()
    parser.receive_data(data)
    with pytest.raises(ProtocolError, match=message):
        parser.next_event()


def test_what_the_client_sends() -> None:
    assert protocol.pub(b"t", b"abc") == b"PUB t 3\r\nabc\r\n"
    assert protocol.sub(b"t", 12) == b"SUB t 12\r\n"
    assert protocol.sub(b"t", 12, b"sub-0") == b"SUB t sub-0 12\r\n"
    assert protocol.unsub(12) == b"UNSUB 12\r\n"
    line = protocol.connect("c1")
    assert line.startswith(b"CONNECT ") and line.endswith(b"\r\n")
    options = json.loads(line[8:])
    assert options["verbose"] is False and options["headers"] is False
