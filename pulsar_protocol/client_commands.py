"""A client's connect storm in bulk: a group's SUBSCRIBEs and first FLOWs, queued at once.

A Locust user stands for a group of consumers (up to 100, a connection's worth), and their
SUBSCRIBEs leave together (drivers.pulsar.driver.PulsarDriver.subscribe_group). Sent one by
one through `Connection.send_subscribe` and `send(Flow(...))`, each consumer cost the codec a
state-table lookup and a frame of its own per command, and the driver a write request per
command (py-spy of benchmarks.client_connect, docs/benchmarks.md "Subscribe storm, client
side"). `ClientConnection` adds two verbs that do the same for a group: every rule the single
ones check (handshake done, ids not in use, consumer states through
pulsar_protocol.state's table), the bytes protobuf would write, byte for byte (a unit test
checks them against protobuf's encoding), one buffer queued per group.

Client side only: a server's codec never sends these, and the reading side is the base
class's, untouched.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import SubscribeTemplate, T, encode_varint
from pulsar_protocol.connection import _NEVER, Connection, _Consumer
from pulsar_protocol.errors import LocalProtocolError
from pulsar_protocol.events import Event, _NeedData
from pulsar_protocol.state import (
    CLIENT,
    CONSUMER_TRANSITIONS,
    ConnectionState,
    ConsumerState,
    Trigger,
    transition,
)

__all__ = ["ClientConnection", "GroupSubscribeTemplate", "SubscribesAnswered", "flow_frames"]

_SIZES = struct.Struct(">II")
_SUBSCRIBE_START = b"\x08\x04\x22"  # BaseCommand.type = SUBSCRIBE, then the subscribe field
_FLOW_START = b"\x08\x0b\x5a"  # BaseCommand.type = FLOW, then the flow field


class GroupSubscribeTemplate(SubscribeTemplate):
    """A SubscribeTemplate that also writes many consumers' SUBSCRIBE frames in one go."""

    __slots__ = ("_id_field",)

    def __init__(self, head: pb.CommandSubscribe, tail: pb.CommandSubscribe) -> None:
        super().__init__(head, tail)
        self._id_field = self._head + b"\x20"  # consumer_id (field 4) follows fields 1-3

    def frames(
        self, consumer_ids: Sequence[int], request_ids: Sequence[int], names: Sequence[str]
    ) -> bytes:
        """The frames of `command_bytes(consumer_ids[k], request_ids[k], names[k])` for every
        k, one after another, as one bytes."""
        id_field, tail, sizes, varint = self._id_field, self._tail, _SIZES.pack, encode_varint
        parts: list[bytes] = []
        add = parts.extend
        for consumer_id, request_id, name in zip(consumer_ids, request_ids, names, strict=True):
            encoded = name.encode()
            body = b"".join(
                (
                    id_field,
                    varint(consumer_id),
                    b"\x28",
                    varint(request_id),
                    b"\x32",
                    varint(len(encoded)),
                    encoded,
                    tail,
                )
            )
            body_size = varint(len(body))
            command_size = 3 + len(body_size) + len(body)
            add((sizes(4 + command_size, command_size), _SUBSCRIBE_START, body_size, body))
        return b"".join(parts)


def flow_frames(consumer_ids: Sequence[int], permits: int) -> bytes:
    """The FLOW frames (`flow_command_bytes(cid, permits)`, framed) of every one of
    `consumer_ids`, one after another, as one bytes."""
    tail = b"\x10" + encode_varint(permits)
    sizes, varint = _SIZES.pack, encode_varint
    parts: list[bytes] = []
    add = parts.extend
    for consumer_id in consumer_ids:
        cid = varint(consumer_id)
        body_size = 1 + len(cid) + len(tail)  # 0x08, the id, then the permits
        command_size = 4 + body_size  # the start, a one-byte body size, the body
        assert body_size < 128
        add((sizes(4 + command_size, command_size), _FLOW_START, bytes((body_size, 8)), cid, tail))
    return b"".join(parts)


_SUCCESS_FRAME = re.compile(
    rb"\x00\x00\x00[\x0a-\x0e]\x00\x00\x00[\x06-\x0a]\x08\x0d\x6a[\x02-\x06]\x08([\x80-\xff]{0,4}[\x00-\x7f])",
    re.DOTALL,
)
"""A whole SUCCESS frame in its common shape (`success_command_bytes`: a request_id of up to
five varint bytes, nothing else); the sizes are checked against the id's length."""


@dataclass(frozen=True, slots=True)
class SubscribesAnswered(Event):
    """SUCCESS answers to SUBSCRIBEs, one after another in what was read: what a `Response`
    of `command(T.SUCCESS, request_id=rid)` for each rid says, the consumers SUBSCRIBED now.
    A connect storm's answers come so, read from bytes (`ClientConnection.next_event`)."""

    request_ids: list[int]


_SUBSCRIBING = transition(CONSUMER_TRANSITIONS, None, Trigger.SUBSCRIBE_SENT, "a new consumer")
_ACTIVE = transition(
    CONSUMER_TRANSITIONS, ConsumerState.SUBSCRIBED, Trigger.FLOW_SENT, "a subscribed consumer"
)
_ANSWERED = transition(
    CONSUMER_TRANSITIONS, ConsumerState.SUBSCRIBING, Trigger.ANSWERED, "a subscribing consumer"
)


class ClientConnection(Connection):
    """A client's codec (`Connection(CLIENT, ...)`) with the connect storm's verbs in bulk."""

    __slots__ = ()

    def __init__(self, **options: object) -> None:
        super().__init__(CLIENT, **options)  # type: ignore[arg-type]

    def next_event(self) -> Event | Literal[_NeedData.NEED_DATA]:
        """As the base class's, but SUCCESS answers to SUBSCRIBEs in their common shape come
        read from bytes, all of one read's in a row as one `SubscribesAnswered`: protobuf's
        parse, the answer's checks and a `Response` each were half of reading a storm's
        answers (py-spy, benchmarks/client_connect.py). Any other frame, and a SUCCESS that is
        not the answer a SUBSCRIBING consumer waits for, takes the base class's path."""
        if self._pending and self.state is ConnectionState.CONNECTED:  # requests waiting
            answered = self._subscribes_answered()
            if answered is not None:
                return answered
        return Connection.next_event(self)  # not super(): this runs once per read

    def _subscribes_answered(self) -> SubscribesAnswered | None:
        decoder = self._decoder
        buf, pos, end = decoder._buffer, decoder._pos, decoder._end
        match = _SUCCESS_FRAME.match
        pending, consumers, subscribing = self._pending, self._consumers, _SUBSCRIBING
        request_ids: list[int] = []
        while (m := match(buf, pos, end)) is not None:
            raw = m.group(1)
            size = len(raw)
            if buf[pos + 3] != 9 + size or buf[pos + 7] != 5 + size or buf[pos + 11] != 1 + size:
                break
            request_id = 0
            for shift, byte in enumerate(raw):
                request_id |= (byte & 0x7F) << (7 * shift)
            waiting = pending.get(request_id)
            if waiting is None or waiting[0] != T.SUBSCRIBE:
                break
            consumer = consumers.get(waiting[1])
            if consumer is None or consumer.state is not subscribing:
                break
            del pending[request_id]
            consumer.state = _ANSWERED
            request_ids.append(request_id)
            pos += 13 + size
        if not request_ids:
            return None
        decoder._pos = pos
        if not pending:
            self._pending = {}  # without the table it grew (Connection._read_response)
        return SubscribesAnswered(request_ids)

    def send_subscribes(
        self,
        template: GroupSubscribeTemplate,
        consumer_ids: Sequence[int],
        request_ids: Sequence[int],
        names: Sequence[str],
    ) -> None:
        """Queue a SUBSCRIBE from `template` for each (consumer id, request id, name), as
        `send_subscribe` of each would, in one buffer. Nothing is queued or changed when one of
        them is refused (a consumer id or a request id in use): the connection is in ERROR."""
        if self.state is ConnectionState.ERROR:
            raise LocalProtocolError("cannot send: the connection is in ERROR")
        consumers, pending = self._consumers, self._pending
        try:
            if self.state is not ConnectionState.CONNECTED:
                raise LocalProtocolError(f"cannot send before the handshake ({self.state.value})")
            if len(set(request_ids)) != len(request_ids) or not pending.keys().isdisjoint(
                request_ids
            ):
                raise LocalProtocolError("a request_id is already waiting for an answer")
            if len(set(consumer_ids)) != len(consumer_ids) or not consumers.keys().isdisjoint(
                consumer_ids
            ):
                # What the table says of a SUBSCRIBE for a consumer that exists.
                for consumer_id in consumer_ids:
                    if consumer_id in consumers:
                        transition(
                            CONSUMER_TRANSITIONS,
                            consumers[consumer_id].state,
                            Trigger.SUBSCRIBE_SENT,
                            f"consumer {consumer_id}",
                        )
                raise LocalProtocolError("a consumer id appears twice in one group")
        except LocalProtocolError:
            self._set_state(ConnectionState.ERROR)
            raise
        frames = template.frames(consumer_ids, request_ids, names)
        individual = self._individual_acks
        for consumer_id, request_id in zip(consumer_ids, request_ids, strict=True):
            consumer = consumers[consumer_id] = _Consumer(consumer_id)
            consumer.state = _SUBSCRIBING
            if individual:
                consumer.individual = []
            pending[request_id] = (T.SUBSCRIBE, consumer_id)
        self._outbox().append(frames)

    def send_flows(self, consumer_ids: Sequence[int], permits: int) -> list[int]:
        """The first FLOW of each of `consumer_ids` that is SUBSCRIBED (its SUBSCRIBE answered,
        not closed meanwhile), `permits` each, as `send(Flow(cid, permits))` of each would,
        queued in one buffer; returns the consumer ids it was sent for."""
        if self.state is not ConnectionState.CONNECTED:
            raise LocalProtocolError(f"cannot send FLOW while {self.state.value}")
        if permits <= 0:
            raise LocalProtocolError(f"FLOW of {permits} permits")
        consumers, subscribed, refill = (
            self._consumers,
            ConsumerState.SUBSCRIBED,
            max(1, permits // 2),
        )
        sent = []
        for consumer_id in consumer_ids:
            consumer = consumers.get(consumer_id)
            if consumer is None or consumer.state is not subscribed:
                continue
            consumer.state = _ACTIVE
            if consumer.refill_at < _NEVER:
                # The first FLOW is the receiver queue: permits come back at half of it.
                consumer.refill_at = refill
            sent.append(consumer_id)
        if sent:
            self._outbox().append(flow_frames(sent, permits))
        return sent
