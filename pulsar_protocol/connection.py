"""One Pulsar connection, either end, without I/O: bytes in, events out; events in, bytes out.

The verbs are h11's: `receive_data(bytes)` buffers (b"" is EOF), `next_event()` returns an
event or NEED_DATA, `send(event)` queues the event's bytes, `data_to_send()` drains them. The
shells (broker/server/connection.py over asyncio, drivers/pulsar/connection.py over gevent)
only move bytes and call the application; every rule of the wire is here:

- the handshake: a server answers CONNECT itself with CONNECTED, negotiating
  min(client's version, 20); nothing but CONNECT may come first, and a client may send
  nothing but CONNECT until CONNECTED;
- keep-alive: PING is answered with PONG inside the codec, so a shell only drains bytes;
- requests: a client takes request ids from `next_request_id()` and gets each answer once,
  checked against what it asked; a server echoes ids and never keys on them (a client may
  reuse one), counting only that each answer matches an unanswered request;
- producers and consumers of a client move through pulsar_protocol.state's tables;
- permits: `acknowledge_consumed()` gives FLOW permits back at half the window, as the
  official clients do, and collects what the next `flush_acks()` acknowledges;
- SEND: a server's codec checks the checksum and metadata, and answers a bad SEND with
  SEND_ERROR itself (the connection stays).

Unknown commands: a command this codec does not know, or one that never travels in that
direction, is a RemoteProtocolError on both sides, and the connection ends. That is what
Pulsar's own clients do with a command they do not know (they close the connection), and for
a broker it is the only safe answer to a client that speaks a protocol it does not: ignoring
a command the client waits on would turn a clear error into a timeout. A server's codec queues
an ERROR command (request_id 0, the error's ServerError hint) before raising, as h2 queues
GOAWAY, so the shell drains the bytes and closes.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal, NoReturn, cast

import numpy as np

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol import requests
from pulsar_protocol.commands import (
    CLIENT_BOUND_NOTICES,
    CLIENT_BOUND_RESPONSES,
    FIELD_OF_TYPE,
    SERVER_BOUND_NOTICES,
    SERVER_BOUND_REQUESTS,
    SubscribeTemplate,
    T,
    ack_command_bytes,
    body_of,
    command,
    encode_varint,
    flow_command_bytes,
    refusal,
    subscribe_shape,
    success_frame,
    type_name,
)
from pulsar_protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from pulsar_protocol.events import (
    NEED_DATA,
    Ack,
    AckRun,
    Connect,
    Connected,
    ConnectionClosed,
    ConnectionRefused,
    ConsumerPacing,
    Event,
    Flow,
    FlowRun,
    Message,
    MessageRun,
    Notice,
    PermitsBack,
    Ping,
    Pong,
    Request,
    Response,
    Send,
    SendError,
    SendReceipt,
    _NeedData,
    run_position,
)
from pulsar_protocol.frames import (
    MAX_FRAME_SIZE,
    FrameDecoder,
    ReadBuffers,
    frame_head,
    frame_sizes,
    subscribe_run_pattern,
)
from pulsar_protocol.payload import decode_payload
from pulsar_protocol.state import (
    CLIENT,
    CONSUMER_TRANSITIONS,
    PRODUCER_TRANSITIONS,
    SERVER,
    ConnectionState,
    ConsumerState,
    ProducerState,
    Role,
    Trigger,
    connection_transition,
    transition,
)

MAX_PROTOCOL_VERSION = 20
"""The highest protocol version this codec speaks; a server answers min(client's, this)."""

_PING = frame_head(command(T.PING).SerializeToString(), None, 0)
_PONG = frame_head(command(T.PONG).SerializeToString(), None, 0)
_REQUEST_ANSWERS: dict[int, frozenset[int]] = {
    **SERVER_BOUND_REQUESTS,
    T.ACK: frozenset({T.ACK_RESPONSE}),  # only an ACK that carries a request_id waits for one
}
_CONSUMER_REQUESTS: dict[int, Trigger] = {
    T.SUBSCRIBE: Trigger.SUBSCRIBE_SENT,
    T.CLOSE_CONSUMER: Trigger.CLOSE_SENT,
}
_PRODUCER_REQUESTS: dict[int, Trigger] = {
    T.PRODUCER: Trigger.PRODUCER_SENT,
    T.CLOSE_PRODUCER: Trigger.CLOSE_SENT,
}

Reader = Callable[[Any, pb.BaseCommand, bytes | None, bytes | None], Event | None]
"""A reader of one command type: a plain function of the connection and the frame's parts."""
_READERS: dict[tuple[type, Role, ConnectionState], dict[int, Reader]] = {}
"""The readers of each (connection class, role, state), shared by every connection."""


class _Consumer:
    """A client's consumer: its state, its permit window, and what it has to acknowledge
    (serialized MessageIdData: a MessageRun carries them so, and an ACK is built of them)."""

    __slots__ = (
        "id_varint",
        "state",
        "refill_at",
        "consumed",
        "individual",
        "last",
        "ack_head",
        "ack_tail_size",
        "ack_skip_every",
        "acks_seen",
    )

    def __init__(self, consumer_id: int) -> None:
        self.id_varint = encode_varint(consumer_id)
        self.state = ConsumerState.SUBSCRIBING
        self.refill_at = 1
        self.consumed = 0
        self.individual: list[bytes] | None = None
        self.last: bytes | None = None
        self.ack_head = b""
        """An ACK frame's bytes up to the end of this consumer's id, for a tail (ack type and
        message id) of `ack_tail_size` bytes (flush_acks)."""
        self.ack_tail_size = -1
        self.ack_skip_every = 0
        """ConsumerPacing: every that-many-th id is left unacknowledged (0: none is)."""
        self.acks_seen = 0
        """Ids counted towards the next one left (ack_skip_every)."""

    def keep_ack(self, message_id: bytes) -> None:
        """`message_id` is to be acknowledged at the next flush: one more of the individual
        ids, or the latest cumulative one."""
        if self.individual is not None:
            self.individual.append(message_id)
        else:
            self.last = message_id


class _RunGroup:
    """A client connection's ACTIVE consumers in their order (as the broker dispatches a
    broadcast to them), with their permits and acks as a group's: a MessageRun to all of
    them, or to some of them one after another (a read cuts an entry's frames), is then
    acknowledged by a slice of arrays and one record, not a step per consumer, and flushed as
    one join of their ACK heads around the entry's tail. One by one, `acknowledge_run` and
    `flush_acks` took 0.3 and 0.2-0.4 us of a 1 KB broadcast delivery's 1.3-2.3 (thread CPU
    per entry, medians, benchmarks/client_receive.py, loaded machine). While a group stands
    it holds its members' permits and acks; anything else that reads or changes them first
    dissolves it (`Connection._dissolve_group`), back into the members' own fields. Consumers
    that leave holes in their acks (ack_skip_every) are never members: their acks are counted
    one by one."""

    __slots__ = ("ids", "members", "left", "by_all", "refill", "floor", "ack_runs", "heads")

    def __init__(self, consumers: dict[int, _Consumer]) -> None:
        active = ConsumerState.ACTIVE
        pairs = [
            (consumer_id, consumer)
            for consumer_id, consumer in consumers.items()
            if consumer.state is active and not consumer.ack_skip_every
        ]
        self.ids = tuple(consumer_id for consumer_id, _ in pairs)
        self.members = [consumer for _, consumer in pairs]
        self.refill = np.array([c.refill_at for c in self.members], dtype=np.int64)
        self.left = self.refill - np.array([c.consumed for c in self.members], dtype=np.int64)
        """Messages each member may still consume before its permits go back in a FLOW:
        refill_at - consumed, less `by_all`."""
        self.by_all = 0
        """Messages every member consumed (runs to all of them) not yet taken off `left`."""
        self.floor = int(self.left.min()) if self.members else 0
        """At most the least of `left`: while it is above 0 no FLOW is due, and a run needs no
        look at `left` (numpy's min was a sixth of the group's cost)."""
        self.ack_runs: list[tuple[int, int, bytes]] = []
        """(first, end, message id): members[first:end] have the message to acknowledge, in
        the order acknowledged since the last flush."""
        self.heads: dict[int, list[bytes]] = {}
        """Tail size -> each member's ACK head for a tail of that size (_Consumer.ack_head)."""

    def find(self, consumer_ids: tuple[int, ...]) -> int:
        """Where `consumer_ids` stand in the group, one after another; -1 when they do not."""
        return run_position(self.ids, consumer_ids)

    def consume(self, at: int, end: int, n: int) -> list[tuple[int, int]]:
        """members[at:end] consumed `n` messages each: the (consumer id, permits) of each FLOW
        due, in order."""
        if end - at == len(self.ids):
            self.by_all += n  # a whole broadcast: no step over `left` while no FLOW is due
        else:
            window = self.left[at:end]
            window -= n
        self.floor -= n
        if self.floor > 0:
            return []
        flows = []
        left, refill, ids = self.settled(), self.refill, self.ids
        due = cast(list[int], (np.flatnonzero(left[at:end] <= 0) + at).tolist())
        for q in due:
            flows.append((ids[q], int(refill[q] - left[q])))
            left[q] = refill[q]
        self.floor = int(left.min())  # none is 0 or less: each gave its permits back
        return flows

    def settled(self) -> np.ndarray:
        """`left` with `by_all` taken off."""
        if self.by_all:
            self.left -= self.by_all
            self.by_all = 0
        return self.left

    def dissolve(self, due: dict[int, _Consumer]) -> None:
        """Hand the members their own permits and acks back (as `Connection.acknowledge_run`
        of each would have left them; acks due join `due` in the order they came)."""
        lefts = cast(list[int], self.settled().tolist())
        refills = cast(list[int], self.refill.tolist())
        for consumer, left, refill in zip(self.members, lefts, refills, strict=True):
            consumer.consumed = refill - left
        ids, members = self.ids, self.members
        for at, end, message_id in self.ack_runs:
            for consumer_id, consumer in zip(ids[at:end], members[at:end], strict=True):
                consumer.keep_ack(message_id)
                if consumer_id not in due:
                    due[consumer_id] = consumer
        self.ack_runs = []

    def acks(self, individual: bool) -> tuple[list[bytes], int] | None:
        """The ACKs of the acks due, as `Connection.flush_acks` writes them: their parts, and
        how many; None when it takes them one by one (individual acks of members with more than
        one id each). Those due are the members from the first run's start on, in that order
        (runs cutting one entry follow one another), each with its latest id."""
        runs = self.ack_runs
        low, high = runs[0][0], runs[0][1]
        spans = [runs[0]]  # (first, end, message id): each member's latest id, in runs
        for at, end, message_id in runs[1:]:
            if at < low or at > high:
                return None  # a consumer's first ack would come out of order
            if at < high:  # a later id for some: it replaces theirs
                if individual:
                    return None
                kept = []
                for first, last, kept_id in spans:
                    if first < at:
                        kept.append((first, min(last, at), kept_id))
                    if last > end:
                        kept.append((max(first, end), last, kept_id))
                spans = sorted([*kept, (at, end, message_id)])
            else:
                spans.append((at, end, message_id))
            high = max(high, end)
        self.ack_runs = []
        ack_type = _INDIVIDUAL if individual else _CUMULATIVE
        parts: list[bytes] = []
        for at, end, message_id in spans:
            tail = b"\x10" + encode_varint(ack_type) + _ack_id(message_id)
            heads = self.heads.get(len(tail))
            if heads is None:
                heads = self.heads[len(tail)] = [
                    _ack_head_of(member, len(tail)) for member in self.members
                ]
            parts += (tail.join(heads[at:end]), tail)
        return parts, high - low


_NOT_KEPT: Any = MappingProxyType({})
"""A server's client-side tables (requests it waits for, its consumers and producers, acks
due): none is ever kept, so every server codec shares this empty one, which refuses a write
(TypeError) instead of taking it. Four empty dicts were 256 B of every broker connection, a
quarter of the codec's with one connection per consumer (tracemalloc, broker_core.py)."""


class _NoOut(list[bytes]):
    """A codec's queue while nothing is queued: one shared empty list, which refuses a write
    (TypeError) instead of taking it."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a codec queues frames through _outbox()")

    append = extend = insert = __iadd__ = __setitem__ = _refuse  # type: ignore[assignment]


_NO_OUT: list[bytes] = _NoOut()
_NONE_WAITING: Mapping[int, int] = MappingProxyType({})
"""A server's `_unanswered` while no request waits: shared, read-only."""


class _Codec:
    """What both ends of a Pulsar connection share: every method, and the state of both roles
    but the client's own (`Connection` adds those; a broker's `ServerCodec` has none)."""

    # Slotted: with a connection per consumer, the instance dict was 288 B of what each
    # connection held, client and broker alike (tracemalloc, benchmarks/broker_core.py).
    __slots__ = (
        "role",
        "state",
        "protocol_version",
        "server_version",
        "peer_supports_broker_entry_metadata",
        "_decoder",
        "_eof",
        "_out",
        "_unanswered",
        "_subscribe_shape",
        "_subscribe_misses",
        "_readers",
        "_fast_acks",
    )
    # A server's settings, slotted in `Connection`; a broker's are the same for each of its
    # connections, so they are its ServerCodec class's (`server_codec`).
    _max_message_size: int
    _authenticate: Callable[[str, bytes], str | None] | None
    """Server side: CONNECT's (auth_method_name, auth_data) → None to accept, or why not
    (an ERROR AuthenticationError instead of CONNECTED, and the connection ends)."""
    _max_frame_size: int
    _consumer_runs: bool
    """Server side: SUBSCRIBEs in a row that differ only in their ids and consumer names
    come as one requests.SubscribeRun (`_subscribe_run`), FLOWs of the same permits in a
    row as one FlowRun."""
    # The client's own, slotted in `Connection`, read-only class constants in `ServerCodec`.
    _individual_acks: bool
    _message_runs: bool
    _fast_runs: bool
    _last_request_id: int
    _pending: dict[int, tuple[int, int]]
    """request_id → (request type, consumer or producer id, or -1)."""
    _consumers: dict[int, _Consumer]
    _producers: dict[int, ProducerState]
    _acks_due: dict[int, _Consumer]
    _group: _RunGroup | None
    """The consumers acknowledged as a group (`_RunGroup`), while they are."""
    _group_wait: int

    def __init__(
        self,
        role: Role,
        *,
        server_version: str = "",
        handshake_max_frame_size: int | None = None,
        read_buffers: ReadBuffers | None = None,
    ) -> None:
        if role is SERVER and not server_version:
            raise LocalProtocolError("a server must have a server_version (clients require it)")
        if role is SERVER and self._message_runs:
            raise LocalProtocolError("only a client receives MESSAGEs")
        if role is CLIENT and self._consumer_runs:
            raise LocalProtocolError("only a server receives SUBSCRIBEs and FLOWs")
        self.role = role
        self.state = ConnectionState.IDLE
        self.protocol_version = 0
        """Negotiated in the handshake; 0 before it."""
        self.server_version = server_version
        """Ours as a server; the broker's as a client, once CONNECTED."""
        self.peer_supports_broker_entry_metadata = False
        """Server side: the client asked for BrokerEntryMetadata ahead of each payload."""
        self._decoder = FrameDecoder(self._max_frame_size, read_buffers)
        if role is SERVER and handshake_max_frame_size is not None:
            self._decoder.set_limit(
                handshake_max_frame_size, pb.NotAllowedError, " before the handshake"
            )
        self._eof = False
        self._out: list[bytes] = _NO_OUT
        """Frames queued to send: `_NO_OUT` while none is, a list of its own from the first
        (`_outbox`). The empty list kept between flushes was 56 B of every connection."""
        # Server side: request ids may repeat, so they are counted, never keyed.
        self._unanswered: Mapping[int, int] = _NONE_WAITING
        """request_id → how many requests with it wait for an answer (none: not in it);
        `_NONE_WAITING` while none waits, a dict (`_unanswered_table`) while some do."""
        self._subscribe_shape: _SubscribeShape | None = None
        """The last SUBSCRIBE protobuf read, for those that differ from it only in their ids,
        subscription and consumer name (`_next_subscribe`)."""
        self._subscribe_misses = 0
        """SUBSCRIBEs in a row not of that shape."""
        self._readers: dict[int, Reader] = {}
        self._set_state(ConnectionState.IDLE)

    # -- state -----------------------------------------------------------------------------
    def _readers_for(self, state: ConnectionState) -> dict[int, Reader]:
        """What may be received in `state`: anything else is a protocol error. The same table
        for every connection of a role and state (plain functions, called with the
        connection): a table of bound methods per connection was 1.4 KB each, for a client
        with a connection per consumer a third of what it held per consumer (tracemalloc,
        benchmarks/client_connect.py)."""
        key = (type(self), self.role, state)
        readers = _READERS.get(key)
        if readers is None:
            readers = _READERS[key] = self._build_readers(self.role, state)
        return readers

    @classmethod
    def _build_readers(cls, role: Role, state: ConnectionState) -> dict[int, Reader]:
        keep_alive: dict[int, Reader] = {T.PING: cls._read_ping, T.PONG: cls._read_pong}
        if state is ConnectionState.IDLE:
            return {T.CONNECT: cls._read_connect} if role is SERVER else {}
        if state is ConnectionState.CONNECTING:
            return {T.CONNECTED: cls._read_connected, T.ERROR: cls._read_refused, **keep_alive}
        if state is not ConnectionState.CONNECTED:
            return {}
        readers: dict[int, Reader]
        if role is SERVER:
            readers = {t: cls._read_request for t in SERVER_BOUND_REQUESTS}
            readers.update({t: cls._read_notice for t in SERVER_BOUND_NOTICES})
            readers[T.ACK] = cls._read_ack
            readers[T.SEND] = cls._read_send
            readers[T.FLOW] = cls._read_flow
        else:
            readers = {t: cls._read_response for t in CLIENT_BOUND_RESPONSES}
            readers.update({t: cls._read_notice for t in CLIENT_BOUND_NOTICES})
            readers[T.MESSAGE] = cls._read_message
            readers[T.SEND_RECEIPT] = cls._read_receipt
            readers[T.SEND_ERROR] = cls._read_send_error
        readers.update(keep_alive)
        return readers

    def _set_state(self, state: ConnectionState) -> None:
        self.state = state
        self._readers = self._readers_for(state)
        self._fast_acks = self.role is SERVER and state is ConnectionState.CONNECTED
        if self._fast_acks:
            self._decoder.set_limit(self._max_frame_size, pb.UnknownError)
        if self._message_runs:  # a client's slot; a server's is its class's False
            self._fast_runs = state is ConnectionState.CONNECTED  # type: ignore[misc]  # Connection's slot

    def _trigger(self, trigger: Trigger) -> None:
        self._set_state(connection_transition(self.role, self.state, trigger))

    def consumer_state(self, consumer_id: int) -> ConsumerState | None:
        """None for a consumer this connection does not know (or no longer: CLOSED ones go)."""
        consumer = self._consumers.get(consumer_id)
        return None if consumer is None else consumer.state

    def producer_state(self, producer_id: int) -> ProducerState | None:
        return self._producers.get(producer_id)

    def _move_consumer(self, consumer_id: int, trigger: Trigger) -> _Consumer | None:
        if self._group is not None:
            self._dissolve_group()  # a member may leave ACTIVE
        consumer = self._consumers.get(consumer_id)
        state = None if consumer is None else consumer.state
        new = transition(CONSUMER_TRANSITIONS, state, trigger, f"consumer {consumer_id}")
        if new is ConsumerState.CLOSED:
            self._consumers.pop(consumer_id, None)
            self._acks_due.pop(consumer_id, None)
            return None
        if consumer is None:
            consumer = self._consumers[consumer_id] = _Consumer(consumer_id)
            if self._individual_acks:
                consumer.individual = []
        consumer.state = new
        return consumer

    def _move_producer(self, producer_id: int, trigger: Trigger) -> None:
        state = self._producers.get(producer_id)
        new = transition(PRODUCER_TRANSITIONS, state, trigger, f"producer {producer_id}")
        if new is ProducerState.CLOSED:
            self._producers.pop(producer_id, None)
        else:
            self._producers[producer_id] = new

    # -- receiving ---------------------------------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the peer; b"" means the peer closed its end."""
        if not data:
            self._eof = True
            return
        if self._eof:
            raise LocalProtocolError("received data after the end of the stream")
        self._decoder.receive_data(data)

    def get_buffer(self, size: int) -> memoryview:
        """Room for `size` bytes to read into from the peer; then `buffer_updated(n)`. The
        same as `receive_data` of what was read, without a bytes object or its copy."""
        if self._eof:
            raise LocalProtocolError("received data after the end of the stream")
        return self._decoder.get_buffer(size)

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` were read into `get_buffer`'s view; 0 means the peer closed its end."""
        if not nbytes:
            self._eof = True
            return
        self._decoder.buffer_updated(nbytes)

    def release_buffer(self) -> None:
        """Every event of the last read has been taken: a connection given `read_buffers`
        lends its read buffer back to them until its next read (frames.ReadBuffers); one
        without lets go of a buffer whose bytes are all consumed."""
        self._decoder.release()

    def next_event(self) -> Event | Literal[_NeedData.NEED_DATA]:
        """The next event, or NEED_DATA. Raises RemoteProtocolError when the peer broke the
        protocol; the connection is then in ERROR (and a server has queued its ERROR reply)."""
        if self.state is ConnectionState.ERROR:
            raise RemoteProtocolError("the connection is in ERROR after a protocol error")
        decoder = self._decoder
        if decoder._end == decoder._pos and not self._eof:
            # Nothing buffered: what the loop below would find, without its calls (a broker
            # with a connection per consumer asks once per ACK read).
            return NEED_DATA
        try:
            readers = self._readers
            while True:
                if self._fast_acks:  # a server, connected: the frequent requests from bytes
                    kind = decoder.next_type()
                    if kind == T.ACK:
                        if (acks := decoder.next_ack_run()) is not None:
                            return AckRun(*acks)
                    elif kind == T.FLOW:
                        if not self._consumer_runs:
                            if (flow := decoder.next_flow()) is not None:
                                return _new_flow(*flow)
                        elif (flows := decoder.next_flow_run()) is not None:
                            ids, permits = flows
                            if len(ids) == 1:
                                return _new_flow(ids[0], permits)
                            return FlowRun(ids, permits)
                    elif kind == T.SUBSCRIBE and self._subscribe_shape is not None:
                        if (subscribe := self._next_subscribe()) is not None:
                            return subscribe
                if self._fast_runs and (run := decoder.next_message_run()) is not None:
                    ids, msg, payload, bem, stamped = run
                    return MessageRun(
                        tuple(ids), msg[1], msg[2], payload, bem, *msg[3:6], tuple(stamped or ())
                    )
                parts = decoder.next_parts()
                if parts is None:
                    break
                cmd = parts[0]
                # A type value outside the schema parses as "no type" (proto2 enums).
                reader = readers.get(cmd.type) if cmd.HasField("type") else None
                if reader is None:
                    self._refuse(cmd.type if cmd.HasField("type") else None)
                event = reader(self, *parts)
                if event is not None:
                    return event
                readers = self._readers  # a reader may have changed the state
        except ProtocolError as exc:
            self._error(exc)
            if isinstance(exc, LocalProtocolError):
                exc._reraise_as(RemoteProtocolError)
            raise
        if self._eof:
            if self.state is not ConnectionState.CLOSED:
                self._trigger(Trigger.PEER_CLOSED)
            return ConnectionClosed()
        return NEED_DATA

    def _refuse(self, type_: int | None) -> NoReturn:
        """The unknown-command policy (module docstring): one rule, both roles."""
        if type_ is None or type_ not in FIELD_OF_TYPE:
            name = "type" if type_ is None else type_name(type_)
            raise LocalProtocolError(f"unknown command {name}", pb.NotAllowedError)
        peer = "client" if self.role is SERVER else "server"
        raise LocalProtocolError(
            f"unexpected {type_name(type_)} from the {peer} while {self.state.value}",
            pb.NotAllowedError,
        )

    def _error(self, exc: ProtocolError) -> None:
        """Enter ERROR; a server tells the client why first (request_id 0: no request failed)."""
        if self.role is SERVER and self.state is not ConnectionState.ERROR:
            self._queue(command(T.ERROR, request_id=0, error=exc.server_error, message=str(exc)))
        self._set_state(ConnectionState.ERROR)

    def _read_ping(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> None:
        self._outbox().append(_PONG)

    def _read_pong(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> None:
        return None

    def _read_connect(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> Event:
        c = cmd.connect
        if self._authenticate is not None:
            problem = self._authenticate(c.auth_method_name, c.auth_data)
            if problem is not None:
                raise LocalProtocolError(problem, pb.AuthenticationError)
        self._trigger(Trigger.CONNECT_RECEIVED)
        self.protocol_version = min(c.protocol_version, MAX_PROTOCOL_VERSION)
        self.peer_supports_broker_entry_metadata = c.feature_flags.supports_broker_entry_metadata
        fields = {"max_message_size": self._max_message_size} if self._max_message_size else {}
        self._queue(
            command(
                T.CONNECTED,
                server_version=self.server_version,
                protocol_version=self.protocol_version,
                **fields,
            )
        )
        return Connect(
            c.client_version,
            c.protocol_version,
            c.feature_flags.supports_broker_entry_metadata,
            c.proxy_to_broker_url,
        )

    def _read_connected(
        self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None
    ) -> Event:
        c = cmd.connected
        self._trigger(Trigger.CONNECTED_RECEIVED)
        self.protocol_version = c.protocol_version
        self.server_version = c.server_version
        return Connected(c.server_version, c.protocol_version, c.max_message_size)

    def _read_refused(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> Event:
        self._trigger(Trigger.CONNECT_REFUSED)
        return ConnectionRefused(cmd.error.error, cmd.error.message)

    def _read_request(
        self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None
    ) -> Event | None:
        """The request as its typed event (pulsar_protocol.requests). One with a value the
        protocol does not allow (a name that is not UTF-8, an unknown enum) is refused here, in
        the shape its client waits for, and the connection stays."""
        request_id = body_of(cmd).request_id
        try:
            event = requests.decode(cmd)
        except LocalProtocolError as exc:
            self._queue(refusal(cmd.type, request_id, exc.server_error, str(exc)))
            return None
        unanswered = self._unanswered_table()
        unanswered[request_id] = unanswered.get(request_id, 0) + 1
        if type(event) is requests.Subscribe:
            shape = self._learn_subscribe(cmd.subscribe, event)
            if shape is not None and self._consumer_runs:
                return self._subscribe_run(event, shape)
        return event

    def _next_subscribe(self) -> requests.Subscribe | requests.SubscribeRun | None:
        """The next frame if it is a SUBSCRIBE that differs from the last one protobuf read
        only in subscription, consumer_id, request_id and consumer_name (a connect storm's):
        the event `_read_request` would give, built from the last one's fields and these four,
        without protobuf (whose field reads cost 10 us a SUBSCRIBE), or with `consumer_runs`
        the SubscribeRun it starts (`_subscribe_run`). None, and nothing
        consumed, for any other frame, and for a name that is not UTF-8 (`_read_request`
        refuses it)."""
        shape = self._subscribe_shape
        assert shape is not None
        decoder = self._decoder
        pos = decoder._pos
        read = decoder.next_subscribe(shape.head, shape.middle, shape.tail)
        if read is None:
            self._subscribe_misses += 1
            return None
        subscription_bytes, consumer_id, request_id, name_bytes = read
        subscription = shape.subscription
        name = None
        try:
            if subscription_bytes != shape.subscription_bytes:
                subscription = subscription_bytes.decode()
            if name_bytes is not None:
                name = name_bytes.decode()
        except UnicodeDecodeError:
            decoder._pos = pos  # protobuf's path refuses it
            return None
        self._subscribe_misses = 0
        unanswered = self._unanswered_table()
        unanswered[request_id] = unanswered.get(request_id, 0) + 1
        event = _parsed_subscribe(
            request_id, shape.topic, subscription, shape.sub_type, consumer_id, name, *shape.after
        )
        if self._consumer_runs and subscription is shape.subscription:
            return self._subscribe_run(event, shape)
        return event

    def _subscribe_run(
        self, event: requests.Subscribe, shape: _SubscribeShape
    ) -> requests.Subscribe | requests.SubscribeRun:
        """`event` (of `shape`, to its subscription), and the frames after it that differ from
        it only in consumer_id, request_id and consumer_name, as one SubscribeRun; `event`
        alone when none follows."""
        pattern = shape.run_pattern
        if pattern is None:
            pattern = shape.run_pattern = subscribe_run_pattern(
                shape.head, shape.subscription_bytes, shape.middle
            )
        consumer_ids, request_ids, names = self._decoder.next_subscribe_run(pattern, shape.tail)
        if not consumer_ids:
            return event
        self._subscribe_misses = 0
        unanswered = self._unanswered_table()
        for request_id in request_ids:
            unanswered[request_id] = unanswered.get(request_id, 0) + 1
        return requests.SubscribeRun(event, consumer_ids, request_ids, names)

    def _learn_subscribe(
        self, body: pb.CommandSubscribe, event: requests.Subscribe
    ) -> _SubscribeShape | None:
        """Remember the shape of a SUBSCRIBE protobuf read. After misses (SUBSCRIBEs of other
        shapes, as a pattern consumer's to each of its topics), only at the 1st, 2nd, 4th,
        8th... miss in a row: learning costs a few serializations. The shape when it is now
        `event`'s, to its subscription (a run may follow it), else None."""
        misses = self._subscribe_misses
        if self._subscribe_shape is not None and misses & (misses - 1):
            return None
        shape = self._subscribe_shape = _subscribe_shape_of(body, event)
        return shape if shape.subscription == event.subscription else None

    def _read_ack(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> Event:
        """An ACK in any shape (common ones never get here: next_ack_run reads them)."""
        ack = cmd.ack
        request_id = ack.request_id if ack.HasField("request_id") else None
        if request_id is not None:
            unanswered = self._unanswered_table()
            unanswered[request_id] = unanswered.get(request_id, 0) + 1
        return Ack(
            ack.consumer_id,
            ack.ack_type == _CUMULATIVE,
            tuple((m.ledgerId, m.entryId) for m in ack.message_id),
            request_id,
        )

    def _read_notice(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> Event:
        t = cmd.type
        if self.role is SERVER:
            # REDELIVER_UNACKNOWLEDGED_MESSAGES, typed; it changes no state of the codec.
            return requests.decode(cmd)
        if t == T.CLOSE_CONSUMER and cmd.close_consumer.consumer_id in self._consumers:
            self._move_consumer(cmd.close_consumer.consumer_id, Trigger.CLOSED_BY_PEER)
        elif t == T.CLOSE_PRODUCER and cmd.close_producer.producer_id in self._producers:
            self._move_producer(cmd.close_producer.producer_id, Trigger.CLOSED_BY_PEER)
        return Notice(cmd)

    def _read_send(
        self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None
    ) -> Event | None:
        s = cmd.send
        if payload is None:
            self._send_error(s, pb.MetadataError, "SEND without a payload")
            return None
        try:
            metadata = decode_payload(payload, verify=True).metadata
        except RemoteProtocolError as exc:
            # One bad message fails that message (the client hears it), not the connection.
            self._send_error(s, exc.server_error, str(exc))
            return None
        return Send(
            s.producer_id, s.sequence_id, payload, s.num_messages, s.highest_sequence_id, metadata
        )

    def _send_error(self, send: pb.CommandSend, error: int, message: str) -> None:
        self._queue(
            command(
                T.SEND_ERROR,
                producer_id=send.producer_id,
                sequence_id=send.sequence_id,
                error=error,
                message=message,
            )
        )

    def _read_flow(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> Event:
        return Flow(cmd.flow.consumer_id, cmd.flow.messagePermits)

    def _read_message(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> Event:
        if payload is None:
            raise LocalProtocolError("MESSAGE without a payload")
        return Message(cmd.message, payload, bem)

    def _read_receipt(self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None) -> Event:
        r = cmd.send_receipt
        return SendReceipt(
            r.producer_id,
            r.sequence_id,
            r.message_id.ledgerId,
            r.message_id.entryId,
            r.highest_sequence_id,
        )

    def _read_send_error(
        self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None
    ) -> Event:
        e = cmd.send_error
        return SendError(e.producer_id, e.sequence_id, e.error, e.message)

    def _read_response(
        self, cmd: pb.BaseCommand, payload: bytes | None, bem: bytes | None
    ) -> Event | None:
        request_id = body_of(cmd).request_id
        pending = self._pending.get(request_id)
        if pending is None:
            # An answer to a request we no longer wait for (or never made): Pulsar's clients
            # log and drop these, and so does this codec.
            return None
        request_type, object_id = pending
        refused = cmd.type == T.ERROR
        if not refused and cmd.type not in _REQUEST_ANSWERS[request_type]:
            raise LocalProtocolError(
                f"{type_name(cmd.type)} answers {type_name(request_type)} {request_id}"
            )
        if _queued_producer(cmd):
            return None  # queued for exclusive access: the ready answer follows
        waiting = self._pending
        del waiting[request_id]
        if not waiting:
            # An emptied dict keeps the table it grew; a new empty one has none (a client's
            # connection holds this one for the whole run).
            self._pending = {}  # type: ignore[misc]  # Connection's slot
        trigger = Trigger.REFUSED if refused else Trigger.ANSWERED
        if request_type == T.SUBSCRIBE and object_id in self._consumers:
            self._move_consumer(object_id, trigger)
        elif request_type == T.CLOSE_CONSUMER and object_id in self._consumers:
            self._move_consumer(object_id, Trigger.CLOSE_ANSWERED)
        elif request_type == T.PRODUCER and object_id in self._producers:
            self._move_producer(object_id, trigger)
        elif request_type == T.CLOSE_PRODUCER and object_id in self._producers:
            self._move_producer(object_id, Trigger.CLOSE_ANSWERED)
        return Response(cmd)

    # -- sending -----------------------------------------------------------------------------
    def next_request_id(self) -> int:
        """A request_id for the next Request: unique on this connection."""
        if self.role is not CLIENT:
            raise LocalProtocolError("only a client makes requests")
        self._last_request_id += 1  # type: ignore[misc]  # Connection's slot
        return self._last_request_id

    def send(self, event: Event) -> None:
        """Queue `event`'s bytes for `data_to_send()`. Misuse raises LocalProtocolError and
        puts the connection in ERROR."""
        if self.state is ConnectionState.ERROR:
            raise LocalProtocolError("cannot send: the connection is in ERROR")
        writer = self._writers.get(type(event))
        try:
            if writer is None:
                raise LocalProtocolError(f"cannot send {type(event).__name__}")
            if self.state is not ConnectionState.CONNECTED and not isinstance(event, Connect):
                raise LocalProtocolError(f"cannot send before the handshake ({self.state.value})")
            writer(self, event)
        except LocalProtocolError:
            self._set_state(ConnectionState.ERROR)
            raise

    def send_subscribe(
        self, template: SubscribeTemplate, consumer_id: int, request_id: int, consumer_name: str
    ) -> None:
        """Queue a SUBSCRIBE from `template`: what `send(Request(command))` does for the same
        command, built from bytes (a connect storm sends one per consumer)."""
        if self.state is ConnectionState.ERROR:
            raise LocalProtocolError("cannot send: the connection is in ERROR")
        try:
            if self.role is not CLIENT:
                raise LocalProtocolError(f"a {self.role.value} cannot request SUBSCRIBE")
            if self.state is not ConnectionState.CONNECTED:
                raise LocalProtocolError(f"cannot send before the handshake ({self.state.value})")
            if request_id in self._pending:
                raise LocalProtocolError(
                    f"request_id {request_id} is already waiting for an answer"
                )
            self._move_consumer(consumer_id, Trigger.SUBSCRIBE_SENT)
        except LocalProtocolError:
            self._set_state(ConnectionState.ERROR)
            raise
        self._pending[request_id] = (T.SUBSCRIBE, consumer_id)
        cmd = template.command_bytes(consumer_id, request_id, consumer_name)
        self._outbox().append(frame_sizes(len(cmd), 0) + cmd)

    def send_success(self, request_id: int) -> None:
        """Queue SUCCESS for `request_id`: what `send(Response(command(T.SUCCESS, ...)))` does,
        built from bytes (a broker answers one per consumer of a connect storm)."""
        self.send_successes((request_id,))

    def send_successes(self, request_ids: Sequence[int]) -> None:
        """`send_success` of each of `request_ids` in turn, queued as one buffer: a connect
        storm's run of SUBSCRIBEs is answered by one join, not a frame each. Those settled
        before one that cannot be are queued, as one call each would have queued them."""
        if self.state is ConnectionState.ERROR:
            raise LocalProtocolError("cannot send: the connection is in ERROR")
        settled = 0
        try:
            for request_id in request_ids:
                self._settle(T.SUCCESS, request_id)
                settled += 1
        except LocalProtocolError:
            self._set_state(ConnectionState.ERROR)
            raise
        finally:
            if settled:
                self._outbox().append(b"".join(map(success_frame, request_ids[:settled])))

    def send_frames(self, frames: list[bytes]) -> None:
        """Queue frames built elsewhere: the broker's dispatch writes MESSAGE frames as a head
        from `message_template.MessageTemplate` and the entry's payload, shared by reference
        among its consumers, which no event could do as cheaply."""
        if self.role is not SERVER or self.state is not ConnectionState.CONNECTED:
            raise LocalProtocolError(f"cannot send frames as a {self.role.value} now")
        # `_outbox` inline: once per delivery with a connection per consumer (a call more
        # showed in broker_core's Shared profile).
        out = self._out
        if out is _NO_OUT:
            self._out = frames[:]
        else:
            out += frames

    @property
    def wants_write(self) -> bool:
        """Whether `data_to_send()` has something."""
        return bool(self._out)

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, in order, as one bytes."""
        out = self._out
        if not out:
            return b""
        self._out = _NO_OUT
        return out[0] if len(out) == 1 else b"".join(out)

    def buffers_to_send(self) -> list[bytes]:
        """As `data_to_send()`, without joining (for writelines: payloads are not copied).
        When nothing is queued, the empty list is the shared `_NO_OUT`: read it, keep none."""
        out = self._out
        if out:
            self._out = _NO_OUT
        return out

    def _outbox(self) -> list[bytes]:
        """The queue to append frames to: a list of its own from the first after a flush."""
        out = self._out
        if out is _NO_OUT:
            out = self._out = []
        return out

    def _queue(
        self, cmd: pb.BaseCommand, payload: bytes | None = None, bem: bytes | None = None
    ) -> None:
        if payload is None:
            self._outbox().append(frame_head(cmd.SerializeToString(), bem, 0))
        else:
            self._outbox().extend((frame_head(cmd.SerializeToString(), bem, len(payload)), payload))

    def _write_connect(self, event: Connect) -> None:
        if self.role is not CLIENT:
            raise LocalProtocolError("the server's codec answers CONNECT itself")
        self._trigger(Trigger.CONNECT_SENT)
        fields: dict[str, str | bytes] = (
            {"proxy_to_broker_url": event.proxy_to_broker_url} if event.proxy_to_broker_url else {}
        )
        if event.auth_method_name:
            fields.update(auth_method_name=event.auth_method_name, auth_data=event.auth_data)
        self._queue(
            command(
                T.CONNECT,
                client_version=event.client_version,
                protocol_version=event.protocol_version,
                feature_flags=pb.FeatureFlags(
                    supports_broker_entry_metadata=event.supports_broker_entry_metadata
                ),
                **fields,
            )
        )

    def _write_request(self, event: Request) -> None:
        t = event.command.type
        if self.role is not CLIENT or t not in SERVER_BOUND_REQUESTS:
            raise LocalProtocolError(f"a {self.role.value} cannot request {type_name(t)}")
        self._track_request(t, event.command)
        self._queue(event.command)

    def _write_typed(self, event: Event) -> None:
        """A typed request (pulsar_protocol.requests): encoded, then sent as its command."""
        cmd = requests.encode(event)
        if cmd.type in SERVER_BOUND_NOTICES:
            self._write_notice(Notice(cmd))
        else:
            self._write_request(Request(cmd))

    def refuse(self, request: requests.ClientRequest, server_error: int, message: str) -> None:
        """Queue the refusal of `request` in the shape its client waits for (commands.refusal:
        a LOOKUP's own response marked Failed, GET_SCHEMA's error_code, otherwise ERROR)."""
        self.send(Response(refusal(request.TYPE, request.request_id, server_error, message)))

    def _track_request(self, t: int, cmd: pb.BaseCommand) -> None:
        body = body_of(cmd)
        request_id = body.request_id
        if request_id in self._pending:
            raise LocalProtocolError(f"request_id {request_id} is already waiting for an answer")
        object_id = -1
        if t in _CONSUMER_REQUESTS:
            object_id = body.consumer_id
            self._move_consumer(object_id, _CONSUMER_REQUESTS[t])
        elif t in _PRODUCER_REQUESTS:
            object_id = body.producer_id
            self._move_producer(object_id, _PRODUCER_REQUESTS[t])
        self._pending[request_id] = (t, object_id)

    def _write_response(self, event: Response) -> None:
        # WaitForExclusive: "queued" does not settle the request; the ready answer will.
        self._settle(event.command.type, event.request_id, not _queued_producer(event.command))
        self._queue(event.command)

    def _settle(self, t: int, request_id: int, settles: bool = True) -> None:
        """Check that this side may answer `request_id` with a `t` (a server, a request
        waiting), and count the answer unless it leaves the request waiting."""
        if self.role is not SERVER or t not in CLIENT_BOUND_RESPONSES:
            raise LocalProtocolError(f"a {self.role.value} cannot answer with {type_name(t)}")
        waiting = self._unanswered.get(request_id, 0)
        if waiting <= 0:
            raise LocalProtocolError(f"no request {request_id} waits for an answer")
        if settles:
            unanswered = self._unanswered_table()
            if waiting > 1:
                unanswered[request_id] = waiting - 1
            elif len(unanswered) == 1:
                # The last one answered: the shared empty table, not the dict that grew one
                # (224 B kept by every idle connection, a consumer's with one each; an empty
                # dict of its own is 64 B more).
                self._unanswered = _NONE_WAITING
            else:
                del unanswered[request_id]

    def _unanswered_table(self) -> dict[int, int]:
        """`_unanswered` to count in: a dict of this connection's own from the first request
        waiting."""
        table = self._unanswered
        if not isinstance(table, dict):
            table = self._unanswered = {}
        return table

    def _write_notice(self, event: Notice) -> None:
        t = event.command.type
        allowed = SERVER_BOUND_NOTICES if self.role is CLIENT else CLIENT_BOUND_NOTICES
        if t not in allowed:
            raise LocalProtocolError(f"a {self.role.value} cannot send {type_name(t)}")
        if self.role is CLIENT and t == T.ACK and event.command.ack.HasField("request_id"):
            self._track_request(t, event.command)
        self._queue(event.command)

    def _write_send(self, event: Send) -> None:
        if self.role is not CLIENT:
            raise LocalProtocolError("a server cannot SEND")
        self._move_producer(event.producer_id, Trigger.SEND_SENT)
        fields = {}
        if event.num_messages != 1:
            fields["num_messages"] = event.num_messages
        if event.highest_sequence_id:
            fields["highest_sequence_id"] = event.highest_sequence_id
        cmd = command(
            T.SEND, producer_id=event.producer_id, sequence_id=event.sequence_id, **fields
        )
        self._queue(cmd, event.payload)

    def _write_receipt(self, event: SendReceipt) -> None:
        if self.role is not SERVER:
            raise LocalProtocolError("a client cannot send SEND_RECEIPT")
        self._queue(
            command(
                T.SEND_RECEIPT,
                producer_id=event.producer_id,
                sequence_id=event.sequence_id,
                message_id=pb.MessageIdData(ledgerId=event.ledger_id, entryId=event.entry_id),
                highest_sequence_id=event.highest_sequence_id,
            )
        )

    def _write_send_error(self, event: SendError) -> None:
        if self.role is not SERVER:
            raise LocalProtocolError("a client cannot send SEND_ERROR")
        self._queue(
            command(
                T.SEND_ERROR,
                producer_id=event.producer_id,
                sequence_id=event.sequence_id,
                error=event.error,
                message=event.message,
            )
        )

    def _write_flow(self, event: Flow) -> None:
        if self.role is not CLIENT:
            raise LocalProtocolError("a server cannot send FLOW")
        if event.permits <= 0:
            raise LocalProtocolError(f"FLOW of {event.permits} permits")
        was = self.consumer_state(event.consumer_id)
        consumer = self._move_consumer(event.consumer_id, Trigger.FLOW_SENT)
        if consumer is not None and was is ConsumerState.SUBSCRIBED and consumer.refill_at < _NEVER:
            # The first FLOW is the receiver queue: permits come back at half of it.
            consumer.refill_at = max(1, event.permits // 2)
        flow = flow_command_bytes(event.consumer_id, event.permits)
        self._outbox().append(frame_sizes(len(flow), 0) + flow)

    def _write_pacing(self, event: ConsumerPacing) -> None:
        """ConsumerPacing: no bytes, only how the consumer's permits and acks go from now on."""
        if self.role is not CLIENT:
            raise LocalProtocolError("only a client's consumers are paced")
        if event.ack_skip_every < 0:
            raise LocalProtocolError(f"ack_skip_every of {event.ack_skip_every}")
        self._dissolve_group()
        consumer = self._consumers.get(event.consumer_id)
        if consumer is None:
            raise LocalProtocolError(f"pacing unknown consumer {event.consumer_id}")
        if event.paced:
            consumer.refill_at = _NEVER
        if event.ack_skip_every:
            consumer.ack_skip_every = event.ack_skip_every
            if consumer.individual is None:  # holes need individual acks: a cumulative one
                consumer.individual = [] if consumer.last is None else [consumer.last]
                consumer.last = None

    def _write_permits_back(self, event: PermitsBack) -> None:
        """PermitsBack: one FLOW for what a paced consumer consumed, up to `at_most`."""
        if self.role is not CLIENT:
            raise LocalProtocolError("a server cannot send FLOW")
        self._dissolve_group()
        consumer = self._consumers.get(event.consumer_id)
        if consumer is None or consumer.state is not ConsumerState.ACTIVE:
            return
        permits = min(consumer.consumed, event.at_most)
        if permits > 0:
            consumer.consumed -= permits
            flow = flow_command_bytes(event.consumer_id, permits)
            self._outbox().append(frame_sizes(len(flow), 0) + flow)

    def _write_message(self, event: Message) -> None:
        if self.role is not SERVER:
            raise LocalProtocolError("a client cannot send MESSAGE")
        if event.broker_entry_metadata is not None and not self.peer_supports_broker_entry_metadata:
            raise LocalProtocolError("the client did not ask for broker entry metadata")
        cmd = pb.BaseCommand(type=pb.BaseCommand.MESSAGE)
        cmd.message.CopyFrom(event.command)
        self._queue(cmd, event.payload, event.broker_entry_metadata)

    def _write_ping(self, event: Ping) -> None:
        self._outbox().append(_PING)

    def _write_pong(self, event: Pong) -> None:
        raise LocalProtocolError("PONG is the codec's own answer to PING")

    _writers: dict[type[Event], Callable[..., None]] = {
        Connect: _write_connect,
        Request: _write_request,
        Response: _write_response,
        Notice: _write_notice,
        Send: _write_send,
        SendReceipt: _write_receipt,
        SendError: _write_send_error,
        Flow: _write_flow,
        ConsumerPacing: _write_pacing,
        PermitsBack: _write_permits_back,
        Message: _write_message,
        Ping: _write_ping,
        Pong: _write_pong,
        **dict.fromkeys(requests.TYPED, _write_typed),
    }
    """Event type → writer, looked up, not branched (h11's _writers)."""

    # -- permits and acknowledgements (client side) -------------------------------------------
    def acknowledge_consumed(
        self, consumer_id: int, n: int, message_id: pb.MessageIdData | None = None
    ) -> None:
        """`n` messages of `consumer_id` were handed to the application: once half the first
        FLOW's permits are consumed, they go back in one FLOW (queued here, as h2's
        WindowManager decides on WINDOW_UPDATE). With `message_id`, that message is also
        acknowledged by the next `flush_acks()`. A consumer that is not ACTIVE any more is left
        alone."""
        # Partial: a broker's MESSAGE may lack a required field, and the ack carries what it sent.
        serialized = None if message_id is None else message_id.SerializePartialToString()
        self.acknowledge_run((consumer_id,), n, serialized)

    def acknowledge_run(
        self, consumer_ids: Iterable[int], n: int, message_id: bytes | None = None
    ) -> None:
        """`acknowledge_consumed` for each of `consumer_ids`, with the serialized MessageIdData
        of one message (a MessageRun's `message_id`). A run of the connection's consumers one
        after another (a broadcast's) is counted as their group's (`_RunGroup`)."""
        group = self._group
        if type(consumer_ids) is tuple and consumer_ids:
            if group is None and len(consumer_ids) >= _GROUP_MIN:
                if self._group_wait:
                    self._group_wait -= 1  # type: ignore[misc]  # Connection's slot
                else:
                    group = self._group = _RunGroup(self._consumers)  # type: ignore[misc]
            if group is not None:
                at = group.find(consumer_ids)
                if at >= 0 and (message_id is None or not self._acks_due):
                    end = at + len(consumer_ids)
                    for consumer_id, permits in group.consume(at, end, n):
                        flow = flow_command_bytes(consumer_id, permits)
                        self._outbox().append(frame_sizes(len(flow), 0) + flow)
                    if message_id is not None:
                        group.ack_runs.append((at, end, message_id))
                    return
                self._dissolve_group()
                if at < 0:
                    # Not the group's order: not made again at once.
                    self._group_wait = _GROUP_WAIT  # type: ignore[misc]  # Connection's slot
        elif group is not None:
            self._dissolve_group()
        consumers, due, active = self._consumers, self._acks_due, ConsumerState.ACTIVE
        for consumer_id in consumer_ids:
            consumer = consumers.get(consumer_id)
            if consumer is None or consumer.state is not active:
                continue
            if message_id is not None:
                consumer.keep_ack(message_id)
                if consumer_id not in due:
                    due[consumer_id] = consumer
            consumer.consumed += n
            if consumer.consumed >= consumer.refill_at:
                permits, consumer.consumed = consumer.consumed, 0
                flow = flow_command_bytes(consumer_id, permits)
                self._outbox().append(frame_sizes(len(flow), 0) + flow)

    def _dissolve_group(self) -> None:
        """The group's members get their permits and acks back, one by one (`_RunGroup`)."""
        group = self._group
        if group is not None:
            self._group = None  # type: ignore[misc]  # Connection's slot
            group.dissolve(self._acks_due)

    @property
    def acks_due(self) -> bool:
        """Whether `flush_acks()` has something to send."""
        group = self._group
        return bool(self._acks_due) or (group is not None and bool(group.ack_runs))

    def flush_acks(self) -> int:
        """Queue one ACK per consumer with acknowledgements due: cumulative (the latest id) or
        individual (every id since the last flush, in one command). Returns how many.

        The ACKs are protobuf's encoding byte for byte, built from bytes and queued as one
        buffer: a broadcast connection acknowledges one entry for all its consumers at every
        flush, so such an ACK is the consumer's head (sizes, type and its id, kept while the
        tail's length holds) then the tail, which is the entry's. A group's acks
        (`_RunGroup.acks`) are one join of their heads per entry."""
        group = self._group
        if group is not None and group.ack_runs:
            acks = group.acks(self._individual_acks)
            if acks is not None:
                self._outbox().append(b"".join(acks[0]))
                return acks[1]
            self._dissolve_group()
        due, self._acks_due = self._acks_due, {}  # type: ignore[misc]  # Connection's slot
        parts: list[bytes] = []
        count = 0
        tail_id: bytes | None = None
        tail_type = -1
        tail = b""
        for consumer_id, consumer in due.items():
            if consumer.individual is not None:
                ids, consumer.individual = consumer.individual, []
                if consumer.ack_skip_every:
                    ids = _leave_holes(consumer, ids)
                if len(ids) != 1:
                    if ids:
                        ack = ack_command_bytes(consumer_id, _INDIVIDUAL, ids)
                        parts.append(frame_head(ack, None, 0))
                        count += 1
                    continue
                message_id, ack_type = ids[0], _INDIVIDUAL
            elif consumer.last is not None:
                message_id, ack_type = consumer.last, _CUMULATIVE
                consumer.last = None
            else:
                continue
            if (message_id is not tail_id and message_id != tail_id) or ack_type != tail_type:
                tail = b"\x10" + encode_varint(ack_type) + _ack_id(message_id)
                tail_id, tail_type = message_id, ack_type
            head = consumer.ack_head
            if consumer.ack_tail_size != len(tail):
                head = _ack_head_of(consumer, len(tail))
            parts += (head, tail)
            count += 1
        if parts:
            self._outbox().append(b"".join(parts))
        return count


_SUBSCRIBE_FIELDS = [f.name for f in dataclasses.fields(requests.Subscribe)]
assert _SUBSCRIBE_FIELDS[:6] == [
    "request_id",
    "topic",
    "subscription",
    "sub_type",
    "consumer_id",
    "consumer_name",
], "_next_subscribe builds a Subscribe in this order"
_parsed_subscribe = requests._parsed_subscribe


_set_flow_consumer: Callable[[Flow, int], None] = getattr(Flow, "consumer_id").__set__  # noqa: B009
_set_flow_permits: Callable[[Flow, int], None] = getattr(Flow, "permits").__set__  # noqa: B009


def _new_flow(consumer_id: int, permits: int) -> Flow:
    """Flow(consumer_id, permits) through its slots, as requests' `_parsed` builds a Subscribe
    (h11's `_parsed`: the codec read the values itself): half the frozen dataclass's
    `__init__`, once per consumer of a connect storm."""
    flow: Flow = object.__new__(Flow)
    _set_flow_consumer(flow, consumer_id)
    _set_flow_permits(flow, permits)
    return flow


class Connection(_Codec):
    """One end of a Pulsar connection.

    `max_frame_size` bounds incoming frames (checked from the size prefix alone); a SERVER
    given `handshake_max_frame_size` takes only frames that small until CONNECT (a peer that
    has not said who it is must not make it buffer megabytes). A SERVER needs
    `server_version` and may announce `max_message_size` and check CONNECT's credentials
    (`authenticate`); a CLIENT chooses with
    `individual_acks` whether `flush_acks()` acknowledges every id or the latest only, and
    with `message_runs` whether MESSAGEs in their common shape come as `MessageRun` events
    (read from bytes, a run of one entry's deliveries at a time) instead of one `Message` each;
    a SERVER chooses with `consumer_runs` whether SUBSCRIBEs in a row that differ only in their
    ids and consumer names come as one `requests.SubscribeRun`, and FLOWs in a row that give
    the same permits as one `FlowRun`.
    Connections given one `read_buffers` share their read buffers (`release_buffer`).
    """

    __slots__ = (
        "_max_message_size",
        "_authenticate",
        "_max_frame_size",
        "_consumer_runs",
        "_individual_acks",
        "_message_runs",
        "_fast_runs",
        "_last_request_id",
        "_pending",
        "_consumers",
        "_producers",
        "_acks_due",
        "_group",
        "_group_wait",
    )

    def __init__(
        self,
        role: Role,
        *,
        max_frame_size: int = MAX_FRAME_SIZE,
        handshake_max_frame_size: int | None = None,
        server_version: str = "",
        max_message_size: int = 0,
        individual_acks: bool = False,
        message_runs: bool = False,
        consumer_runs: bool = False,
        authenticate: Callable[[str, bytes], str | None] | None = None,
        read_buffers: ReadBuffers | None = None,
    ) -> None:
        self._max_message_size = max_message_size
        self._authenticate = authenticate
        self._max_frame_size = max_frame_size
        self._consumer_runs = consumer_runs
        self._individual_acks = individual_acks
        self._message_runs = message_runs
        self._fast_runs = False
        # Client side; a server's are the one read-only empty table (`_NOT_KEPT`).
        client = role is CLIENT
        self._last_request_id = 0
        self._pending = {} if client else _NOT_KEPT
        self._consumers = {} if client else _NOT_KEPT
        self._producers = {} if client else _NOT_KEPT
        self._acks_due = {} if client else _NOT_KEPT
        self._group = None
        self._group_wait = 0
        super().__init__(
            role,
            server_version=server_version,
            handshake_max_frame_size=handshake_max_frame_size,
            read_buffers=read_buffers,
        )


class ServerCodec(_Codec):
    """A broker's end: `Connection(SERVER, ...)` without the client's slots, whose values
    are its class's here (no request of its own, the one read-only empty table for the
    client's tables, no MESSAGE runs), nor slots for the broker's settings, which are the
    class's too: `server_codec(...)` makes the class of a broker's settings. With a connection
    per consumer they were 96 B of every broker connection (issue 40)."""

    __slots__ = ()
    _individual_acks = False
    _message_runs = False
    _fast_runs = False
    _last_request_id = 0
    _pending = _consumers = _producers = _acks_due = _NOT_KEPT
    _group = None
    _group_wait = 0
    _version = ""
    """The broker's server_version (the instance's slot, as a client's, is set from it)."""
    _max_message_size = 0
    _authenticate: Callable[[str, bytes], str | None] | None = None
    _max_frame_size = MAX_FRAME_SIZE
    _consumer_runs = False

    def __init__(
        self,
        *,
        handshake_max_frame_size: int | None = None,
        read_buffers: ReadBuffers | None = None,
    ) -> None:
        super().__init__(
            SERVER,
            server_version=self._version,
            handshake_max_frame_size=handshake_max_frame_size,
            read_buffers=read_buffers,
        )


@functools.lru_cache(maxsize=64)
def server_codec(
    server_version: str,
    *,
    max_frame_size: int = MAX_FRAME_SIZE,
    max_message_size: int = 0,
    consumer_runs: bool = False,
    authenticate: Callable[[str, bytes], str | None] | None = None,
) -> type[ServerCodec]:
    """The ServerCodec class of a broker's settings (those of `Connection(SERVER, ...)`): made
    once for them, each of the broker's connections one of its instances."""
    if not server_version:
        raise LocalProtocolError("a server must have a server_version (clients require it)")
    settings = {
        "__slots__": (),
        "_version": server_version,
        "_max_message_size": max_message_size,
        "_authenticate": staticmethod(authenticate) if authenticate is not None else None,
        "_max_frame_size": max_frame_size,
        "_consumer_runs": consumer_runs,
    }
    return cast(type[ServerCodec], type("ServerCodec", (ServerCodec,), settings))


class _SubscribeShape:
    """A SUBSCRIBE read by protobuf, as the bytes and values those that differ from it only in
    subscription, consumer_id, request_id and consumer_name share: its serialized fields
    around them (commands.subscribe_shape) and its event's other fields."""

    __slots__ = (
        "head",
        "middle",
        "tail",
        "topic",
        "subscription",
        "subscription_bytes",
        "sub_type",
        "after",
        "run_pattern",
    )

    def __init__(self, serialized: tuple[bytes, bytes, bytes], event: requests.Subscribe) -> None:
        self.head, self.middle, self.tail = serialized
        self.topic = event.topic
        self.subscription = event.subscription
        """The same str object for every SUBSCRIBE to that subscription (one per consumer
        otherwise, held by each)."""
        self.subscription_bytes = event.subscription.encode()
        self.sub_type = event.sub_type
        self.after = tuple(getattr(event, name) for name in _SUBSCRIBE_FIELDS[6:])
        self.run_pattern: re.Pattern[bytes] | None = None
        """frames.subscribe_run_pattern of the shape, made at its first run."""


_SHAPES: dict[tuple[bytes, bytes, bytes], _SubscribeShape] = {}
"""The shapes learned, shared by every connection of the process: one per connection held the
same values 10,000 times over at a million consumers (8 MiB)."""
_MAX_SHAPES = 256


def _subscribe_shape_of(body: pb.CommandSubscribe, event: requests.Subscribe) -> _SubscribeShape:
    """The shape of a SUBSCRIBE protobuf read, the one already known when another had it."""
    serialized = subscribe_shape(body)
    shape = _SHAPES.get(serialized)
    if shape is None:
        if len(_SHAPES) >= _MAX_SHAPES:
            _SHAPES.clear()
        shape = _SHAPES[serialized] = _SubscribeShape(serialized, event)
    return shape


def _queued_producer(cmd: pb.BaseCommand) -> bool:
    """A PRODUCER_SUCCESS saying the producer waits for exclusive access (WaitForExclusive):
    an interim answer, the one with producer_ready (true by default) settles the request."""
    return (
        cmd.type == T.PRODUCER_SUCCESS
        and cmd.producer_success.HasField("producer_ready")
        and not cmd.producer_success.producer_ready
    )


_NEVER = 1 << 62
"""A paced consumer's refill_at: its consumption never gives permits back by itself."""


def _leave_holes(consumer: _Consumer, ids: list[bytes]) -> list[bytes]:
    """`ids` less every `ack_skip_every`-th one counted over the consumer's life."""
    every, seen = consumer.ack_skip_every, consumer.acks_seen
    consumer.acks_seen = (seen + len(ids)) % every
    return [m for k, m in enumerate(ids, seen + 1) if k % every]


def _ack_head_of(consumer: _Consumer, tail_size: int) -> bytes:
    """An ACK frame of `consumer` up to the end of its id, for a tail (ack type and message
    id) of `tail_size` bytes; kept by the consumer while its tails keep that size."""
    if consumer.ack_tail_size != tail_size:
        id_varint = consumer.id_varint
        body_size = 1 + len(id_varint) + tail_size
        consumer.ack_head = (
            frame_sizes(3 + len(encode_varint(body_size)) + body_size, 0)
            + b"\x08\x0a\x52"
            + encode_varint(body_size)
            + b"\x08"
            + id_varint
        )
        consumer.ack_tail_size = tail_size
    return consumer.ack_head


_GROUP_MIN = 8
"""Runs of this many consumers and more make their connection's group (`_RunGroup`): its
numpy steps cost more than a loop over a few consumers. Once made, it takes shorter ones too
(the last frames of an entry cut by a read)."""
_GROUP_WAIT = 64
"""Runs taken one consumer at a time after one that was not in the group's order, before
the group is made again (a connection whose runs never are would otherwise make and dissolve
it at each)."""


def _ack_id(message_id: bytes) -> bytes:
    """CommandAck.message_id (field 3) carrying one serialized MessageIdData."""
    return b"\x1a" + encode_varint(len(message_id)) + message_id


_INDIVIDUAL = pb.CommandAck.Individual
_CUMULATIVE = pb.CommandAck.Cumulative
