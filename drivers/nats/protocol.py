"""The NATS client protocol (core NATS, text), sans-IO: bytes in, events out; events' bytes out.

Written here rather than taken from `nats-py`, the maintained client: nats-py is asyncio-only
(no sans-IO parser to put under gevent's sockets), and the part a subscriber needs is small.
Server to client: INFO, MSG, PING, PONG, +OK, -ERR (HMSG only after a CONNECT with headers,
which this client never sends). Client to server: CONNECT, PUB, SUB, UNSUB, PING, PONG.
Reference: https://docs.nats.io/reference/reference-protocols/nats-protocol.

`ClientParser.receive_data` only buffers; `next_event` returns one event or NEED_DATA, and
raises ProtocolError for anything the protocol does not allow (checked as early as possible: a
control line longer than MAX_CONTROL_LINE, or a payload larger than the server's max_payload).
A MSG whose payload equals the previous MSG's returns the same bytes object (compared in the
buffer, not copied): a broadcast's copies to the subscriptions of one connection cost a memcmp
each, and the driver groups them by identity (drivers/peer/deliveries.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "NEED_DATA",
    "PING",
    "PONG",
    "ClientParser",
    "Err",
    "Info",
    "Msg",
    "Ok",
    "Ping",
    "Pong",
    "ProtocolError",
    "connect",
    "pub",
    "sub",
    "unsub",
]

MAX_CONTROL_LINE = 4096
"""The server's default max_control_line; a line longer than this without CRLF is garbage."""
DEFAULT_MAX_PAYLOAD = 1024 * 1024
CRLF = b"\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"


class ProtocolError(Exception):
    """The server sent something the protocol does not allow."""


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


@dataclass(frozen=True, slots=True)
class Info:
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Msg:
    subject: bytes
    sid: int
    reply: bytes | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Err:
    message: str


Event = Info | Msg | Ping | Pong | Ok | Err
_PING, _PONG, _OK = Ping(), Pong(), Ok()


class ClientParser:
    """What a NATS server sends, as events."""

    __slots__ = ("_buf", "_pos", "_last", "max_payload")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._last = b""
        self.max_payload = DEFAULT_MAX_PAYLOAD
        """The server's max_payload, from its INFO (what a MSG may carry)."""

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_event(self) -> Event | _NeedData:
        buf, pos = self._buf, self._pos
        eol = buf.find(CRLF, pos)
        if eol < 0:
            if len(buf) - pos > MAX_CONTROL_LINE:
                raise ProtocolError(f"control line longer than {MAX_CONTROL_LINE} bytes")
            return NEED_DATA
        if eol - pos > MAX_CONTROL_LINE:
            raise ProtocolError(f"control line longer than {MAX_CONTROL_LINE} bytes")
        if buf.startswith(b"MSG ", pos):
            return self._msg(buf, pos, eol)
        line = bytes(buf[pos:eol])
        op, _, rest = line.partition(b" ")
        op = op.upper()
        event: Event
        if op == b"PING":
            event = _PING
        elif op == b"PONG":
            event = _PONG
        elif op == b"+OK":
            event = _OK
        elif op == b"-ERR":
            event = Err(rest.strip().strip(b"'").decode("utf-8", "replace"))
        elif op == b"INFO":
            try:
                fields = json.loads(rest)
            except ValueError as exc:
                raise ProtocolError(f"INFO is not JSON: {exc}") from None
            if not isinstance(fields, dict):
                raise ProtocolError("INFO is not a JSON object")
            self.max_payload = int(fields.get("max_payload", DEFAULT_MAX_PAYLOAD))
            event = Info(fields)
        elif op == b"MSG":  # lower-case spelling: the slow path
            return self._msg(buf, pos, eol)
        else:
            raise ProtocolError(f"unknown operation {line[:40]!r}")
        self._pos = eol + 2
        return event

    def _msg(self, buf: bytearray, pos: int, eol: int) -> Msg | _NeedData:
        args = bytes(buf[pos + 4 : eol]).split()
        if len(args) == 3:
            subject, sid, size_text = args
            reply = None
        elif len(args) == 4:
            subject, sid, reply, size_text = args
        else:
            raise ProtocolError(f"MSG with {len(args)} arguments: {bytes(buf[pos:eol])[:80]!r}")
        try:
            size, sid_number = int(size_text), int(sid)
        except ValueError:
            line = bytes(buf[pos:eol])[:80]
            raise ProtocolError(f"MSG with a bad size or sid: {line!r}") from None
        if not 0 <= size <= self.max_payload:
            raise ProtocolError(f"MSG of {size} bytes (max_payload is {self.max_payload})")
        start = eol + 2
        end = start + size
        if len(buf) < end + 2:
            return NEED_DATA
        if buf[end : end + 2] != CRLF:
            raise ProtocolError("MSG payload not followed by CRLF")
        last = self._last
        if len(last) == size and buf.startswith(last, start):
            payload = last
        else:
            payload = self._last = bytes(buf[start:end])
        self._pos = end + 2
        return Msg(subject, sid_number, reply, payload)


# -- what the client sends -------------------------------------------------------------------
def connect(name: str, *, verbose: bool = False) -> bytes:
    """CONNECT without headers or echo needs: a subscriber and a publisher of plain messages."""
    options = {
        "verbose": verbose,
        "pedantic": False,
        "lang": "python-fanout-bench",
        "version": "1",
        "protocol": 1,
        "name": name,
        "headers": False,
        "no_responders": False,
    }
    return b"CONNECT " + json.dumps(options, separators=(",", ":")).encode() + CRLF


def pub(subject: bytes, payload: bytes) -> bytes:
    return b"PUB %s %d\r\n%s\r\n" % (subject, len(payload), payload)


def sub(subject: bytes, sid: int, queue: bytes | None = None) -> bytes:
    if queue:
        return b"SUB %s %s %d\r\n" % (subject, queue, sid)
    return b"SUB %s %d\r\n" % (subject, sid)


def unsub(sid: int) -> bytes:
    return b"UNSUB %d\r\n" % sid
