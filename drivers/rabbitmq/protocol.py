"""AMQP 0-9-1 for a client, without I/O: frames in, events out; requests in, bytes out.

The framing and every method's fields come from pamqp (PyPI `pamqp`, Gavin M. Roy's, the
codec under aiormq and so aio-pika): it is sans-IO already (`frame.unmarshal`
takes bytes, `frame.marshal` returns them), typed, covers the whole 0-9-1 spec with RabbitMQ's
extensions (publisher confirms, basic.nack, connection.blocked), and has no dependency. What it
lacks is what a connection needs around it: a buffer that takes partial reads, the handshake
(start, tune, open), and the content assembly of a delivery (method, header and body frames on
one channel). That is here, h11's way: `receive_data` buffers, `next_event` returns an event
or NEED_DATA, the request helpers return bytes.

One path does not go through pamqp: a delivery (basic.deliver, its content header and body),
read once per consumer per message, where pamqp's generic decoding of each field (and of the
stream's `x-stream-offset` header table) cost more than the rest of the read. The fast path
takes the three fields a consumer needs (channel, delivery tag, body) by their offsets in the
spec, all three frames in one step when they are whole in the buffer (as RabbitMQ writes
them), frame by frame otherwise; `tests/unit/test_rabbitmq_protocol.py` checks both against
pamqp's decoding of the same bytes. Anything else on the wire is pamqp's. The acknowledgement
the consumer sends back is built the same way (`ack`), checked against pamqp's marshalling,
and when it is due is `ChannelAcks`'s: with one consumer per connection, acknowledging every
read was one send() per delivery, at 1,000 consumers the largest single cost of the client
after the read itself (docs/peers.md).

A broadcast brings the same body to every consumer, on as many connections: the parsers of a
process share the latest body read (`Payloads`) and compare the next one with it where it lies
in the buffer, so a message is copied out once per process, not once per delivery, and every
delivery of it is that one object (drivers.net.deliveries groups by identity, and compares
nothing for a body it already holds). Copying each body out twice (a slice, then bytes of
it) and comparing the copy with the last, here and again in drivers.net.deliveries, was the
largest part of the read path's CPU socket-free (docs/peers.md, "The client's CPU").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pamqp import commands, frame, header, heartbeat
from pamqp import exceptions as pamqp_exceptions
from pamqp.body import ContentBody
from pamqp.common import FieldTable

__all__ = [
    "NEED_DATA",
    "ChannelAcks",
    "ClientParser",
    "Payloads",
    "ConnectionClosed",
    "Delivery",
    "Heartbeat",
    "Method",
    "ProtocolError",
]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_OVERHEAD = 8  # type, channel, size (7) and the end octet
DEFAULT_FRAME_MAX = 131072
_DELIVER = struct.pack(">HH", 60, 60)
_HEAD = struct.Struct(">BHI")
_U64 = struct.Struct(">Q")
_ACK = struct.Struct(">BHIHHQBB")
HEARTBEAT_FRAME = frame.marshal(heartbeat.Heartbeat(), 0)

CLIENT_PROPERTIES: FieldTable = {
    "product": "fanout-bench",
    "platform": "Python",
    "capabilities": {
        "authentication_failure_close": True,  # a refused login is a connection.close, not EOF
        "publisher_confirms": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
        "connection.blocked": True,
    },
}


class ProtocolError(Exception):
    """The server sent something this client cannot read (a malformed or oversized frame)."""


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Any = _NeedData()


@dataclass(frozen=True, slots=True)
class Method:
    """A method frame other than basic.deliver, decoded by pamqp (with its content, for the
    methods that carry one: basic.return, basic.get-ok)."""

    channel: int
    method: Any
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The server's connection.close (already answered with close-ok): the code, its text,
    and the method it refused (class, method id; 0, 0 when none)."""

    code: int
    text: str
    class_id: int
    method_id: int


class Delivery:
    """One basic.deliver with its body, on `channel` (not frozen: built per delivery)."""

    __slots__ = ("channel", "delivery_tag", "payload")

    def __init__(self, channel: int, delivery_tag: int, payload: bytes) -> None:
        self.channel = channel
        self.delivery_tag = delivery_tag
        self.payload = payload


class Heartbeat:
    __slots__ = ()


_HEARTBEAT = Heartbeat()


class Payloads:
    """The latest message body read, shared by every parser of a process (see the module's
    docstring): a body equal to it is this very object."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = b""

    def same(self, payload: bytes) -> bytes:
        """`payload`, or the equal body read before it."""
        last = self.last
        if payload == last:
            return last
        self.last = payload
        return payload

    def shared(self, buf: bytearray, start: int, end: int) -> bytes:
        """buf[start:end] as `same` gives it, compared where it lies (startswith copies
        nothing), copied once, through a view, when it is a new body."""
        last = self.last
        if end - start == len(last) and buf.startswith(last, start):
            return last
        payload = self.last = bytes(memoryview(buf)[start:end])
        return payload


class _Content:
    """A method waiting for its content frames on one channel."""

    __slots__ = ("method", "tag", "size", "parts", "got")

    def __init__(self, method: Any, tag: int) -> None:
        self.method = method
        self.tag = tag
        self.size = -1
        self.parts: list[bytes] = []
        self.got = 0


class ClientParser:
    """The server's frames as events. `frame_max` is the largest frame accepted (the tuned
    one once the handshake is done); a larger size prefix is refused as soon as it arrives."""

    def __init__(
        self, frame_max: int = DEFAULT_FRAME_MAX, payloads: Payloads | None = None
    ) -> None:
        self.frame_max = frame_max
        self._buf = bytearray()
        self._pos = 0
        self._content: dict[int, _Content] = {}
        self._payloads = payloads or Payloads()

    def receive_data(self, data: bytes | memoryview) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_event(self) -> Any:
        """The next event, or NEED_DATA. Raises ProtocolError for bytes that are no AMQP."""
        buf = self._buf
        while True:
            pos = self._pos
            if len(buf) - pos < 7:
                return NEED_DATA
            kind, channel, size = _HEAD.unpack_from(buf, pos)
            if size + FRAME_OVERHEAD > self.frame_max:
                raise ProtocolError(f"a frame of {size} bytes (frame_max {self.frame_max})")
            end = pos + 7 + size
            if len(buf) <= end:
                return NEED_DATA
            if buf[end] != FRAME_END:
                raise ProtocolError(f"frame end {buf[end]:#x}, not 0xce")
            self._pos = end + 1
            start = pos + 7
            if kind == FRAME_BODY:
                event = self._body(channel, start, end)
            elif kind == FRAME_METHOD:
                if buf[start : start + 4] == _DELIVER:
                    whole = self._whole_delivery(channel, start, end)
                    if whole is not None:
                        return whole
                    self._deliver(channel, start, end)
                    continue
                event = self._method(channel, pos, end)
            elif kind == FRAME_HEADER:
                self._header(channel, start)
                event = self._completed(channel)
            elif kind == FRAME_HEARTBEAT:
                return _HEARTBEAT
            else:
                raise ProtocolError(f"unknown frame type {kind}")
            if event is not None:
                return event

    # -- the frames ------------------------------------------------------------------------------
    def _whole_delivery(self, channel: int, start: int, end: int) -> Delivery | None:
        """The common case in one step: basic.deliver, its header and its one body frame,
        whole in the buffer, on one channel (RabbitMQ writes them together); None for
        anything else, which the frame-by-frame path then reads."""
        buf = self._buf
        at = start + 4
        at += 1 + buf[at]  # consumer tag (a shortstr)
        head = end + 1  # the content header frame
        if at + 9 > end or len(buf) < head + 19 or channel in self._content:
            return None
        kind, head_channel, head_size = _HEAD.unpack_from(buf, head)
        body = head + 8 + head_size  # the body frame
        if kind != FRAME_HEADER or head_channel != channel or len(buf) < body + 7:
            return None
        size = _U64.unpack_from(buf, head + 11)[0]
        kind, body_channel, body_size = _HEAD.unpack_from(buf, body)
        stop = body + 7 + body_size
        if (
            kind != FRAME_BODY
            or body_channel != channel
            or body_size != size
            or len(buf) <= stop
            or buf[head + 7 + head_size] != FRAME_END
            or buf[stop] != FRAME_END
            or body_size + FRAME_OVERHEAD > self.frame_max
        ):
            return None
        self._pos = stop + 1
        payload = self._payloads.shared(buf, body + 7, stop)
        return Delivery(channel, _U64.unpack_from(buf, at)[0], payload)

    def _deliver(self, channel: int, start: int, end: int) -> None:
        buf = self._buf
        at = start + 4
        at += 1 + buf[at]  # consumer tag (a shortstr)
        if at + 9 > end:
            raise ProtocolError("a basic.deliver too short for its delivery tag")
        self._expect(channel, _Content(None, _U64.unpack_from(buf, at)[0]))

    def _method(self, channel: int, pos: int, end: int) -> Any:
        try:
            _, _, method = frame.unmarshal(bytes(self._buf[pos : end + 1]))
        except pamqp_exceptions.UnmarshalingException as exc:
            raise ProtocolError(str(exc)) from None
        if isinstance(method, commands.Basic.Return | commands.Basic.GetOk):
            self._expect(channel, _Content(method, 0))
            return None
        if isinstance(method, commands.Connection.Close):
            return ConnectionClosed(
                method.reply_code or 0,
                method.reply_text or "",
                method.class_id or 0,
                method.method_id or 0,
            )
        return Method(channel, method)

    def _expect(self, channel: int, content: _Content) -> None:
        if channel in self._content:
            raise ProtocolError(f"channel {channel}: a method before the last one's content")
        self._content[channel] = content

    def _header(self, channel: int, start: int) -> None:
        content = self._content.get(channel)
        if content is None or content.size >= 0:
            raise ProtocolError(f"channel {channel}: a content header without its method")
        content.size = _U64.unpack_from(self._buf, start + 4)[0]

    def _body(self, channel: int, start: int, end: int) -> Any:
        content = self._content.get(channel)
        if content is None or content.size < 0:
            raise ProtocolError(f"channel {channel}: a content body without its header")
        content.parts.append(bytes(self._buf[start:end]))
        content.got += end - start
        if content.got > content.size:
            raise ProtocolError(f"channel {channel}: more body than its header said")
        return self._completed(channel)

    def _completed(self, channel: int) -> Any:
        content = self._content[channel]
        if content.got < content.size:
            return None
        del self._content[channel]
        parts = content.parts
        payload = parts[0] if len(parts) == 1 else b"".join(parts)  # b"" for no body
        if content.method is not None:
            return Method(channel, content.method, payload)
        return Delivery(channel, content.tag, self._payloads.same(payload))


# -- what the client sends -------------------------------------------------------------------------
def method(channel: int, value: Any) -> bytes:
    """One method frame (pamqp's marshalling)."""
    return frame.marshal(value, channel)


def start_ok(username: str, password: str) -> bytes:
    """connection.start-ok: PLAIN login, the client's capabilities."""
    return method(
        0,
        commands.Connection.StartOk(
            client_properties=CLIENT_PROPERTIES,
            mechanism="PLAIN",
            response=f"\0{username}\0{password}",
            locale="en_US",
        ),
    )


def tune_ok_and_open(
    tune: commands.Connection.Tune, frame_max: int, heartbeat_s: int, virtual_host: str
) -> tuple[bytes, int, int]:
    """connection.tune-ok (the smaller of each limit; the client's heartbeat) and
    connection.open; with the frame_max and channel_max agreed."""
    agreed_frame = min(frame_max, tune.frame_max or frame_max)
    channel_max = tune.channel_max or 65535
    data = method(
        0,
        commands.Connection.TuneOk(
            channel_max=channel_max, frame_max=agreed_frame, heartbeat=heartbeat_s
        ),
    ) + method(0, commands.Connection.Open(virtual_host=virtual_host))
    return data, agreed_frame, channel_max


def publish(
    channel: int,
    exchange: str,
    routing_key: str,
    payload: bytes,
    frame_max: int,
    *,
    persistent: bool,
) -> bytes:
    """basic.publish, its content header (delivery mode 2 when persistent) and body frames
    of at most frame_max each."""
    properties = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    parts = [
        method(channel, commands.Basic.Publish(exchange=exchange, routing_key=routing_key)),
        frame.marshal(header.ContentHeader(0, len(payload), properties), channel),
    ]
    step = frame_max - FRAME_OVERHEAD
    for at in range(0, len(payload), step):
        parts.append(frame.marshal(ContentBody(payload[at : at + step]), channel))
    return b"".join(parts)


def ack(channel: int, delivery_tag: int, multiple: bool = True) -> bytes:
    """basic.ack of `delivery_tag` (and, multiple, of every earlier one on the channel)."""
    return _ACK.pack(FRAME_METHOD, channel, 13, 60, 80, delivery_tag, int(multiple), FRAME_END)


class ChannelAcks:
    """When a connection's deliveries are acknowledged (consumer.ackEvery): a channel's by one
    basic.ack (multiple) once `every` of them wait (`due`, at the end of the read that brought
    the last), and what still waits when the connection closes (`waiting`). Delivery tags
    count a channel's deliveries from 1, so what waits is the latest tag less the one last
    acknowledged: no count is kept."""

    __slots__ = ("every", "_latest", "_acked", "_due")

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self._latest: dict[int, int] = {}
        """channel -> the latest delivery tag read on it."""
        self._acked: dict[int, int] = {}
        """channel -> the latest delivery tag acknowledged on it (0: none yet)."""
        self._due: dict[int, int] = {}
        """channel -> the delivery tag to acknowledge at the end of this read."""

    def consuming(self, channel: int) -> None:
        """A consumer starts on `channel`: its tags count from 1."""
        self._acked[channel] = 0

    def delivered(self, channel: int, tag: int) -> None:
        self._latest[channel] = tag
        if tag - self._acked[channel] >= self.every:
            self._due[channel] = tag

    def due(self) -> bytes:
        """The acks the read made due (b"" for none), counted as sent."""
        if not self._due:
            return b""
        data = self._acks(self._due)
        self._due.clear()
        return data

    def waiting(self, channels: Iterable[int]) -> bytes:
        """The acks of what waits on `channels` (the ones still consuming), counted as sent."""
        acked, latest = self._acked, self._latest
        return self._acks(
            {ch: latest[ch] for ch in channels if ch in latest and latest[ch] > acked[ch]}
        )

    def _acks(self, tags: dict[int, int]) -> bytes:
        """One basic.ack (multiple) per channel, of the delivery tag `tags` give it."""
        self._acked.update(tags)
        return b"".join(ack(channel, tag) for channel, tag in tags.items())


def close_ok_reply(event: object) -> bytes:
    """What answers a server's close: connection.close-ok, or channel.close-ok."""
    if isinstance(event, ConnectionClosed):
        return method(0, commands.Connection.CloseOk())
    assert isinstance(event, Method)
    return method(event.channel, commands.Channel.CloseOk())
