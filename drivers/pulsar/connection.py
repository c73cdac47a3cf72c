"""One TCP connection to the broker under gevent: a thin shell over pulsar_protocol.

The codec (pulsar_protocol.connection.Connection) holds every rule of the wire: handshake,
PING/PONG, request ids and their answers, consumer and producer states, permits and acks.
This shell reads the socket, feeds the codec, hands each event to its handler, and writes
what the codec queued. No greenlet reads it: the process's receive engine
(drivers.net.reactor) calls `on_readable` when the socket has bytes, and the connection reads
once, without blocking, with one clock read per recv and, on Linux, the kernel's receive time
of those bytes (drivers.net.rx_timestamps), so a busy reader shows as client delay, not as
broker latency. With one connection per consumer, a greenlet woken per socket per message was
most of the client's cost (docs/benchmarks.md, "The receive engine").

Consecutive deliveries of one entry in a read (a broadcast reaches every consumer of the
connection with identical bytes) come from the codec as one MessageRun (read from bytes,
without protobuf) and are acknowledged in one `acknowledge_run`. Every delivery then goes to
the pass's `Deliveries` (drivers.net.deliveries, one per pool), which gathers them by message
across frames, subscriptions and sockets and hands each message to the harness once at the end
of the pass, so it parses and records each distinct message once, with counts.

Writes from many greenlets (subscribers, a producer, the ack flusher, the reader's FLOWs and
PONGs) drain the codec under one lock, so frames never interleave and leave in the order the
codec queued them. The engine and the ack flusher never wait for a socket: what the kernel does
not take at once is left to the connection's writer greenlet.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Protocol, TypeVar

import gevent
from gevent import socket
from gevent.event import AsyncResult, Event
from gevent.hub import get_hub
from gevent.lock import Semaphore
from gevent.pool import Group

from drivers.base import ConsumerCallback, ConsumerSpec, DriverError
from drivers.net import rx_timestamps
from drivers.net.deliveries import Deliveries, deliveries_for
from drivers.net.reactor import Reactor, reactor
from drivers.net.sockets import connect_socket, send_now
from drivers.net.tls import EncryptingWire, PlainSource, TlsChannel, TlsFailure
from drivers.pulsar.ack_flusher import AckFlusher
from drivers.pulsar.consumer import Consumers, ConsumerState, subscribe_template
from drivers.pulsar.deadlines import Deadlines
from drivers.pulsar.delivery import DeliveryDecoder
from drivers.pulsar.lookup import Route
from drivers.pulsar.settings import Settings
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.client_commands import (
    ClientConnection,
    GroupSubscribeTemplate,
    SubscribesAnswered,
)
from pulsar_protocol.commands import T, command
from pulsar_protocol.connection import MAX_PROTOCOL_VERSION
from pulsar_protocol.errors import LocalProtocolError, RemoteProtocolError
from pulsar_protocol.events import NEED_DATA, Message, MessageRun
from pulsar_protocol.extensions import now_us
from pulsar_protocol.frames import ReadBuffers
from pulsar_protocol.state import ConsumerState as WireState

__all__ = [
    "Connection",
    "RequestFailed",
    "RequestTimeout",
    "TlsConnection",
    "connect_socket",
    "now_us",
    "tls_refusal",
]

log = logging.getLogger("drivers.pulsar")

RECV_SIZE = 1024 * 1024
"""The most bytes asked of one recv. A read's own cost (the syscall, a turn of the loop, the
codec's and the recorder's setup) is shared by the deliveries it brings: a broadcast client's
10 KB MESSAGEs cost 3.06 µs each in reads of 64 KB, 1.71 in 256 KB and 1.37 in 1 MB
(benchmarks/client_receive.py), a connection of 100 consumers getting 1 MB per entry; at
10,000 consumers the workers' CPU per delivery fell from 4.4-5.0 to 3.7-4.1 µs (harness-cost
runs, docs/benchmarks.md). The kernel gives one receive time per read, that of its last
bytes, so bigger reads can only make a delivery's time at the kernel later, never earlier."""
RECV_START = 64 * 1024
"""A connection's first reads ask this much, doubling after each read that fills it up to
RECV_SIZE: a connect storm's reads are answers of a few bytes, and 1,000 buffers of 1 MB,
zeroed as they grow, cost the storm 5 % of its CPU (py-spy, benchmarks/client_connect.py)."""

READ_BUFFERS = ReadBuffers()
"""The read buffers of every connection of the process, lent for a read at a time: the
receive engine reads one socket after another (pulsar_protocol.frames.ReadBuffers)."""

CLIENT_VERSION = "fanout-bench"
PROTOCOL_VERSION = MAX_PROTOCOL_VERSION


class RequestFailed(DriverError):
    """A request was refused, never answered, or its connection failed.

    str() is what the harness records for a failed subscribe ("timeout", "ConsumerBusy: ...",
    "cannot connect to host:port: Connection refused"), so it names no consumer.
    """


_K = TypeVar("_K")
_V = TypeVar("_V")


def asked_once(known: dict[_K, AsyncResult[_V] | _V], key: _K, ask: Callable[[], _V]) -> _V:
    """`known[key]`, asked by `ask` the first time. Callers meanwhile wait for that answer and
    share its failure (a RequestFailed for anything not a DriverError), after which nothing is
    kept; once answered, the answer itself is kept, not its AsyncResult (160-200 bytes of
    every connection and topic: the partition counts and the owners' routes)."""
    if key in known:
        found = known[key]
        if not isinstance(found, AsyncResult):
            return found
        value = found.get()
        assert value is not None
        return value
    pending: AsyncResult[_V] = AsyncResult()
    known[key] = pending
    try:
        value = ask()
    except BaseException as exc:
        del known[key]
        pending.set_exception(
            exc if isinstance(exc, DriverError) else RequestFailed("lookup interrupted")
        )
        raise
    known[key] = value
    pending.set(value)
    return value


class RequestTimeout(RequestFailed):
    """No answer within operationTimeoutSeconds."""

    def __init__(self) -> None:
        super().__init__("timeout")


class ProducerLink(Protocol):
    """What the reader needs of a producer on its connection."""

    def on_receipt(self, sequence_id: int) -> None: ...

    def on_send_error(self, sequence_id: int, error: str) -> None: ...

    def connection_lost(self, error: DriverError) -> None: ...


def server_error_text(code: int, message: str) -> str:
    try:
        name = pb.ServerError.Name(pb.ServerError.ValueType(code))
    except ValueError:
        name = f"ServerError {code}"
    return f"{name}: {message}"


def _refused(result: AsyncResult[tuple[pb.BaseCommand, int]]) -> bool:
    """Whether a request settled leaving nothing on the broker: ERROR, or a lost connection
    (not a timeout: the broker may still answer SUCCESS)."""
    if not result.ready():
        return False
    if not result.successful():
        return not isinstance(result.exception, RequestTimeout)
    answer = result.value
    return answer is None or answer[0].type == T.ERROR


SentSubscribe = tuple[int, int, "AsyncResult[tuple[pb.BaseCommand, int]]"]
"""A SUBSCRIBE on its way: (consumer id, request id, the answer to come)."""


class GroupAnswers:
    """The answers to a group's SUBSCRIBEs (Connection.subscribe_group), settled by the reader
    one at a time: one object and one wake-up per group, where an AsyncResult, a deadline and
    a wake-up per consumer were a fifth of the client's CPU per consumer subscribed (py-spy,
    benchmarks/client_connect.py). An outcome is the wire time (µs) of the SUCCESS, or the
    RequestFailed it ended with (an ERROR answer, a timeout, a lost connection)."""

    __slots__ = ("_positions", "outcomes", "_done")

    def __init__(self, request_ids: list[int]) -> None:
        self._positions = dict(zip(request_ids, range(len(request_ids)), strict=True))
        self.outcomes: list[int | RequestFailed] = [0] * len(request_ids)
        self._done = Event()
        if not request_ids:
            self._done.set()

    def answer(self, request_id: int, answer: pb.BaseCommand, receive_us: int) -> bool:
        """Settle `request_id` if it is one of this group's; whether it was."""
        position = self._positions.pop(request_id, None)
        if position is None:
            return False
        if answer.type == T.ERROR:
            error = answer.error
            self.outcomes[position] = RequestFailed(server_error_text(error.error, error.message))
        else:
            self.outcomes[position] = receive_us
        if not self._positions:
            self._done.set()
        return True

    def succeeded(self, request_ids: list[int], receive_us: int) -> list[int]:
        """`answer` of a SUCCESS to each of `request_ids` (SubscribesAnswered); returns those
        that are not this group's."""
        positions, outcomes = self._positions, self.outcomes
        others = []
        for request_id in request_ids:
            position = positions.pop(request_id, None)
            if position is None:
                others.append(request_id)
            else:
                outcomes[position] = receive_us
        if not positions:
            self._done.set()
        return others

    def fail(self, error: RequestFailed) -> None:
        """Every request not answered yet ends with `error`."""
        for position in self._positions.values():
            self.outcomes[position] = error
        self._positions.clear()
        self._done.set()

    def ready(self) -> bool:
        """Whether every request has its outcome (drivers.pulsar.deadlines)."""
        return not self._positions

    def wait(self) -> None:
        self._done.wait()


_OPENED: AsyncResult[None] = AsyncResult()
"""A connection's handshake outcome once it succeeded: one settled result shared by every
open connection (an AsyncResult of each held 160 bytes of it for the whole run)."""
_OPENED.set(None)


class Connection:
    # Slots: 40 attributes in an instance dict (past CPython's shared keys) were 1.6 KB of
    # each connection, a fifth of a worker's memory per consumer with one connection each
    # (tracemalloc, benchmarks/client_connect.py).
    __slots__ = (
        "id",
        "route",
        "error",
        "consumers",
        "carries_consumers",
        "producers",
        "kernel_timestamps",
        "_settings",
        "_group",
        "_on_closed",
        "_on_consumers_lost",
        "_sock",
        "_said_unstamped",
        "_kernel_us",
        "_recv_size",
        "_raw",
        "_unsent",
        "_reactor",
        "_fd",
        "_stamping",
        "_write_lock",
        "_write_watcher",
        "_protocol",
        "_wire",
        "_decoder",
        "_deliveries",
        "_ready",
        "_waiting",
        "_groups",
        "_own_deadlines",
        "_deadlines",
        "_opening",
        "_write_wanted",
        "_writer",
        "_last_object_id",
        "_partition_counts",
        "_own_acks",
        "_acks",
    )

    def __init__(
        self,
        conn_id: int,
        settings: Settings,
        callback: ConsumerCallback,
        group: Group,
        on_closed: Callable[[Connection], None] = lambda conn: None,
        route: Route | None = None,
        on_consumers_lost: Callable[[list[ConsumerState]], None] = lambda states: None,
        acks: AckFlusher | None = None,
        deliveries: Deliveries | None = None,
        decoder: DeliveryDecoder | None = None,
        engine: Reactor | None = None,
        deadlines: Deadlines | None = None,
    ) -> None:
        """`acks` flushes the grouped acks of this connection with those of its pool's others,
        `decoder` decodes each distinct message once for all of them (one of its own when
        None); `deliveries` gathers its deliveries (the process's for `callback` when None);
        `engine` reads it (the process's receive engine when None)."""
        self.id = conn_id
        self.route = route or Route.service(settings)
        self.error: str | None = None
        """Why the connection is closed; None while it is open (or opening)."""
        self.consumers = Consumers()
        """Consumers whose SUBSCRIBE succeeded, by consumer_id: the ones deliveries go to."""
        self.carries_consumers = False
        """Set by the pool when it puts consumers here (drivers.net.reactor.hold_consumers)."""
        self.producers: dict[int, ProducerLink] = {}
        self._settings = settings
        self._group = group
        self._on_closed = on_closed
        self._on_consumers_lost = on_consumers_lost
        self._sock: Any = None
        """The OS socket `_flush` writes to (non-blocking); gevent's wrapper is let go once
        connected: its two watchers, made for every socket whether it ever waits or not, and
        the wrapper were 0.4 KB of each connection (tracemalloc, benchmarks/client_connect.py)."""
        self.kernel_timestamps = False
        """Whether the socket has kernel receive times (SO_TIMESTAMPING) and its latest read
        carried one. A read without one hands its deliveries kernel_us 0 (read time only)."""
        self._said_unstamped = False
        self._kernel_us = 0
        """The kernel receive time of the read being handled (0: unknown)."""
        self._recv_size = RECV_START
        self._raw: Any = None
        """The OS socket under gevent's wrapper (non-blocking): what the engine reads and the
        flushes that must not wait write."""
        self._unsent = b""
        """Bytes a flush that must not wait left behind: they leave first at the next flush."""
        self._reactor = engine or reactor()
        self._fd = -1
        self._stamping = False
        """Whether reads ask for the kernel's receive time (SO_TIMESTAMPING is on)."""
        self._write_lock: Semaphore | None = None
        """Made by the first write that has to wait for room (`_flush`)."""
        self._write_watcher: Any = None
        """The watcher a write waits on for room in the socket, while one waits (`_fail`
        cancels it)."""
        self._protocol = ClientConnection(
            individual_acks=settings.consumer.ack_mode == "individual",
            message_runs=True,
            read_buffers=READ_BUFFERS,
        )
        self._wire: PlainSource = self._protocol
        """Where the bytes to write come from: the codec, or (TlsConnection) the codec
        through TLS."""
        self._decoder = decoder or DeliveryDecoder(settings.consumer.verify_checksum)
        self._deliveries = deliveries or deliveries_for(callback)
        self._ready: AsyncResult[None] = AsyncResult()
        self._waiting: dict[int, AsyncResult[tuple[pb.BaseCommand, int]]] = {}
        """request_id → the greenlet's result waiting for its answer."""
        self._groups: list[GroupAnswers] = []
        """Groups of SUBSCRIBEs waiting for answers (subscribe_group)."""
        self._own_deadlines = deadlines is None
        self._deadlines = deadlines or Deadlines(group)
        """Times out the requests unanswered after operationTimeoutSeconds: the pool's, for
        every connection of the process."""
        self._opening = False
        self._write_wanted = False
        self._writer: gevent.Greenlet | None = None
        self._last_object_id = 0
        self._partition_counts: dict[str, AsyncResult[int] | int] = {}
        """topic → its partition count, or the answer to come while it is asked (PARTITIONS)."""
        self._own_acks = acks is None
        self._acks = acks or AckFlusher(settings.consumer.ack_group_time_ms, group)

    @property
    def address(self) -> str:
        """host:port, as messages name it (made when asked: a str kept per connection was 64
        bytes of each)."""
        return str(self.route)

    @property
    def closed(self) -> bool:
        return self.error is not None

    # -- opening -----------------------------------------------------------------------------
    def open(self, source: str | None = None) -> None:
        """Connect and handshake within connectTimeoutSeconds, in a greenlet of its own; the
        outcome is for wait_ready(), so every consumer waiting for this connection hears it."""
        timeout = self._settings.client.connect_timeout_seconds
        deadline = time.monotonic() + timeout
        via = f" from {source}" if source else ""
        self._opening = True  # wait_ready() needs no timer of its own: this settles _ready
        try:
            try:
                sock = connect_socket(self.route.host, self.route.port, source, timeout)
            except OSError as exc:
                self._fail(f"cannot connect to {self.address}{via}: {exc.strerror or exc}")
                return
            if self.error is not None:  # closed while connecting
                sock.close()
                return
            self.start(sock)
            self._ready.wait(max(0.0, deadline - time.monotonic()))
            if not self._ready.ready():
                self._fail(
                    f"cannot connect to {self.address}: no answer to CONNECT in {timeout:g} s"
                )
        finally:
            if not self._ready.ready():  # interrupted: whoever waits must still hear
                self._fail(f"opening the connection to {self.address} was interrupted")

    def will_open(self) -> None:
        """Say that open() is on its way (spawned, not yet running): wait_ready() can then
        wait without a timer of its own, for open() settles it in time."""
        self._opening = True

    def start(self, sock: socket.socket) -> None:
        """Start the reader on a connected socket and send CONNECT (tests pass a socketpair)."""
        # The OS socket gevent's wrapper keeps (non-blocking), without the wrapper.
        self._sock = self._raw = getattr(sock, "_sock", sock)
        self.kernel_timestamps = self._stamping = rx_timestamps.enable(sock)
        self._fd = sock.fileno()
        self._reactor.add(self._fd, self)
        try:
            self.send(
                ev.Connect(
                    CLIENT_VERSION,
                    PROTOCOL_VERSION,
                    supports_broker_entry_metadata=True,
                    proxy_to_broker_url=self.route.proxy_to,
                    auth_method_name=self._settings.auth_method_name,
                    auth_data=self._settings.auth_data,
                )
            )
        except RequestFailed:
            pass  # _fail has recorded why; wait_ready() reports it

    def wait_ready(self) -> None:
        """Block until the handshake is done; raises RequestFailed if it failed.

        open() always settles within connectTimeoutSeconds, with its reason, so its waiters
        need no timer; a connection started without open() is waited for twice that.
        """
        ready = self._ready
        if not ready.ready():
            if self._opening:
                ready.wait()
            else:
                ready.wait(2 * self._settings.client.connect_timeout_seconds)
                if not ready.ready():
                    raise RequestTimeout()
        ready.get()

    # -- writing and requests ----------------------------------------------------------------
    def send(self, *events: ev.Event) -> None:
        """Hand `events` to the codec and write what it queued, in one write. A closed
        connection, a failed write and a codec refusal all raise RequestFailed."""
        self._queue(events)
        self._flush()

    def send_soon(self, *events: ev.Event) -> None:
        """As `send`, but written by the connection's writer at its next turn, with whatever
        other greenlets queued meanwhile: a connect storm's SUBSCRIBEs and FLOWs leave in a
        few writes per connection, not one each. A write that fails then fails the
        connection, and every request waiting on it hears why."""
        self._queue(events)
        self._write_soon()

    def _queue(self, events: tuple[ev.Event, ...]) -> None:
        """Hand `events` to the codec; raises RequestFailed when closed or refused."""
        if self.error is not None:
            raise RequestFailed(self.error)
        try:
            for event in events:
                self._protocol.send(event)
        except LocalProtocolError as exc:
            self._broke_protocol(exc)

    def _broke_protocol(self, exc: LocalProtocolError) -> NoReturn:
        log.exception("connection %d: the driver broke the protocol", self.id)
        self._fail(f"protocol error on {self.address}: {exc}")
        raise RequestFailed(f"protocol error on {self.address}: {exc}") from None

    def _write_soon(self) -> None:
        self._write_wanted = True
        if self._writer is None:
            self._writer = self._group.spawn(self._write_loop)

    def _write_loop(self) -> None:
        """The writer of `send_soon`: one write of everything queued, again while more was
        queued meanwhile; then it ends. A writer parked per connection for the whole run held
        3.2 KB (with one connection per consumer, as much again as the consumer), and a
        steady run writes from the reader and the ack flusher, not here."""
        try:
            while self._write_wanted:
                self._write_wanted = False
                try:
                    self._flush()
                except RequestFailed:
                    return
        finally:
            self._writer = None

    def _flush(self) -> None:
        """Write everything the codec queued. Drained under the write lock once a write has
        had to wait, so whatever one greenlet drains leaves before what the next one drains;
        until then a write never yields between draining and sending, and needs none (a
        Semaphore made for every connection was 150 bytes of each)."""
        protocol = self._wire
        if not protocol.wants_write and not self._unsent:
            return  # the reader calls this after every recv, and most queue nothing
        lock = self._write_lock
        if lock is not None:
            lock.acquire()
        try:
            data = (
                self._unsent + protocol.data_to_send() if self._unsent else protocol.data_to_send()
            )
            self._unsent = b""
            sock = self._sock
            if not data or sock is None:
                return
            try:
                # One send() when the socket has room, as it nearly always has.
                sent = send_now(sock, data)
                if sent < len(data):
                    if lock is None:  # the first wait: from now on, writes take turns
                        lock = self._write_lock = Semaphore()
                        lock.acquire()
                    self._write_rest(sock, memoryview(data)[sent:])
            except OSError as exc:
                self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
                raise RequestFailed(f"connection to {self.address} lost") from None
        finally:
            if lock is not None:
                lock.release()

    def _write_rest(self, sock: Any, rest: memoryview) -> None:
        """What the kernel did not take at once, as room comes, from the greenlet that holds
        the write lock. Its watcher lives for the wait alone, where `_fail` can cancel it."""
        hub = get_hub()
        watcher = self._write_watcher = hub.loop.io(sock.fileno(), 2)  # 2: writable
        try:
            while rest:
                hub.wait(watcher)
                rest = rest[send_now(sock, rest) :]
        finally:
            self._write_watcher = None
            watcher.close()

    def _flush_now(self) -> None:
        """`_flush` for the receive engine and the ack flusher, which serve every connection
        of the process and so must not wait for one: one send() of what the kernel takes now;
        the rest, or all of it while another greenlet is writing, goes to the writer."""
        protocol = self._wire
        if not protocol.wants_write and not self._unsent:
            return
        lock = self._write_lock
        if self._unsent or (lock is not None and lock.locked()) or self._raw is None:
            self._write_soon()
            return
        data = protocol.data_to_send()
        try:
            sent = send_now(self._raw, data)
        except OSError as exc:
            self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
            raise RequestFailed(f"connection to {self.address} lost") from None
        if sent < len(data):
            self._unsent = data[sent:]
            self._write_soon()

    def next_request_id(self) -> int:
        return self._protocol.next_request_id()

    def next_object_id(self) -> int:
        """A consumer_id or producer_id, unique on this connection."""
        self._last_object_id += 1
        return self._last_object_id

    def request(self, cmd: pb.BaseCommand, request_id: int) -> tuple[pb.BaseCommand, int]:
        """Send `cmd` and wait for the answer carrying `request_id`: (answer, its receive µs).

        An ERROR answer, no answer within operationTimeoutSeconds, and a failed connection all
        raise RequestFailed.
        """
        return self._await(request_id, self._send_request(cmd, request_id))

    def _send_request(
        self, cmd: pb.BaseCommand, request_id: int
    ) -> AsyncResult[tuple[pb.BaseCommand, int]]:
        result = self._waiting[request_id] = AsyncResult()
        try:
            self._queue((ev.Request(cmd),))
        except RequestFailed:
            self._waiting.pop(request_id, None)
            raise
        self._expect(request_id, result)
        self._flush_here()
        return result

    def _send_subscribe(
        self, spec: ConsumerSpec, topic: str, consumer_id: int, request_id: int
    ) -> AsyncResult[tuple[pb.BaseCommand, int]]:
        """`_send_request` of a SUBSCRIBE, from its subscription's template of bytes."""
        template = subscribe_template(spec, topic)
        if self.error is not None:
            raise RequestFailed(self.error)
        result = self._waiting[request_id] = AsyncResult()
        try:
            self._protocol.send_subscribe(template, consumer_id, request_id, spec.name)
        except LocalProtocolError as exc:
            self._waiting.pop(request_id, None)
            self._broke_protocol(exc)
        self._write_soon()
        self._expect(request_id, result)
        return result

    def _expect(
        self, request_id: int, result: AsyncResult[tuple[pb.BaseCommand, int]] | GroupAnswers
    ) -> None:
        """Time out `result` if no answer settled it within operationTimeoutSeconds."""
        timeout = self._settings.client.operation_timeout_seconds
        self._deadlines.expect(self, request_id, result, timeout)

    def timed_out(self, request_id: int, result: Any) -> None:
        """The deadline keeper's call: `request_id` (a group's requests) had no answer in
        time."""
        if isinstance(result, GroupAnswers):
            if result in self._groups:
                self._groups.remove(result)
            result.fail(RequestTimeout())
            return
        if self._waiting.get(request_id) is result:
            del self._waiting[request_id]
        result.set_exception(RequestTimeout())

    def _await(
        self, request_id: int, result: AsyncResult[tuple[pb.BaseCommand, int]]
    ) -> tuple[pb.BaseCommand, int]:
        """The answer to `request_id`: settled by the reader, by the deadline keeper at the deadline
        (RequestTimeout), or by the connection failing (RequestFailed)."""
        try:
            got = result.get()
        finally:
            waiting = self._waiting
            waiting.pop(request_id, None)
            if not waiting:
                # A dict emptied keeps the table it grew (200 bytes after a connection's
                # lookups); a new empty one has none.
                self._waiting = {}
        assert got is not None
        answer, receive_us = got
        if answer.type == T.ERROR:
            raise RequestFailed(server_error_text(answer.error.error, answer.error.message))
        return answer, receive_us

    def ping(self) -> None:
        """Keep-alive; a connection that cannot take it has recorded why in `error`."""
        if self._ready.successful() and self.error is None:
            try:
                self.send(ev.Ping())
            except RequestFailed:
                pass

    # -- topics and consumers -----------------------------------------------------------------
    def partitions(self, topic: str) -> int:
        """PARTITIONED_METADATA for `topic`, once per connection (concurrent callers share
        it): the partition count, 0 for a plain topic."""
        return asked_once(self._partition_counts, topic, lambda: self._ask_partitions(topic))

    def _ask_partitions(self, topic: str) -> int:
        rid = self.next_request_id()
        cmd = command(T.PARTITIONED_METADATA, topic=topic, request_id=rid)
        meta = self.request(cmd, rid)[0].partitionMetadataResponse
        if meta.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise RequestFailed(server_error_text(meta.error, meta.message))
        return int(meta.partitions)

    def lookup(self, topic: str, authoritative: bool = False) -> pb.CommandLookupTopicResponse:
        """One LOOKUP; drivers/pulsar/lookup.py follows what it answers."""
        rid = self.next_request_id()
        cmd = command(T.LOOKUP, topic=topic, request_id=rid, authoritative=authoritative)
        found = self.request(cmd, rid)[0].lookupTopicResponse
        if found.response == pb.CommandLookupTopicResponse.Failed:
            raise RequestFailed(server_error_text(found.error, found.message))
        return found

    def subscribe(self, spec: ConsumerSpec, topics: list[str]) -> tuple[int, list[int]]:
        """Create one consumer on each of `topics` (spec.topic, or those of its partitions this
        broker owns) at once, as the official clients do, and give each its permits; returns
        the wire time of the last SUCCESS and the consumer ids. If one is refused, the others
        are closed again and the whole raises."""
        return self.finish_subscribe(spec, topics, self.send_subscribe(spec, topics))

    def send_subscribe(self, spec: ConsumerSpec, topics: list[str]) -> list[SentSubscribe]:
        """The first half of `subscribe`: the SUBSCRIBEs leave (at the next write), nothing
        waits. A group's consumers are sent all before any answer is awaited
        (drivers.pulsar.driver.PulsarDriver.subscribe_group)."""
        sent: list[SentSubscribe] = []
        try:
            for topic in topics:
                consumer_id = self.next_object_id()
                rid = self.next_request_id()
                sent.append((consumer_id, rid, self._send_subscribe(spec, topic, consumer_id, rid)))
        except RequestFailed:
            self._give_up(sent)
            raise
        return sent

    def finish_subscribe(
        self, spec: ConsumerSpec, topics: list[str], sent: list[SentSubscribe]
    ) -> tuple[int, list[int]]:
        """The second half of `subscribe`: wait for the answers of what `send_subscribe`
        sent, then keep the consumers and give them their permits."""
        try:
            success_us = max(self._await(rid, result)[1] for _, rid, result in sent)
        except RequestFailed:
            self._give_up(sent)
            raise
        ids = [cid for cid, _, _ in sent]
        for cid, topic in zip(ids, topics, strict=True):
            self.consumers[cid] = ConsumerState(spec.index, cid, spec, topic)
        # The broker dispatches nothing before a consumer's first FLOW: its receiver queue.
        queue = self._settings.consumer.receiver_queue_size
        self.send_soon(
            *(
                ev.Flow(cid, queue)
                for cid in ids
                if self._protocol.consumer_state(cid) is WireState.SUBSCRIBED
            )
        )
        return success_us, ids

    def subscribe_group(
        self, specs: Sequence[ConsumerSpec], topics: Sequence[Sequence[str]]
    ) -> tuple[list[int | RequestFailed], list[list[int]]]:
        """`subscribe(specs[k], topics[k])` of every k at once: the SUBSCRIBEs leave in one
        write, their answers are awaited together, and the FLOWs of those that succeeded leave
        in one write. Returns, per spec, the wire time of its last SUCCESS or the RequestFailed
        it ended with (each all or nothing, as `subscribe`), and its consumer ids."""
        if self.error is not None:
            raise RequestFailed(self.error)
        protocol = self._protocol
        owners: list[int] = []  # the spec of each SUBSCRIBE
        entry_topics: list[str] = []
        for k, names in enumerate(topics):
            if len(names) == 1:
                owners.append(k)
                entry_topics.append(names[0])
            else:
                owners += [k] * len(names)
                entry_topics += names
        count = len(owners)
        first = self._last_object_id + 1
        self._last_object_id += count
        consumer_ids = list(range(first, first + count))
        next_rid = protocol.next_request_id
        request_ids = [next_rid() for _ in range(count)]
        names = [specs[k].name for k in owners]
        # Runs of one template (most often the whole group: the consumers of a subscription
        # share its names, RunPlan.consumer_placements, so identity says it): a template
        # looked up per consumer was 1 % of a storm's CPU (py-spy, benchmarks/client_connect).
        runs: list[tuple[GroupSubscribeTemplate, int]] = []  # (template, first SUBSCRIBE)
        last: tuple[str, str, str] | None = None
        for position, (k, topic) in enumerate(zip(owners, entry_topics, strict=True)):
            spec = specs[k]
            if (
                last is None
                or topic is not last[0]
                or spec.subscription is not last[1]
                or spec.subscription_type is not last[2]
            ):
                template = subscribe_template(spec, topic)
                if not runs or template is not runs[-1][0]:
                    runs.append((template, position))
                last = (topic, spec.subscription, spec.subscription_type)
        group = GroupAnswers(request_ids)
        try:
            for n, (template, start) in enumerate(runs):
                end = runs[n + 1][1] if n + 1 < len(runs) else count
                protocol.send_subscribes(
                    template, consumer_ids[start:end], request_ids[start:end], names[start:end]
                )
        except LocalProtocolError as exc:
            self._broke_protocol(exc)
        self._groups.append(group)
        self._expect(-1, group)
        self._flush_here()
        group.wait()
        return self._group_answered(specs, owners, entry_topics, consumer_ids, group.outcomes)

    def _group_answered(
        self,
        specs: Sequence[ConsumerSpec],
        owners: list[int],
        entry_topics: list[str],
        consumer_ids: list[int],
        outcomes: list[int | RequestFailed],
    ) -> tuple[list[int | RequestFailed], list[list[int]]]:
        """subscribe_group's second half: keep the consumers whose every SUBSCRIBE succeeded
        and give them their permits; close what the others left on the broker."""
        results: list[int | RequestFailed]
        ids: list[list[int]]
        if len(owners) == len(specs):  # one SUBSCRIBE a spec (no partitions): its own outcome
            results = list(outcomes)
            ids = [[cid] for cid in consumer_ids]
        else:
            results = [0] * len(specs)
            ids = [[] for _ in specs]
            for owner, cid, outcome in zip(owners, consumer_ids, outcomes, strict=True):
                ids[owner].append(cid)
                now = results[owner]
                if type(outcome) is int:
                    if type(now) is int and outcome > now:
                        results[owner] = outcome
                elif type(now) is int:
                    results[owner] = outcome  # the first failure of the spec
        consumers, flows, lost = self.consumers, [], []
        for owner, cid, topic, outcome in zip(
            owners, consumer_ids, entry_topics, outcomes, strict=True
        ):
            if type(results[owner]) is int:
                spec = specs[owner]
                state = ConsumerState(spec.index, cid, spec, topic)
                if self.error is None:
                    consumers[cid] = state
                    flows.append(cid)
                else:  # subscribed, then the connection failed while the group waited
                    lost.append(state)
            elif type(outcome) is int or isinstance(outcome, RequestTimeout):
                # Subscribed, or may yet be: a sibling failed, or no answer came in time.
                self._abandon(cid)
        if lost:
            self._on_consumers_lost(lost)  # subscribed again, as those the failure found
        if flows:
            # The broker dispatches nothing before a consumer's first FLOW: its receiver queue.
            try:
                self._protocol.send_flows(flows, self._settings.consumer.receiver_queue_size)
            except LocalProtocolError as exc:
                self._broke_protocol(exc)
            self._flush_here()
        return results, ids

    def _flush_here(self) -> None:
        """Write what a request or a group queued from the greenlet that will wait for its
        answer anyway, which may wait for room in the socket: a writer greenlet spawned per
        write was 3 % of a storm's CPU, and with one connection per consumer each consumer's
        lookups spawned two. A failed write has failed the connection, and with it whatever
        waits on it."""
        try:
            self._flush()
        except RequestFailed:
            pass

    def _give_up(self, sent: list[SentSubscribe]) -> None:
        """One of a consumer's SUBSCRIBEs failed: close those that may still succeed."""
        for cid, rid, result in sent:
            self._waiting.pop(rid, None)
            if not _refused(result):
                self._abandon(cid)  # answered SUCCESS, or may still

    def close_consumers(self, consumer_ids: list[int]) -> None:
        """Close consumers that subscribed (a consumer refused on another broker's partition)."""
        for consumer_id in consumer_ids:
            self.consumers.pop(consumer_id, None)
            self._abandon(consumer_id)

    def _abandon(self, consumer_id: int) -> None:
        """Close a consumer the harness will not use: one whose SUBSCRIBE timed out, lest a
        late SUCCESS leave the broker holding it (a Broadcast subscription's cursor is its
        slowest consumer's), or whose sibling partitions were refused."""
        if self._protocol.consumer_state(consumer_id) in (None, WireState.CLOSING):
            return  # refused, closed by the broker, or being closed already
        rid = self.next_request_id()
        try:
            self.send(
                ev.Request(command(T.CLOSE_CONSUMER, consumer_id=consumer_id, request_id=rid))
            )
        except RequestFailed:
            pass  # the connection is gone, and the consumer with it

    # -- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        self._fail("closed by the driver", lost=False)

    def _fail(self, reason: str, lost: bool = True) -> None:
        """Close for good: everything waiting on this connection hears `reason`. A `lost`
        connection (not closed by the driver) is logged, and its consumers handed back to be
        subscribed again."""
        if self.error is not None:
            return
        self.error = reason
        error = RequestFailed(reason)
        if lost:
            log.warning(
                "connection %d to %s: %s (%d consumers, %d producers on it)",
                self.id,
                self.address,
                reason,
                len(self.consumers),
                len(self.producers),
            )
        if not self._ready.ready():
            self._ready.set_exception(error)
        for result in self._waiting.values():
            result.set_exception(error)
        self._waiting.clear()
        groups, self._groups = self._groups, []
        for group in groups:
            group.fail(error)
        for producer in list(self.producers.values()):
            producer.connection_lost(error)
        if self._fd >= 0:
            self._reactor.remove(self._fd)
        current = gevent.getcurrent()
        if self._writer is not None and self._writer is not current:
            self._writer.kill(block=False)
        if self._own_deadlines:
            self._deadlines.close()
        if self._own_acks:
            self._acks.close()
        if self._sock is not None:
            # A write waiting for room hears it first, then the socket closes (as gevent's
            # own socket closes): a descriptor closed under a started watcher never wakes it.
            get_hub().cancel_waits_close_and_then(
                [self._write_watcher], OSError(errno.EBADF, reason), self._sock.close
            )
        self._on_closed(self)
        if lost:
            subscribed = list(self.consumers.values())
            self.consumers.clear()
            if subscribed:
                self._on_consumers_lost(subscribed)

    # -- the reader ---------------------------------------------------------------------------
    def on_readable(self) -> None:
        """The engine's call: the socket has bytes (or its end). One recv, straight into the
        codec's buffer (get_buffer: no bytes object per recv), then everything it holds."""
        protocol, raw = self._protocol, self._raw
        size = self._recv_size
        try:
            try:
                with protocol.get_buffer(size) as room:
                    nbytes, receive_us, kernel_us = rx_timestamps.read_into(
                        raw, room, self._stamping
                    )
                    if self._stamping:
                        self._kernel_us = kernel_us
                        if nbytes and (kernel_us != 0) is not self.kernel_timestamps:
                            self._kernel_times_changed(kernel_us != 0)
            except BlockingIOError:
                return  # woken for nothing (another reader drained it): wait for the next
            protocol.buffer_updated(nbytes)
            if nbytes == size and size < RECV_SIZE:
                self._recv_size = size * 2
            self._handle_read(receive_us)
            protocol.release_buffer()
        except Exception as exc:
            self._read_failed(exc)

    def _read_failed(self, exc: Exception) -> None:
        """Why a read ended the connection, as the plain and the TLS reader both say it."""
        if isinstance(exc, RequestFailed):
            return  # the broker closed, refused, or a write failed: _fail has run
        if isinstance(exc, OSError):
            self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
        elif isinstance(exc, RemoteProtocolError):
            self._fail(f"protocol error from {self.address}: {exc}")
        else:
            log.exception("connection %d: reader failed", self.id)
            self._fail(f"reader failed: {exc!r}")

    def _handle_data(self, data: bytes, receive_us: int) -> None:
        """`on_readable` of bytes read elsewhere (benchmarks.client_receive, tests: without a
        socket): copied into the codec's read buffer where a recv would have put them, handled,
        the buffer let go, the deliveries handed over at once."""
        self._read_data(data, receive_us)
        self._deliveries.flush()

    def _read_data(self, data: bytes, receive_us: int) -> None:
        """`_handle_data` without handing the deliveries over (a pass over many connections
        does that at its end)."""
        protocol = self._protocol
        with protocol.get_buffer(len(data)) as room:
            room[: len(data)] = data
        protocol.buffer_updated(len(data))
        self._handle_read(receive_us)
        protocol.release_buffer()

    def _handle_read(self, receive_us: int) -> None:
        """Everything one recv put in the codec's buffer: handle its events, write what they
        queued."""
        protocol, handlers = self._protocol, _HANDLERS
        next_event, on_run, flush = protocol.next_event, self._on_run, self._deliveries.flush
        while (event := next_event()) is not NEED_DATA:
            if type(event) is MessageRun:
                on_run(event, receive_us)
            elif type(event) is Message:
                self._on_message(event, receive_us)
            else:
                flush()  # deliveries first, in the order they came
                handlers[type(event)](self, event, receive_us)
        self._after_batch()

    def _kernel_times_changed(self, stamped: bool) -> None:
        """A read came without a kernel time although the option is set (a socket family
        without stamps, as a socketpair; or the first reads after Linux turns stamping on, which
        it does a moment later when no socket had it on), or with one again."""
        self.kernel_timestamps = stamped
        if not stamped and not self._said_unstamped:
            self._said_unstamped = True
            log.info("connection %d: a read without kernel receive time; read time used", self.id)

    def _after_batch(self) -> None:
        """Write the FLOWs and PONGs this recv made the codec queue in one go; tell the ack
        flusher when acks are grouped."""
        self._flush_now()
        if self._protocol.acks_due:
            self._acks.due(self)

    def _on_run(self, event: MessageRun, receive_us: int) -> None:
        """Deliveries of one entry to consumers of this connection (most often all of them:
        a broadcast); those closed meanwhile are skipped."""
        if event.entry_metadatas:
            self._on_stamped_run(event, receive_us)
            return
        consumers = self.consumers
        consumer_ids = event.consumer_ids
        if len(consumer_ids) == 1:  # one consumer per connection: each read, one delivery
            consumer = consumers.get(consumer_ids[0])
            if consumer is None:
                return
            indexes = [consumer.index]
        elif (found := consumers.run_indexes(consumer_ids)) is not None:
            indexes = found  # a broadcast's run: the consumers in their order
        else:
            indexes = []
            for consumer_id in consumer_ids:
                consumer = consumers.get(consumer_id)
                if consumer is not None:
                    indexes.append(consumer.index)
            if not indexes:
                return
            if len(indexes) != len(consumer_ids):
                consumer_ids = tuple(cid for cid in consumer_ids if cid in consumers)
        n = self._deliver(
            indexes,
            event.payload,
            event.broker_entry_metadata,
            receive_us,
            (event.ledger_id, event.entry_id, event.partition),
        )
        self._protocol.acknowledge_run(consumer_ids, n, event.message_id)

    def _on_stamped_run(self, event: MessageRun, receive_us: int) -> None:
        """Deliveries of one entry, each with stamps of its own (one subscription per consumer:
        the Shared baseline): the entry is decoded once, each consumer's stamps by themselves."""
        consumers, decoder = self.consumers, self._decoder
        try:
            bodies = decoder.bodies(
                event.payload, (event.ledger_id, event.entry_id, event.partition)
            )
        except RemoteProtocolError as exc:
            log.warning("connection %d: dropped a delivery: %s", self.id, exc)
            bodies = []
        add, kernel_us, stamps_of = self._deliveries.add, self._kernel_us, decoder.stamps
        delivered = []
        for consumer_id, metadata in zip(event.consumer_ids, event.entry_metadatas, strict=True):
            consumer = consumers.get(consumer_id)
            if consumer is None:
                continue  # closed meanwhile
            delivered.append(consumer_id)
            stamps, index = stamps_of(metadata), [consumer.index]
            for body in bodies:
                add(self, body, index, receive_us, kernel_us, stamps)
        self._protocol.acknowledge_run(delivered, len(bodies) or 1, event.message_id)

    def _on_message(self, event: ev.Message, receive_us: int) -> None:
        """One delivery in a shape the codec's runs do not take (protobuf-parsed)."""
        msg = event.command
        consumer = self.consumers.get(msg.consumer_id)
        if consumer is None:
            return  # closed meanwhile
        n = self._deliver([consumer.index], event.payload, event.broker_entry_metadata, receive_us)
        self._protocol.acknowledge_consumed(msg.consumer_id, n, msg.message_id)

    def _deliver(
        self,
        indexes: list[int],
        payload: bytes,
        entry_metadata: bytes | None,
        receive_us: int,
        entry: object = None,
    ) -> int:
        """Decode a delivery (once per distinct entry: DeliveryDecoder) and add it to the pass's
        deliveries. Returns the permits it consumed (a batch's messages; 1 for one it could not
        decode)."""
        decoder = self._decoder
        try:
            bodies = decoder.bodies(payload, entry)
        except RemoteProtocolError as exc:
            log.warning(
                "connection %d: dropped a delivery to consumers %s: %s", self.id, indexes, exc
            )
            return 1
        stamps = decoder.stamps(entry_metadata)
        add, kernel_us = self._deliveries.add, self._kernel_us
        for body in bodies:
            add(self, body, indexes, receive_us, kernel_us, stamps)
        return len(bodies) or 1

    def _on_connected(self, event: ev.Connected, receive_us: int) -> None:
        if not self._ready.ready():
            self._ready.set(None)  # its waiters hold it until they have heard
            self._ready = _OPENED

    def _on_refused(self, event: ev.ConnectionRefused, receive_us: int) -> None:
        reason = (
            f"CONNECT refused by {self.address}: {server_error_text(event.error, event.message)}"
        )
        self._fail(reason)
        raise RequestFailed(reason)

    def _on_closed_by_peer(self, event: ev.ConnectionClosed, receive_us: int) -> None:
        reason = f"connection closed by the broker at {self.address}"
        self._fail(reason)
        raise RequestFailed(reason)

    def _on_response(self, event: ev.Response, receive_us: int) -> None:
        request_id = event.request_id
        result = self._waiting.pop(request_id, None)
        if result is not None:
            result.set((event.command, receive_us))
            return
        for group in self._groups:
            if group.answer(request_id, event.command, receive_us):
                if group.ready():
                    self._groups.remove(group)
                return

    def _on_subscribes_answered(self, event: SubscribesAnswered, receive_us: int) -> None:
        """SUCCESS answers to SUBSCRIBEs, read from bytes (a storm's: most often all of one
        group's in one read)."""
        left = event.request_ids
        for group in list(self._groups):
            left = group.succeeded(left, receive_us)
            if group.ready():
                self._groups.remove(group)
            if not left:
                return
        for request_id in left:
            result = self._waiting.pop(request_id, None)
            if result is not None:
                result.set((command(T.SUCCESS, request_id=request_id), receive_us))

    def _on_send_receipt(self, event: ev.SendReceipt, receive_us: int) -> None:
        producer = self.producers.get(event.producer_id)
        if producer is not None:
            producer.on_receipt(event.sequence_id)

    def _on_send_error(self, event: ev.SendError, receive_us: int) -> None:
        producer = self.producers.get(event.producer_id)
        if producer is not None:
            producer.on_send_error(event.sequence_id, server_error_text(event.error, event.message))

    def _on_notice(self, event: ev.Notice, receive_us: int) -> None:
        """The broker closing a consumer or producer (a topic moving, an unload); other
        notices (ACTIVE_CONSUMER_CHANGE, REACHED_END_OF_TOPIC) change nothing here."""
        cmd = event.command
        if cmd.type == T.CLOSE_CONSUMER:
            consumer = self.consumers.pop(cmd.close_consumer.consumer_id, None)
            if consumer is not None:
                log.warning("connection %d: the broker closed consumer %d", self.id, consumer.index)
                self._on_consumers_lost([consumer])
        elif cmd.type == T.CLOSE_PRODUCER:
            producer = self.producers.pop(cmd.close_producer.producer_id, None)
            if producer is not None:
                producer.connection_lost(RequestFailed("the broker closed the producer"))

    # -- grouped acks ----------------------------------------------------------------------------
    def flush_acks(self) -> None:
        """The ack flusher's turn: the codec's grouped ACKs go to this connection's writer (which
        may wait for room in the socket without holding up the flusher)."""
        if self.error is None and self._protocol.flush_acks():
            try:
                self._flush_now()
            except RequestFailed:
                pass  # _fail has recorded why


_HANDLERS: dict[type[ev.Event], Callable[[Any, Any, int], None]] = {
    ev.Message: Connection._on_message,
    ev.Response: Connection._on_response,
    SubscribesAnswered: Connection._on_subscribes_answered,
    ev.SendReceipt: Connection._on_send_receipt,
    ev.SendError: Connection._on_send_error,
    ev.Notice: Connection._on_notice,
    ev.Connected: Connection._on_connected,
    ev.ConnectionRefused: Connection._on_refused,
    ev.ConnectionClosed: Connection._on_closed_by_peer,
}
"""What the reader does with each event other than deliveries: one table for every connection
(a table of bound methods per connection was 350 bytes of each)."""


def tls_refusal(address: str, reason: str, trust: str | None) -> str:
    """A failed handshake, with what decides it: for a certificate refused, the driver file's
    keys (`trust`: its client.tlsTrustCertsFilePath); else, most often, a port that does not
    speak TLS."""
    if not reason.startswith("certificate verify failed"):
        return (
            f"TLS handshake with {address} failed: {reason} (is it the broker's TLS port, "
            "brokerServicePortTls? pulsar+ssl:// needs one)"
        )
    against = (
        f"client.tlsTrustCertsFilePath ({trust})"
        if trust
        else "the system's trust store (client.tlsTrustCertsFilePath is not set)"
    )
    return (
        f"TLS handshake with {address} failed: {reason}; the broker's certificate is checked "
        f"against {against}, and its name against the host dialled unless "
        "client.tlsEnableHostnameVerification is false"
    )


class TlsConnection(Connection):
    """A connection over pulsar+ssl://: the same reads, stamped by the kernel, decrypted
    without a socket of TLS's own (drivers.net.tls), so its deliveries keep kernel receive
    times. Plain connections do none of this: the subclass is chosen once, by the pool."""

    __slots__ = ("_tls",)

    def start(self, sock: socket.socket) -> None:
        context = self._settings.tls
        assert context is not None, "a TlsConnection needs Settings.tls"
        self._tls = TlsChannel(context, self.route.host)
        self._wire = EncryptingWire(self._protocol, self._tls)
        self._tls.handshake()  # its first flight (ClientHello), written with CONNECT below
        super().start(sock)  # CONNECT is held until the handshake is done

    def on_readable(self) -> None:
        """One stamped read of ciphertext (as Connection.on_readable, into the engine's shared
        room, since TLS copies it anyway), the handshake moved on, then every record it
        completed, decrypted straight into the codec's buffer under the read's times."""
        protocol, tls = self._protocol, self._tls
        size = self._recv_size
        try:
            try:
                room = self._reactor.scratch(size)
                nbytes, receive_us, kernel_us = rx_timestamps.read_into(
                    self._raw, room, self._stamping
                )
            except BlockingIOError:
                return
            if nbytes:
                if self._stamping and (kernel_us != 0) is not self.kernel_timestamps:
                    self._kernel_times_changed(kernel_us != 0)
                tls.feed(room[:nbytes], receive_us, kernel_us)
                if nbytes == size and size < RECV_SIZE:
                    self._recv_size = size * 2
            else:
                tls.feed_eof()
            if not tls.handshake_done:
                done = tls.handshake()
                self._flush_now()  # its next flight; once done, CONNECT too
                if not done:
                    if not nbytes:
                        raise TlsFailure("the broker closed the connection")
                    return
            while True:
                with protocol.get_buffer(self._recv_size) as plain:
                    n, plain_us, self._kernel_us = tls.read_into(plain)
                if not n:
                    break
                protocol.buffer_updated(n)
                self._handle_read(plain_us)
            protocol.release_buffer()
            if not nbytes or tls.closed:
                protocol.buffer_updated(0)  # the end: the codec says ConnectionClosed
                self._handle_read(receive_us)
            elif tls.wants_write:
                self._flush_now()  # TLS's own answers (a key update)
        except TlsFailure as exc:
            self._fail(tls_refusal(self.address, str(exc), self._settings.tls_trust_file))
        except Exception as exc:
            self._read_failed(exc)
