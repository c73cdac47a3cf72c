"""MQTT 3.1.1 and 5 control packets, sans-IO: the client's side of the subset a benchmark needs.

Written here rather than taken from a library: paho-mqtt owns its sockets and threads (no
parser to feed bytes), and `mqttproto`, the sans-IO one, is not on the package index this
project installs from; the subset is small. Client to server: CONNECT, SUBSCRIBE, PUBLISH
(QoS 0 and 1), PUBACK, PINGREQ, DISCONNECT. Server to client: CONNACK, SUBACK, PUBLISH, PUBACK,
PINGRESP, and DISCONNECT (MQTT 5). QoS 2 (PUBREC/PUBREL/PUBCOMP) is not spoken: the driver
refuses it in its settings. References: MQTT 3.1.1 (OASIS, 2014) and MQTT 5.0 (OASIS, 2019),
chapters 2 and 3.

`ClientParser.receive_data` only buffers; `next_event` returns one event or NEED_DATA and
raises ProtocolError for what the protocol does not allow. A packet's length is checked as
soon as its fixed header has arrived (MAX_PACKET_SIZE), not once the whole packet is in.
MQTT 5's properties are skipped by their length: nothing the driver measures is in them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MQTT_3_1_1",
    "MQTT_5",
    "NEED_DATA",
    "PINGREQ",
    "DISCONNECT_PACKET",
    "ClientParser",
    "ConnAck",
    "Disconnect",
    "PingResp",
    "ProtocolError",
    "PubAck",
    "Publish",
    "SubAck",
    "connect",
    "encode_length",
    "puback",
    "publish",
    "subscribe",
]

MQTT_3_1_1 = 4
MQTT_5 = 5
MAX_PACKET_SIZE = 16 * 1024 * 1024
"""The largest packet the parser accepts (the protocol allows 256 MB)."""

CONNECT, CONNACK, PUBLISH, PUBACK = 1, 2, 3, 4
SUBSCRIBE, SUBACK, PINGRESP, DISCONNECT = 8, 9, 13, 14
PINGREQ = b"\xc0\x00"
DISCONNECT_PACKET = b"\xe0\x00"
_U16 = struct.Struct(">H")


class ProtocolError(Exception):
    """The server sent something the protocol does not allow."""


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool
    code: int
    """0: accepted (a 3.1.1 return code, or an MQTT 5 reason code)."""


@dataclass(frozen=True, slots=True)
class SubAck:
    packet_id: int
    codes: tuple[int, ...]
    """One per topic filter: the granted QoS, or 0x80 and above for a refusal."""


@dataclass(frozen=True, slots=True)
class Publish:
    topic: bytes
    payload: bytes
    qos: int
    packet_id: int
    """0 for QoS 0."""
    retain: bool = False
    dup: bool = False


@dataclass(frozen=True, slots=True)
class PubAck:
    packet_id: int
    code: int = 0


@dataclass(frozen=True, slots=True)
class PingResp:
    pass


@dataclass(frozen=True, slots=True)
class Disconnect:
    code: int


Event = ConnAck | SubAck | Publish | PubAck | PingResp | Disconnect
_PINGRESP = PingResp()


# -- encoding ------------------------------------------------------------------------------------
def encode_length(n: int) -> bytes:
    """The fixed header's Remaining Length: 7 bits a byte, low first, at most 4 bytes."""
    if not 0 <= n <= 268_435_455:
        raise ValueError(f"remaining length {n} out of range")
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _string(text: bytes) -> bytes:
    if len(text) > 0xFFFF:
        raise ValueError("an MQTT string holds at most 65,535 bytes")
    return _U16.pack(len(text)) + text


def _packet(first: int, body: bytes) -> bytes:
    return bytes((first,)) + encode_length(len(body)) + body


def connect(client_id: bytes, version: int, keep_alive: int, clean: bool = True) -> bytes:
    flags = 0x02 if clean else 0  # clean session (3.1.1) / clean start (5)
    body = _string(b"MQTT") + bytes((version, flags)) + _U16.pack(keep_alive)
    if version == MQTT_5:
        body += b"\x00"  # no properties
    return _packet(CONNECT << 4, body + _string(client_id))


def subscribe(packet_id: int, topic_filter: bytes, qos: int, version: int) -> bytes:
    body = _U16.pack(packet_id)
    if version == MQTT_5:
        body += b"\x00"
    return _packet(SUBSCRIBE << 4 | 0x02, body + _string(topic_filter) + bytes((qos,)))


def publish(topic: bytes, payload: bytes, qos: int, packet_id: int, version: int) -> bytes:
    body = _string(topic)
    if qos:
        body += _U16.pack(packet_id)
    if version == MQTT_5:
        body += b"\x00"
    return _packet(PUBLISH << 4 | qos << 1, body + payload)


def puback(packet_id: int) -> bytes:
    """PUBACK, success: 3.1.1's form, which MQTT 5 reads as reason 0 without properties."""
    return b"\x40\x02" + _U16.pack(packet_id)


# -- decoding ------------------------------------------------------------------------------------
class ClientParser:
    """What an MQTT server sends to a client of `version`, as events."""

    __slots__ = ("_buf", "_pos", "version")

    def __init__(self, version: int) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.version = version

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_event(self) -> Event | _NeedData:
        buf, pos = self._buf, self._pos
        have = len(buf) - pos
        if have < 2:
            return NEED_DATA
        length = 0
        for i in range(4):
            if i + 1 >= have:
                return NEED_DATA
            byte = buf[pos + 1 + i]
            length |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                start = pos + 2 + i
                break
        else:
            raise ProtocolError("remaining length longer than 4 bytes")
        if length > MAX_PACKET_SIZE:
            raise ProtocolError(f"packet of {length} bytes (at most {MAX_PACKET_SIZE})")
        end = start + length
        if len(buf) < end:
            return NEED_DATA
        first = buf[pos]
        kind, flags = first >> 4, first & 0x0F
        self._pos = end
        body = bytes(buf[start:end])
        if kind == PUBLISH:
            return self._publish(flags, body)
        if flags != (0x02 if kind == SUBSCRIBE else 0):
            raise ProtocolError(f"packet type {kind} with flags {flags:#x}")
        if kind == PUBACK:
            _need(body, 2, "PUBACK")
            return PubAck(_U16.unpack_from(body)[0], body[2] if len(body) > 2 else 0)
        if kind == PINGRESP:
            return _PINGRESP
        if kind == CONNACK:
            _need(body, 2, "CONNACK")
            return ConnAck(bool(body[0] & 1), body[1])
        if kind == SUBACK:
            _need(body, 3, "SUBACK")
            offset = 2
            if self.version == MQTT_5:
                offset = _skip_properties(body, offset)
            return SubAck(_U16.unpack_from(body)[0], tuple(body[offset:]))
        if kind == DISCONNECT and self.version == MQTT_5:
            return Disconnect(body[0] if body else 0)
        raise ProtocolError(f"unexpected packet type {kind} from the server")

    def _publish(self, flags: int, body: bytes) -> Publish:
        qos = (flags >> 1) & 3
        if qos == 3:
            raise ProtocolError("PUBLISH with QoS 3")
        _need(body, 2, "PUBLISH")
        topic_len = _U16.unpack_from(body)[0]
        offset = 2 + topic_len
        packet_id = 0
        if qos:
            _need(body, offset + 2, "PUBLISH")
            packet_id = _U16.unpack_from(body, offset)[0]
            offset += 2
        if self.version == MQTT_5:
            offset = _skip_properties(body, offset)
        if offset > len(body):
            raise ProtocolError("PUBLISH shorter than its topic")
        return Publish(
            body[2 : 2 + topic_len], body[offset:], qos, packet_id, bool(flags & 1), bool(flags & 8)
        )


def _need(body: bytes, n: int, what: str) -> None:
    if len(body) < n:
        raise ProtocolError(f"{what} of {len(body)} bytes (at least {n})")


def _skip_properties(body: bytes, offset: int) -> int:
    """The offset after MQTT 5 properties starting at `offset` (a length, then the bytes)."""
    length = 0
    for i in range(4):
        if offset + i >= len(body):
            raise ProtocolError("properties cut short")
        byte = body[offset + i]
        length |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            end = offset + i + 1 + length
            if end > len(body):
                raise ProtocolError("properties longer than the packet")
            return end
    raise ProtocolError("property length longer than 4 bytes")
