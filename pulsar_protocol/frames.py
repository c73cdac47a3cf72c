"""Pulsar frame layout: bytes in, frames out; frames in, bytes out. No sockets.

A frame is `[u32 total][u32 cmd_size][BaseCommand]`, and for SEND and MESSAGE it goes on with
an optional `[u16 0x0e02][u32 size][BrokerEntryMetadata]` and then the payload section
`[u16 0x0e01][u32 crc32c][u32 metadata_size][MessageMetadata][payload]`. The broker keeps the
payload section exactly as received and re-sends it, so the client's checksum stays valid.
"""

from __future__ import annotations

import re
import struct
import sys
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import (
    COMMON_ACK_PATTERN,
    CommonMessage,
    decode_varint,
    encode_varint,
    parse_message,
)
from pulsar_protocol.errors import RemoteProtocolError

# Pulsar's default maxMessageSize (5 MiB) plus the room it leaves for headers.
MAX_FRAME_SIZE = 5 * 1024 * 1024 + 10 * 1024
MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_HEADER = struct.Struct(">II")
_BEM_HEADER = struct.Struct(">HI")
# A whole frame of a common ACK: the two sizes fit one byte each (the body is < 128 bytes).
_COMMON_ACK_FRAME = re.compile(rb"\x00\x00\x00(.)\x00\x00\x00(.)" + COMMON_ACK_PATTERN, re.DOTALL)
# A whole FLOW frame: consumer_id below 2**63, messagePermits below 2**28 (a uint32 in range).
_COMMON_FLOW_FRAME = re.compile(
    rb"\x00\x00\x00(.)\x00\x00\x00(.)\x08\x0b\x5a([\x00-\x7f])\x08([\x80-\xff]{0,8}[\x00-\x7f])"
    rb"\x10([\x80-\xff]{0,3}[\x00-\x7f])",
    re.DOTALL,
)
_VARINT_63 = rb"([\x80-\xff]{0,8}[\x00-\x7f])"  # a varint below 2**63
# BaseCommand.type = SUBSCRIBE, then the subscribe field's size.
_SUBSCRIBE_START = re.compile(rb"\x08\x04\x22" + _VARINT_63, re.DOTALL)
_SUBSCRIPTION_SIZE = re.compile(rb"\x12" + _VARINT_63, re.DOTALL)  # CommandSubscribe.subscription
# CommandSubscribe's consumer_id, request_id and consumer_name's size.
_SUBSCRIBE_IDS = re.compile(
    rb"\x20" + _VARINT_63 + rb"\x28" + _VARINT_63 + rb"(?:\x32" + _VARINT_63 + rb")?", re.DOTALL
)
_CUMULATIVE = pb.CommandAck.Cumulative
_ACK_START = b"\x08\x0a\x52"  # BaseCommand.type = ACK, then the ack field
_FLOW_START = b"\x08\x0b\x5a"  # BaseCommand.type = FLOW, then the flow field
_MESSAGE_START = b"\x08\x09\x4a"  # BaseCommand.type = MESSAGE, then the message field
_MAX_COMMON_MESSAGE = 4 + 127  # parse_message takes one-byte body sizes
_KEEP_BUFFER = 1 << 20
"""A decoder's buffer larger than this and its reads' room (grown for a large frame) is dropped
once empty."""
_BULK_MIN = 4
"""Frames of one size from which _same_frames compares them at once, not one by one."""
_NO_BUFFER: Any = b""
"""A decoder's buffer while it holds no bytes: one immutable empty object for every decoder,
replaced by a bytearray of its own at the next read (an empty bytearray each was 56 B of a
broker connection, with one connection per consumer a consumer's)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame. `payload` is the raw section from the 0x0e01 magic on (or None)."""

    command: pb.BaseCommand
    payload: bytes | None = None
    broker_entry_metadata: bytes | None = None


class _Run:
    """One entry's MESSAGE frames, any consumer: each is `head + consumer id + rest`, where the
    head depends only on the length of the id (as in MessageTemplate)."""

    __slots__ = (
        "message",
        "payload",
        "broker_entry_metadata",
        "rest_head",
        "rest_size",
        "_rest",
        "heads",
        "after_id",
    )

    def __init__(
        self,
        message: CommonMessage,
        payload: bytes,
        bem: bytes | None,
        rest_head: bytes,
        after_id: bytes,
    ) -> None:
        self.message = message
        self.payload = payload
        self.broker_entry_metadata = bem
        self.rest_head = rest_head
        """A frame's bytes from the end of the consumer id to the payload section."""
        self.rest_size = len(rest_head) + len(payload)
        self._rest = b""
        self.heads: list[bytes | None] = [None] * 10  # by length of the id: b"" for no frame
        self.after_id = after_id
        """The command's bytes after the consumer id (message id, redelivery count)."""

    @property
    def rest(self) -> bytes:
        """A frame's bytes after the consumer id, built when a frame is to be compared with
        it (with one consumer per connection, a read holds one frame and no run needs it)."""
        if not self._rest:
            self._rest = self.rest_head + self.payload
        return self._rest


_LATEST_RUN: list[_Run | None] = [None]
"""The run any decoder of the process started last (next_message_run): its frames are
compared, not parsed, on every connection they reach."""


class _RecentPayloads:
    """The payload sections the decoders of the process read last, newest first, so that a
    decoder reading an entry another one read shortly before holds the same bytes object. With
    one consumer per connection, connections at different points of a backlog each started
    their own copy of an entry (the latest run was another entry's) and kept it as their last
    run: 10 KB a connection with 10 KB messages, most of what a worker held per consumer once
    the messages flowed (a 19,000-consumer run, docs/benchmarks.md). Entries differ in their
    first bytes (the checksum), so a miss costs a few bytes compared per payload kept."""

    __slots__ = ("_payloads", "_size", "_max_size", "_max_count")

    def __init__(self, max_count: int = 16, max_size: int = 4 << 20) -> None:
        self._payloads: deque[bytes] = deque()
        self._size = 0
        self._max_count = max_count
        self._max_size = max_size
        """Bytes kept at most beyond the newest payload (large messages: fewer kept)."""

    def shared(self, buf: bytearray, start: int, end: int) -> bytes:
        """buf[start:end], as the payload kept when one is equal (else a copy, kept)."""
        size = end - start
        for payload in self._payloads:
            if len(payload) == size and buf.startswith(payload, start):
                return payload
        payload = bytes(buf[start:end])
        payloads = self._payloads
        payloads.appendleft(payload)
        self._size += size
        while len(payloads) > 1 and (
            len(payloads) > self._max_count or self._size > self._max_size
        ):
            self._size -= len(payloads.pop())
        return payload


_RECENT_PAYLOADS = _RecentPayloads()


class ReadBuffers:
    """Read buffers lent to the decoders of one process between their reads.

    A decoder's buffer is sized by its largest read (up to 1 MiB for a client connection of
    100 consumers), and each connection kept its own for the whole run: with one connection
    per consumer 64 KiB each, 96 % of what a client held per consumer (tracemalloc,
    benchmarks/client_connect.py). A process that reads its sockets one after another (the
    driver's receive engine) needs only a few: a decoder given this pool takes one for a
    read and hands it back once the read's frames are consumed (`FrameDecoder.release`),
    keeping only a partial frame's bytes of its own."""

    __slots__ = ("_spare", "keep")

    def __init__(self, keep: int = 4) -> None:
        self._spare: list[bytearray] = []
        self.keep = keep
        """Spare buffers kept at most; more given back are dropped."""

    def take(self) -> bytearray | None:
        """A spare buffer (its bytes are stale), if there is one."""
        return self._spare.pop() if self._spare else None

    def give(self, buf: bytearray) -> None:
        if len(self._spare) < self.keep:
            self._spare.append(buf)


_KEEP_LEFTOVER = 64 * 1024
"""A decoder lending its buffer back keeps up to this many bytes not yet consumed, copied; a
larger partial frame keeps the buffer."""


class FrameDecoder:
    """Buffers bytes and yields whole frames, committing only once a frame is complete.

    The size prefix is checked as soon as it arrives, so an oversized frame is refused before
    its body is buffered (Pulsar sizes are 32-bit; buffering first would let a peer ask for 4 GB).
    """

    __slots__ = (
        "_buffer",
        "_buffers",
        "_pos",
        "_end",
        "_max",
        "_oversize",
        "_oversize_context",
        "_last_payload",
        "_room",
        "_run",
    )

    def __init__(
        self, max_frame_size: int = MAX_FRAME_SIZE, buffers: ReadBuffers | None = None
    ) -> None:
        self._buffer: bytearray = _NO_BUFFER
        self._buffers = buffers
        """Where the buffer comes from for a read and goes back to after it (`release`)."""
        self._pos = 0  # consumed bytes not yet cut off the front: cut once per read, not per frame
        self._end = 0
        """Bytes [_pos, _end) of the buffer are received and not yet consumed; the room after
        them is for the next read (get_buffer)."""
        self._max = max_frame_size
        self._oversize: int = pb.UnknownError
        self._oversize_context = ""
        self._last_payload = b""
        self._room = 0
        """The largest read get_buffer was last asked room for: kept beside _KEEP_BUFFER."""
        self._run: _Run | None = None
        """The entry whose MESSAGEs came last (next_message_run)."""

    def receive_data(self, data: bytes) -> None:
        self._compact()
        buf, end, n = self._buffer, self._end, len(data)
        if buf is _NO_BUFFER:
            self._buffer = bytearray(data)
        elif len(buf) < end + n:
            del buf[end:]
            buf += data
        else:
            buf[end : end + n] = data
        self._end = end + n

    def get_buffer(self, size: int) -> memoryview:
        """Room for `size` more bytes, for a socket to read into; then `buffer_updated(n)`
        (asyncio's BufferedProtocol). A read straight into the buffer spares a recv its bytes
        object and the copy into the buffer: 100 MB a second each for a broadcast client's
        worker at 10,000 consumers of 10 KB (perf: memmove and page faults, 6 % of it).
        Release the view (`with`) before the next call."""
        self._compact()
        self._room = size
        buf, end = self._buffer, self._end
        if len(buf) < end + size and self._buffers is not None:
            spare = self._buffers.take()
            if spare is not None and len(spare) > len(buf):  # with what this one holds, copied
                spare[:end] = buf[:end]
                self._buffer = buf = spare
            elif spare is not None:
                self._buffers.give(spare)
        if buf is _NO_BUFFER:
            buf = self._buffer = bytearray(size)
        elif len(buf) < end + size:
            buf += bytes(end + size - len(buf))
        with memoryview(buf) as view:
            return view[end : end + size]

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` were read into the view `get_buffer` gave."""
        self._end += nbytes

    def release(self) -> None:
        """The frames of the last read are handled: lend the buffer back to the pool (if the
        decoder has one), keeping a copy of the bytes not yet consumed (a partial frame) when
        they are few. Without a pool, a buffer all consumed is let go: between its reads a
        broker connection kept the bytes of the largest it had had (a one-connection
        consumer's SUBSCRIBE and FLOW, 135 B of it, tracemalloc, broker_core.py)."""
        buf, pos, end = self._buffer, self._pos, self._end
        if self._buffers is None:
            if pos == end and buf:
                self._buffer = _NO_BUFFER
                self._pos = self._end = 0
            return
        if not buf or end - pos > _KEEP_LEFTOVER:
            return
        self._buffer = bytearray(buf[pos:end]) if end > pos else _NO_BUFFER
        self._pos, self._end = 0, end - pos
        self._buffers.give(buf)

    def _compact(self) -> None:
        """Move the bytes not yet consumed (at most a frame's worth) to the front; hand back a
        buffer a large frame grew once it is empty."""
        pos, end = self._pos, self._end
        if not pos:
            return
        buf = self._buffer
        if end > pos:
            buf[: end - pos] = buf[pos:end]
        elif len(buf) > _KEEP_BUFFER + self._room:
            self._buffer = _NO_BUFFER
        self._pos, self._end = 0, end - pos

    def set_limit(self, max_frame_size: int, server_error: int, context: str = "") -> None:
        """Bound the frames from here on (a server before its handshake takes only small ones);
        one over it is refused with `server_error`, its message ending with `context`."""
        self._max = max_frame_size
        self._oversize = server_error
        self._oversize_context = context

    @property
    def buffered(self) -> int:
        return self._end - self._pos

    def next_parts(self) -> FrameParts | None:
        """The next whole frame as (command, payload, broker_entry_metadata), or None.

        A tuple, not a Frame: the connection builds its event straight from it, so a delivery
        costs one object on its way up (this runs for every MESSAGE at 10,000s per second).
        """
        buf = self._buffer
        pos = self._pos
        size = self._end
        if size - pos < 4:
            return None
        (total,) = _U32.unpack_from(buf, pos)
        if total > self._max:
            raise RemoteProtocolError(
                f"frame of {total} bytes{self._oversize_context} exceeds the limit of {self._max}",
                self._oversize,
            )
        if total < 4:
            raise RemoteProtocolError(f"frame size {total} is too small")
        if size - pos < 4 + total:
            return None
        self._pos = pos + 4 + total
        with memoryview(buf) as view:
            parts = parse_frame_parts(view[pos + 4 : pos + 4 + total], self._last_payload)
        if parts[1] is not None:
            self._last_payload = parts[1]
        return parts

    def next_ack_run(self) -> AckRunParts | None:
        """The next frame if it is an ACK in its common shape (commands.COMMON_ACK_PATTERN),
        and every whole frame after it that acknowledges the same message the same way for
        another consumer, consumed and read without protobuf: (their consumer ids in order,
        cumulative, ledger_id, entry_id). Otherwise None, and nothing is consumed.

        A broadcast's client acknowledges an entry for all the consumers of its connection at
        once: 100 such frames in a row, which differ only in the consumer id. The first is
        matched by the pattern; the others are compared with its bytes before and after the
        id (as `next_message_run` does with MESSAGEs). With the broker applying a run at once,
        acks went from 1.22 to 0.72 µs per delivery in benchmarks/broker_core.py."""
        buf = self._buffer
        pos = self._pos
        size = self._end
        m = _COMMON_ACK_FRAME.match(buf, pos, size)
        if m is None:
            return None
        total, cmd_size, body_size, consumer_id, ack_type, id_size, ledger_id, entry_id = m.groups()
        end = m.end()
        if (
            body_size[0] != end - pos - 12
            or cmd_size[0] != body_size[0] + 4
            or total[0] != cmd_size[0] + 4
            or id_size[0] != len(ledger_id) + len(entry_id) + 2
        ):
            return None
        if end == size:  # the last frame buffered (one consumer per connection): no run after it
            self._pos = end
            return (
                [decode_varint(consumer_id)],
                ack_type[0] == _CUMULATIVE,
                decode_varint(ledger_id),
                decode_varint(entry_id),
            )
        # Frame: sizes (8 bytes), 08 0a 52 <body size> 08, the consumer id, then the tail.
        tail = bytes(buf[m.start(5) - 1 : end])
        more, self._pos = self._same_frames(
            end, tail, [None] * 10, lambda total, id_len: _ack_head(total, 1 + id_len + len(tail))
        )
        return (
            [decode_varint(consumer_id), *more],
            ack_type[0] == _CUMULATIVE,
            decode_varint(ledger_id),
            decode_varint(entry_id),
        )

    def next_type(self) -> int:
        """The command type of the next frame, from its first bytes, when they are buffered and
        in protobuf's usual order (type first, one byte); else -1. A hint for which reader to
        try first, never a ruling: the readers check the whole frame."""
        pos = self._pos
        if self._end - pos < 10 or self._buffer[pos + 8] != 0x08:
            return -1
        return self._buffer[pos + 9]

    def next_flow(self) -> tuple[int, int] | None:
        """The next frame if it is a FLOW in its common shape (flow_command_bytes: consumer_id,
        messagePermits, nothing else), consumed and read without protobuf: (consumer_id,
        permits). Otherwise None, and nothing is consumed."""
        m = self._common_flow()
        if m is None:
            return None
        self._pos = m.end()
        return decode_varint(m.group(4)), decode_varint(m.group(5))

    def next_flow_run(self) -> tuple[list[int], int] | None:
        """`next_flow`, and every whole frame after it that gives the same permits to another
        consumer, consumed: (their consumer ids in order, permits). A client gives the
        consumers it subscribed at once their first permits at once (drivers/pulsar's
        subscribe_group): compared with the first frame's bytes after the id, not parsed,
        as `next_ack_run` does."""
        m = self._common_flow()
        if m is None:
            return None
        end = m.end()
        consumer_ids = [decode_varint(m.group(4))]
        if end < self._end:
            tail = m.group(0)[m.start(5) - 1 - m.start() :]  # 0x10, then the permits
            more, end = self._same_frames(
                end, tail, [None] * 10, lambda total, id_len: _flow_head(total, id_len, tail)
            )
            consumer_ids += more
        self._pos = end
        return consumer_ids, decode_varint(m.group(5))

    def _common_flow(self) -> re.Match[bytes] | None:
        """The match of the next frame if it is a whole FLOW in its common shape."""
        pos = self._pos
        m = _COMMON_FLOW_FRAME.match(self._buffer, pos, self._end)
        if m is None:
            return None
        total, cmd_size, body_size = m.group(1, 2, 3)
        if (
            body_size[0] != m.end() - pos - 12
            or cmd_size[0] != body_size[0] + 4
            or total[0] != cmd_size[0] + 4
        ):
            return None
        return m

    def next_subscribe(
        self, head: bytes, middle: bytes, tail: bytes
    ) -> tuple[bytes, int, int, bytes | None] | None:
        """The next frame if it is a SUBSCRIBE made of `head`, a subscription, `middle`,
        consumer_id, request_id, an optional consumer_name, then `tail` (commands.
        subscribe_shape of a SUBSCRIBE protobuf read before), and nothing else: consumed and
        read without protobuf, as (the subscription's bytes, consumer_id, request_id, the
        name's bytes or None). Otherwise None, and nothing is consumed."""
        buf = self._buffer
        pos = self._pos
        size = self._end
        if size - pos < 14:
            return None
        total, cmd_size = _HEADER.unpack_from(buf, pos)
        end = pos + 4 + total
        if total != cmd_size + 4 or end > size or total > self._max:
            return None
        start = _SUBSCRIBE_START.match(buf, pos + 8, end)
        if start is None:
            return None
        at = start.end()
        if decode_varint(start.group(1)) != end - at or not buf.startswith(head, at):
            return None
        at += len(head)
        sub = _SUBSCRIPTION_SIZE.match(buf, at, end)
        if sub is None:
            return None
        at = sub.end()
        subscription = bytes(buf[at : at + decode_varint(sub.group(1))])
        at += len(subscription)
        if not buf.startswith(middle, at):
            return None
        ids = _SUBSCRIBE_IDS.match(buf, at + len(middle), end)
        if ids is None:
            return None
        consumer_id, request_id, name_size = ids.groups()
        at = ids.end()
        name = None
        if name_size is not None:
            name = bytes(buf[at : at + decode_varint(name_size)])
            at += len(name)
        if end - at != len(tail) or not buf.startswith(tail, at):
            return None
        self._pos = end
        return subscription, decode_varint(consumer_id), decode_varint(request_id), name

    def next_subscribe_run(
        self, pattern: re.Pattern[bytes], tail: bytes
    ) -> tuple[list[int], list[int], list[str | None]]:
        """The whole frames from here on that `pattern` (subscribe_run_pattern) matches up to
        the consumer name and that end with the name, valid UTF-8, then `tail`, and nothing
        else, consumed: their consumer ids, request ids and names (None: no name), in order.
        The first frame out of that shape ends the run, unconsumed.

        One match a frame, where `next_subscribe` takes three and reads the subscription: the
        frames of a run name the same one (a client subscribing its connection's consumers)."""
        buf = self._buffer
        pos = self._pos
        size = self._end
        limit = self._max
        tail_size = len(tail)
        match = pattern.match
        consumer_ids: list[int] = []
        request_ids: list[int] = []
        names: list[str | None] = []
        while (m := match(buf, pos, size)) is not None:
            total_bytes, cmd_bytes, body, consumer_id, request_id, name_size = m.groups()
            total = int.from_bytes(total_bytes)
            end = pos + 4 + total
            if (
                end > size
                or total > limit
                or int.from_bytes(cmd_bytes) != total - 4
                or _varint(body) != end - pos - 11 - len(body)
            ):
                break
            at = m.end()
            name = None
            if name_size is not None:
                name_end = at + _varint(name_size)
                if name_end > end:
                    break
                try:
                    name = buf[at:name_end].decode()
                except UnicodeDecodeError:
                    break  # protobuf's path refuses it
                at = name_end
            if end - at != tail_size or (tail_size and not buf.startswith(tail, at)):
                break
            consumer_ids.append(_varint(consumer_id))
            request_ids.append(_varint(request_id))
            names.append(name)
            pos = end
        self._pos = pos
        return consumer_ids, request_ids, names

    def next_message_run(self) -> RunParts | None:
        """The next frame if it is a MESSAGE in its common shape (commands.parse_message) with
        a payload, and every whole frame after it that carries the same entry to another
        consumer, consumed: (their consumer ids in order, the entry's parse_message, payload
        section, broker entry metadata). Otherwise None, and nothing is consumed.

        A frame is parsed only when it starts a run; the frames after it are compared with it
        instead (a broadcast entry reaches every consumer of a connection one frame after
        another), and so is the first frame of the next read, which often goes on with the
        same entry.
        """
        run = self._run
        consumer_ids: list[int] = []
        if run is not None and self._continues(run):
            consumer_ids = self._scan(run)
        if not consumer_ids:
            # Another decoder's latest entry: with one consumer per connection each socket
            # brings one frame, the same bytes on every one (a dispatch slice shares its
            # stamps), and comparing them beat parsing each (benchmarks/client_receive.py
            # --consumers 1 --connections 2000, docs/benchmarks.md).
            latest = _LATEST_RUN[0]
            if latest is not None and latest is not run and self._continues(latest):
                consumer_ids = self._scan(latest)
                if consumer_ids:
                    run = self._run = latest
        if not consumer_ids:
            run = self._start_run()
            if run is None:
                return None
            consumer_ids = [run.message[0]]
            if self._continues(run):
                consumer_ids += self._scan(run)
        assert run is not None
        stamped: list[bytes] | None = None
        if run.broker_entry_metadata is not None:
            more, stamped = self._scan_stamped(run)
            if more:
                stamped = [run.broker_entry_metadata] * len(consumer_ids) + stamped
                consumer_ids += more
            else:
                stamped = None
        return consumer_ids, run.message, run.payload, run.broker_entry_metadata, stamped

    def _scan_stamped(self, run: _Run) -> tuple[list[int], list[bytes]]:
        """Consume the frames from here on that carry `run`'s entry to another consumer with
        broker entry metadata of their own (one subscription per consumer, the Shared baseline:
        each dispatcher stamps its own dispatch time, so no two frames are alike): their
        consumer ids and metadata, in order. Compared frame by frame, not parsed."""
        buf = self._buffer
        size = self._end
        pos = self._pos
        after_id, payload = run.after_id, run.payload
        after_size, payload_size = len(after_id), len(payload)
        consumer_ids: list[int] = []
        metadatas: list[bytes] = []
        while size - pos >= 14 and buf.startswith(_MESSAGE_START, pos + 8):
            total, cmd_size = _HEADER.unpack_from(buf, pos)
            end = pos + 4 + total
            cmd_end = pos + 8 + cmd_size
            id_at = pos + 13
            id_end = cmd_end - after_size
            if (
                end > size
                or total > self._max
                or cmd_size > _MAX_COMMON_MESSAGE
                or not 0 < id_end - id_at < 10
                or buf[pos + 11] != cmd_size - 4
                or buf[pos + 12] != 0x08
                or not buf.startswith(after_id, id_end)
                or not buf.startswith(b"\x0e\x02", cmd_end)
            ):
                break
            (bem_size,) = _U32.unpack_from(buf, cmd_end + 2)
            bem_end = cmd_end + 6 + bem_size
            if end - bem_end != payload_size or not buf.startswith(payload, bem_end):
                break
            consumer_id = _whole_varint(buf, id_at, id_end)
            if consumer_id is None:
                break
            consumer_ids.append(consumer_id)
            metadatas.append(bytes(buf[cmd_end + 6 : bem_end]))
            pos = end
        self._pos = pos
        return consumer_ids, metadatas

    def _continues(self, run: _Run) -> bool:
        """Whether the next frame may be `run`'s: its size fits and its bytes after the
        consumer id start as the run's. A look at a few bytes before `_scan`, which compares
        whole frames (and with one consumer per connection, the next read is the next entry)."""
        buf, pos = self._buffer, self._pos
        if self._end - pos < 14:
            return False
        (total,) = _U32.unpack_from(buf, pos)
        id_size = total - 9 - run.rest_size
        return (
            0 < id_size < 10
            and total <= self._max  # a run of another decoder's is checked against this one's
            and buf.startswith(run.rest_head, pos + 13 + id_size)
        )

    def _start_run(self) -> _Run | None:
        """The run the next frame starts, if it is a whole MESSAGE in the common shape; that
        frame is consumed."""
        buf = self._buffer
        pos = self._pos
        size = self._end
        if size - pos < 14 or buf[pos + 8 : pos + 11] != _MESSAGE_START:
            return None
        total, cmd_size = _HEADER.unpack_from(buf, pos)
        end = pos + 4 + total
        cmd_end = pos + 8 + cmd_size
        if end > size or total > self._max or cmd_size > _MAX_COMMON_MESSAGE or cmd_end >= end:
            return None  # not whole yet, or not the common shape: next_parts rules on it
        message = parse_message(bytes(buf[pos + 8 : cmd_end]))
        if message is None:
            return None
        start = cmd_end
        bem = None
        if end - start >= 6 and buf[start] == 0x0E and buf[start + 1] == 0x02:
            (bem_size,) = _U32.unpack_from(buf, start + 2)
            if start + 6 + bem_size >= end:
                return None
            bem = bytes(buf[start + 6 : start + 6 + bem_size])
            start += 6 + bem_size
        payload = self._last_payload
        if end - start != len(payload) or not buf.startswith(payload, start):
            # The entry another decoder read (in another dispatch slice's stamps, or further
            # along a backlog), or a copy.
            payload = self._last_payload = _RECENT_PAYLOADS.shared(buf, start, end)
        after_id = cmd_end - message[6]
        run = self._run = _LATEST_RUN[0] = _Run(
            message, payload, bem, bytes(buf[after_id:start]), bytes(buf[after_id:cmd_end])
        )
        self._pos = end
        return run

    def _scan(self, run: _Run) -> list[int]:
        """Consume the frames from here on that are `run`'s. Returns their consumer ids."""
        consumer_ids, self._pos = self._same_frames(
            self._pos,
            run.rest,
            run.heads,
            lambda total, id_len: self._message_head(total, 5 + id_len + run.message[6]),
        )
        return consumer_ids

    def _same_frames(
        self,
        pos: int,
        tail: bytes,
        heads: list[bytes | None],
        head_for: Callable[[int, int], bytes],
    ) -> tuple[list[int], int]:
        """From `pos`, the whole frames that are one command to consumer after consumer (a
        broadcast's MESSAGEs of an entry, a client's ACKs of it): a head for the length of the
        consumer id (`heads`, filled by `head_for(total size, id length)`; b"" for a frame out
        of the common shape), the id as one whole varint after the frame's first 13 bytes, then
        `tail`. Returns their consumer ids and where they end; compared, not parsed."""
        buf = self._buffer
        size = self._end
        fixed = 9 + len(tail)  # a frame's total size less its consumer id
        consumer_ids: list[int] = []
        bulk = True
        while size - pos >= 14:
            (total,) = _U32.unpack_from(buf, pos)
            id_size = total - fixed
            end = pos + 4 + total
            if not 0 < id_size < 10 or end > size:
                break
            head = heads[id_size]
            if head is None:
                head = heads[id_size] = head_for(total, id_size)
            if not head:
                break
            if bulk and (count := (size - pos) // (4 + total)) >= _BULK_MIN:
                # The frames of this size from here, compared at once; then the next size.
                ids = _same_size_frames(buf, pos, count, head, id_size, tail)
                if not ids:
                    break  # the first frame is not one of them: neither would the loop take it
                consumer_ids += ids
                pos += len(ids) * (4 + total)
                bulk = len(ids) >= _BULK_MIN  # sizes that change every few frames: one by one
                continue
            id_at = pos + 13
            if not buf.startswith(head, pos) or not buf.startswith(tail, id_at + id_size):
                break
            if id_size == 1 and buf[id_at] < 0x80:
                consumer_ids.append(buf[id_at])
            elif id_size == 2 and buf[id_at] >= 0x80 and buf[id_at + 1] < 0x80:
                consumer_ids.append((buf[id_at] & 0x7F) | (buf[id_at + 1] << 7))
            else:
                consumer_id = _whole_varint(buf, id_at, id_at + id_size)
                if consumer_id is None:
                    break
                consumer_ids.append(consumer_id)
            pos = end
        return consumer_ids, pos

    def _message_head(self, total: int, command_size: int) -> bytes:
        """A MESSAGE frame's bytes before its consumer id, b"" if that frame would be out of the
        common shape (too big, or a command body size of more than one byte)."""
        if total > self._max or command_size > _MAX_COMMON_MESSAGE:
            return b""
        return _HEADER.pack(total, command_size) + _MESSAGE_START + bytes((command_size - 4, 8))

    def next_frame(self) -> Frame | None:
        parts = self.next_parts()
        return None if parts is None else Frame(*parts)

    def frames(self) -> list[Frame]:
        """All complete frames buffered now."""
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out


FrameParts = tuple[pb.BaseCommand, bytes | None, bytes | None]
RunParts = tuple[list[int], CommonMessage, bytes, bytes | None, list[bytes] | None]
"""(consumer ids, the entry's parse_message, payload section, broker entry metadata, and each
consumer's own metadata when the frames carry different ones, else None)."""
AckRunParts = tuple[list[int], bool, int, int]


def subscribe_run_pattern(head: bytes, subscription: bytes, middle: bytes) -> re.Pattern[bytes]:
    """A SUBSCRIBE frame of the shape `head`, `middle` (FrameDecoder.next_subscribe) to
    `subscription`, up to the end of its consumer name's size (FrameDecoder.next_subscribe_run):
    groups the frame's two sizes (below 64 KiB), the body size, consumer_id, request_id and
    the name's size (None without a name)."""
    return re.compile(
        rb"\x00\x00(..)\x00\x00(..)\x08\x04\x22"
        + _VARINT_63
        + re.escape(head + b"\x12" + encode_varint(len(subscription)) + subscription + middle)
        + rb"\x20"
        + _VARINT_63
        + rb"\x28"
        + _VARINT_63
        + rb"(?:\x32"
        + _VARINT_63
        + rb")?",
        re.DOTALL,
    )


def _varint(data: bytes) -> int:
    """decode_varint, a one-byte varint without its call (ids and sizes mostly are)."""
    return data[0] if len(data) == 1 else decode_varint(data)


def _flow_head(total: int, id_size: int, tail: bytes) -> bytes:
    """A common FLOW frame's bytes before its consumer id (`tail`: the permits field); b""
    past the pattern's one-byte sizes."""
    body_size = 1 + id_size + len(tail)
    if body_size > 127:
        return b""
    return _HEADER.pack(total, body_size + 4) + _FLOW_START + bytes((body_size, 8))


def _ack_head(total: int, body_size: int) -> bytes:
    """A common ACK frame's bytes before its consumer id; b"" past the pattern's one-byte body
    size."""
    if body_size > 127:
        return b""
    return _HEADER.pack(total, body_size + 4) + _ACK_START + bytes((body_size, 8))


def _same_size_frames(
    buf: bytearray, pos: int, count: int, head: bytes, id_size: int, tail: bytes
) -> list[int]:
    """The consumer ids of the frames from `pos`, up to `count` of them, that are `head`, a
    consumer id of `id_size` (1 to 9) bytes, then `tail`, as many as follow one another in that
    shape (the longest such prefix); [] when the first is not one. The buffer is left as it was.

    Checked in a few C calls instead of a loop per frame: the ids' bytes are taken out with a
    strided slice and zeroed, so the frames must then be identical; the first is compared
    with head and tail, and the others with the one before each, by one memcmp of the buffer
    against itself shifted by a frame (a bisection of such memcmps when not all of them are
    alike); then each column of id bytes is checked for a varint's continuation bits. A
    broadcast client reads 25 of its 10 KB MESSAGEs per recv; the frame loop cost 0.6 of its
    1.95 us per delivery (benchmarks/client_receive.py). Ids of three bytes and more (a client
    numbering its consumers past 16,383, as the official one does across its connections)
    were read frame by frame: 74 % of the broker's ack path in benchmarks/broker_core.py.
    """
    stride = len(head) + id_size + len(tail)
    end = pos + count * stride
    at = pos + len(head)
    columns = [buf[at + i : end : stride] for i in range(id_size)]
    zeros = bytes(count)
    for i in range(id_size):
        buf[at + i : end : stride] = zeros
    with memoryview(buf) as view:
        n = 0
        if buf.startswith(head, pos) and buf.startswith(tail, at + id_size):
            n = count
            if not buf.startswith(view[pos : end - stride], pos + stride):
                low, high = 1, count - 1  # the first `low` frames are alike, `high + 1` are not
                while low < high:
                    mid = (low + high + 1) // 2
                    if buf.startswith(view[pos : pos + (mid - 1) * stride], pos + stride):
                        low = mid
                    else:
                        high = mid - 1
                n = low
    for i, column in enumerate(columns):  # the ids back
        buf[at + i : end : stride] = column
    if n:
        # A whole varint: every byte but the last has its high bit set.
        for column in columns[:-1]:
            n = min(n, column.translate(_HIGH_BIT).find(0, 0, n) % (n + 1))
        n = min(n, columns[-1].translate(_HIGH_BIT).find(1, 0, n) % (n + 1))
    if not n:
        return []
    if id_size == 1:
        return list(columns[0][:n])
    if id_size == 2:  # a step per id is still as quick as varints_of_columns
        return [(a & 0x7F) | (b << 7) for a, b in zip(columns[0][:n], columns[1][:n], strict=True)]
    return varints_of_columns(columns, n)


def varints_of_columns(columns: list[bytearray], n: int) -> list[int]:
    """The values of `n` varints of len(columns) bytes each (1 to 9), column i holding their
    i-th bytes, each a whole varint (checked by the caller). Each column's 7-bit groups go
    into 8-byte little-endian lanes of one big int, shifted into their place in the lane
    (no lane reaches the next: 63 bits at most) and summed; the sum read back as an array is
    the values. A few C calls a column instead of a Python step per id: 0.09 us an id of
    three bytes where the step took 0.16, in runs of 100 (a client numbering its consumers
    past 16,383 across its connections, as the official one does)."""
    lanes = bytearray(8 * n)
    total = 0
    for i, column in enumerate(columns):
        lanes[0::8] = column[:n].translate(_LOW_7)
        total += int.from_bytes(lanes, "little") << (7 * i)
    values = array("Q", total.to_bytes(8 * n, "little"))
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


_LOW_7 = bytes(b & 0x7F for b in range(256))
"""A `bytes.translate` table: a varint byte's 7 bits of value."""
_HIGH_BIT = bytes(b >> 7 for b in range(256))
"""A `bytes.translate` table: 1 for a byte with its high bit set (a varint goes on), else 0."""


def _whole_varint(buf: bytearray, start: int, end: int) -> int | None:
    """The value of buf[start:end] if it is exactly one varint below 2**63, else None."""
    if not 1 <= end - start <= 9 or buf[end - 1] >= 0x80:
        return None
    value = 0
    for shift, byte in enumerate(buf[start:end]):
        if byte < 0x80 and start + shift != end - 1:
            return None
        value |= (byte & 0x7F) << (7 * shift)
    return value


def parse_frame_body(body: bytes | memoryview) -> Frame:
    """Parse a frame without its 4-byte total-size prefix."""
    return Frame(*parse_frame_parts(body))


def parse_frame_parts(body: bytes | memoryview, previous_payload: bytes = b"") -> FrameParts:
    """(command, payload section, broker entry metadata) of a frame without its size prefix.

    Slices are views until the end: the payload is copied once, into the bytes returned (a
    10 KB delivery used to be copied four times on its way through here). A payload equal to
    `previous_payload` is not copied at all: that very object is returned (a broadcast entry
    reaches every consumer of a connection as identical bytes, one frame after another, and
    receivers then recognise it by identity).
    """
    body = memoryview(body)
    (cmd_size,) = _U32.unpack_from(body, 0)
    if cmd_size > len(body) - 4:
        raise RemoteProtocolError(f"command size {cmd_size} exceeds frame size {len(body)}")
    command = pb.BaseCommand()
    try:
        # protobuf reads any buffer; the stub says bytes.
        command.ParseFromString(body[4 : 4 + cmd_size])  # type: ignore[arg-type]
    except DecodeError as exc:
        raise RemoteProtocolError(f"undecodable BaseCommand: {exc}") from exc
    start = 4 + cmd_size
    if start == len(body):
        return command, None, None
    bem = None
    if len(body) - start >= 6 and _U16.unpack_from(body, start)[0] == MAGIC_BROKER_ENTRY_METADATA:
        _, size = _BEM_HEADER.unpack_from(body, start)
        if start + 6 + size > len(body):
            raise RemoteProtocolError("broker entry metadata runs past the frame")
        bem = bytes(body[start + 6 : start + 6 + size])
        start += 6 + size
    section = body[start:]
    # startswith of equal lengths is a memcmp; memoryview's own == compares item by item.
    if len(section) == len(previous_payload) and previous_payload.startswith(section):
        return command, previous_payload, bem
    return command, bytes(section), bem


def encode_frame(
    command: pb.BaseCommand,
    payload: bytes | None = None,
    broker_entry_metadata: bytes | None = None,
) -> bytes:
    return encode_raw_frame(command.SerializeToString(), payload, broker_entry_metadata)


def encode_raw_frame(
    command_bytes: bytes,
    payload: bytes | None = None,
    broker_entry_metadata: bytes | None = None,
) -> bytes:
    """Frame an already serialized command (the dispatcher's fast path builds those by hand)."""
    if payload is None:
        return frame_head(command_bytes, broker_entry_metadata, 0)
    return frame_head(command_bytes, broker_entry_metadata, len(payload)) + payload


def frame_head(
    command_bytes: bytes, broker_entry_metadata: bytes | None, payload_size: int
) -> bytes:
    """Everything of a frame before its payload section.

    A broadcast writes `[head, payload]` per consumer, so the payload (10 KB in seed 000) is
    shared by reference instead of copied once per consumer.
    """
    bem = broker_entry_metadata_section(broker_entry_metadata)
    return frame_sizes(len(command_bytes), len(bem) + payload_size) + command_bytes + bem


def frame_sizes(command_size: int, after_command: int) -> bytes:
    """The frame's two size fields, for a command followed by `after_command` bytes."""
    return _HEADER.pack(4 + command_size + after_command, command_size)


def broker_entry_metadata_section(broker_entry_metadata: bytes | None) -> bytes:
    """`[u16 0x0e02][u32 size][BrokerEntryMetadata]`, or b"" without metadata."""
    if broker_entry_metadata is None:
        return b""
    return (
        _BEM_HEADER.pack(MAGIC_BROKER_ENTRY_METADATA, len(broker_entry_metadata))
        + broker_entry_metadata
    )
