"""One TCP connection to the broker under gevent: a reader greenlet, requests, acks.

The reader takes one clock read per recv and hands every delivery to the harness inline: with
tens of thousands of consumers, a greenlet per message would cost seconds (DESIGN.md, "Measure
at the wire"). Frames written by many greenlets (subscribers, a producer, the ack flusher, the
reader's own FLOW and PONG) go through one lock, so they never interleave on the socket.
Requests are matched to answers by request_id, which is unique per connection here.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Protocol

import gevent
from gevent import socket
from gevent.event import AsyncResult, Event
from gevent.lock import Semaphore
from gevent.pool import Group

from drivers.base import ConsumerCallback, ConsumerSpec, DriverError
from drivers.pulsar.consumer import ConsumerState, flow_frame, subscribe_command
from drivers.pulsar.delivery import DeliveryDecoder
from drivers.pulsar.lookup import Route
from drivers.pulsar.settings import Settings
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, body_of, command
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.frames import Frame, FrameDecoder, encode_frame

log = logging.getLogger("drivers.pulsar")

RECV_SIZE = 256 * 1024
CLIENT_VERSION = "fanout-bench"
PROTOCOL_VERSION = 20
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
_PING = encode_frame(command(T.PING))
_PONG = encode_frame(command(T.PONG))


class RequestFailed(DriverError):
    """A request was refused, never answered, or its connection failed.

    str() is what the harness records for a failed subscribe ("timeout", "ConsumerBusy: ...",
    "cannot connect to host:port: Connection refused"), so it names no consumer.
    """


class RequestTimeout(RequestFailed):
    """No answer within operationTimeoutSeconds."""

    def __init__(self) -> None:
        super().__init__("timeout")


class ProducerLink(Protocol):
    """What the reader needs of a producer on its connection."""

    def on_receipt(self, sequence_id: int) -> None: ...

    def on_send_error(self, sequence_id: int, error: str) -> None: ...

    def connection_lost(self, error: DriverError) -> None: ...


def connect_frame(proxy_to: str = "") -> bytes:
    """CONNECT; through a Pulsar proxy it names the broker to be proxied to."""
    fields = {"proxy_to_broker_url": proxy_to} if proxy_to else {}
    return encode_frame(
        command(
            T.CONNECT,
            client_version=CLIENT_VERSION,
            protocol_version=PROTOCOL_VERSION,
            feature_flags=pb.FeatureFlags(supports_broker_entry_metadata=True),
            **fields,
        )
    )


def now_us() -> int:
    return time.time_ns() // 1000


def server_error_text(code: int, message: str) -> str:
    try:
        name = pb.ServerError.Name(code)
    except ValueError:
        name = f"ServerError {code}"
    return f"{name}: {message}"


def connect_socket(host: str, port: int, source: str | None, timeout: float) -> socket.socket:
    """A connected TCP socket, optionally from `source` (bind without a port: the kernel picks
    it at connect time, per destination, so each source address has its own port range)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if source is not None:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source, 0))
        sock.settimeout(timeout)
        sock.connect((host, port))
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def _refused(result: AsyncResult) -> bool:
    """Whether a request settled leaving nothing on the broker: ERROR, or a lost connection."""
    if not result.ready():
        return False
    return not result.successful() or result.value[0].type == T.ERROR


class Connection:
    def __init__(
        self,
        conn_id: int,
        settings: Settings,
        callback: ConsumerCallback,
        group: Group,
        on_closed: Callable[[Connection], None] = lambda conn: None,
        route: Route | None = None,
        on_consumers_lost: Callable[[list[ConsumerState]], None] = lambda states: None,
    ) -> None:
        self.id = conn_id
        self.route = route or Route.service(settings)
        self.address = str(self.route)
        self.error: str | None = None
        """Why the connection is closed; None while it is open (or opening)."""
        self.consumers: dict[int, ConsumerState] = {}
        self.producers: dict[int, ProducerLink] = {}
        self._settings = settings
        self._callback = callback
        self._group = group
        self._on_closed = on_closed
        self._on_consumers_lost = on_consumers_lost
        self._sock: socket.socket | None = None
        self._write_lock = Semaphore()
        self._decoder = FrameDecoder()
        self._deliveries = DeliveryDecoder(settings.verify_checksum)
        self._ready = AsyncResult()
        self._pending: dict[int, AsyncResult] = {}
        self._request_ids = itertools.count(1)
        self._object_ids = itertools.count(1)
        self._partition_counts: dict[str, AsyncResult] = {}
        self._replies: list[bytes] = []
        self._ack_dirty: list[ConsumerState] = []
        self._ack_wanted = Event()
        self._reader: gevent.Greenlet | None = None
        self._acker: gevent.Greenlet | None = None
        self._handlers: dict[int, Callable[[Frame, int], None]] = {
            T.CONNECTED: self._on_connected,
            T.MESSAGE: self._on_message,
            T.SEND_RECEIPT: self._on_send_receipt,
            T.SEND_ERROR: self._on_send_error,
            T.SUCCESS: self._on_response,
            T.PRODUCER_SUCCESS: self._on_response,
            T.PARTITIONED_METADATA_RESPONSE: self._on_response,
            T.LOOKUP_RESPONSE: self._on_response,
            T.ERROR: self._on_error,
            T.PING: self._on_ping,
            T.CLOSE_CONSUMER: self._on_close_consumer,
            T.CLOSE_PRODUCER: self._on_close_producer,
        }

    @property
    def closed(self) -> bool:
        return self.error is not None

    # -- opening -----------------------------------------------------------------------------
    def open(self, source: str | None = None) -> None:
        """Connect and handshake within connectTimeoutSeconds, in a greenlet of its own; the
        outcome is for wait_ready(), so every consumer waiting for this connection hears it."""
        s = self._settings
        deadline = time.monotonic() + s.connect_timeout
        via = f" from {source}" if source else ""
        try:
            sock = connect_socket(self.route.host, self.route.port, source, s.connect_timeout)
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
                f"cannot connect to {self.address}: no answer to CONNECT in {s.connect_timeout:g} s"
            )

    def start(self, sock: socket.socket) -> None:
        """Start the reader on a connected socket and send CONNECT (tests pass a socketpair)."""
        self._sock = sock
        self._reader = self._group.spawn(self._read_loop)
        try:
            self.write(connect_frame(self.route.proxy_to))
        except RequestFailed:
            pass  # _fail has recorded why; wait_ready() reports it

    def wait_ready(self) -> None:
        """Block until the handshake is done; raises RequestFailed if it failed.

        open() always settles within connectTimeoutSeconds, with its reason; the bound here is
        twice that, so it only fires for a connection started without open().
        """
        self._ready.wait(2 * self._settings.connect_timeout)
        if not self._ready.ready():
            raise RequestTimeout()
        self._ready.get()

    # -- writing and requests ----------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.error is not None:
            raise RequestFailed(self.error)
        with self._write_lock:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
                raise RequestFailed(self.error) from None

    def next_request_id(self) -> int:
        return next(self._request_ids)

    def next_object_id(self) -> int:
        """A consumer_id or producer_id, unique on this connection."""
        return next(self._object_ids)

    def request(self, cmd: pb.BaseCommand, request_id: int) -> tuple[pb.BaseCommand, int]:
        """Send `cmd` and wait for the answer carrying `request_id`: (answer, its receive µs).

        An ERROR answer, no answer within operationTimeoutSeconds, and a failed connection all
        raise RequestFailed.
        """
        return self._await(request_id, self._send_request(cmd, request_id))

    def _send_request(self, cmd: pb.BaseCommand, request_id: int) -> AsyncResult:
        result = self._pending[request_id] = AsyncResult()
        try:
            self.write(encode_frame(cmd))
        except RequestFailed:
            self._pending.pop(request_id, None)
            raise
        return result

    def _await(self, request_id: int, result: AsyncResult) -> tuple[pb.BaseCommand, int]:
        try:
            result.wait(self._settings.operation_timeout)
        finally:
            self._pending.pop(request_id, None)
        if not result.ready():
            raise RequestTimeout()
        answer, receive_us = result.get()
        if answer.type == T.ERROR:
            raise RequestFailed(server_error_text(answer.error.error, answer.error.message))
        return answer, receive_us

    def ping(self) -> None:
        """Keep-alive; a connection that cannot take it has recorded why in `error`."""
        if self._ready.successful() and self.error is None:
            try:
                self.write(_PING)
            except RequestFailed:
                pass

    # -- topics and consumers -----------------------------------------------------------------
    def partitions(self, topic: str) -> int:
        """PARTITIONED_METADATA for `topic`, once per connection (concurrent callers share
        it): the partition count, 0 for a plain topic."""
        known = self._partition_counts.get(topic)
        if known is not None:
            return known.get()
        known = self._partition_counts[topic] = AsyncResult()
        try:
            rid = self.next_request_id()
            cmd = command(T.PARTITIONED_METADATA, topic=topic, request_id=rid)
            meta = self.request(cmd, rid)[0].partitionMetadataResponse
            if meta.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
                raise RequestFailed(server_error_text(meta.error, meta.message))
        except BaseException as exc:
            del self._partition_counts[topic]
            known.set_exception(
                exc if isinstance(exc, DriverError) else RequestFailed("lookup interrupted")
            )
            raise
        known.set(meta.partitions)
        return meta.partitions

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
        s = self._settings
        sent: list[tuple[int, int, AsyncResult]] = []
        try:
            for topic in topics:
                consumer_id = self.next_object_id()
                rid = self.next_request_id()
                self.consumers[consumer_id] = ConsumerState(
                    spec.index,
                    consumer_id,
                    s.receiver_queue_size,
                    s.ack_mode == "individual",
                    spec,
                    topic,
                )
                cmd = subscribe_command(spec, consumer_id, rid, topic)
                sent.append((consumer_id, rid, self._send_request(cmd, rid)))
            success_us = max(self._await(rid, result)[1] for _, rid, result in sent)
        except RequestFailed:
            self.consumers.pop(consumer_id, None)  # the one whose SUBSCRIBE could not be sent
            for cid, rid, result in sent:
                self._pending.pop(rid, None)
                self.consumers.pop(cid, None)
                if not _refused(result):
                    self._abandon(cid)  # answered SUCCESS, or may still
            raise
        for cid, _, _ in sent:
            self.consumers[cid].established = True
        if self._acker is None:
            self._acker = self._group.spawn(self._ack_loop)
        self.write(b"".join(flow_frame(cid, s.receiver_queue_size) for cid, _, _ in sent))
        return success_us, [cid for cid, _, _ in sent]

    def close_consumers(self, consumer_ids: list[int]) -> None:
        """Close consumers that subscribed (a consumer refused on another broker's partition)."""
        for consumer_id in consumer_ids:
            self.consumers.pop(consumer_id, None)
            self._abandon(consumer_id)

    def _abandon(self, consumer_id: int) -> None:
        """Close a consumer the harness will not use: one whose SUBSCRIBE timed out, lest a
        late SUCCESS leave the broker holding it (a Broadcast subscription's cursor is its
        slowest consumer's), or whose sibling partitions were refused."""
        rid = self.next_request_id()
        try:
            self.write(
                encode_frame(command(T.CLOSE_CONSUMER, consumer_id=consumer_id, request_id=rid))
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
        for result in self._pending.values():
            result.set_exception(error)
        self._pending.clear()
        for producer in list(self.producers.values()):
            producer.connection_lost(error)
        current = gevent.getcurrent()
        for greenlet in (self._acker, self._reader):
            if greenlet is not None and greenlet is not current:
                greenlet.kill(block=False)
        if self._sock is not None:
            self._sock.close()
        self._on_closed(self)
        if lost:
            established = [c for c in self.consumers.values() if c.established]
            self.consumers.clear()
            if established:
                self._on_consumers_lost(established)

    # -- the reader ---------------------------------------------------------------------------
    def _read_loop(self) -> None:
        sock, decoder, handlers = self._sock, self._decoder, self._handlers
        try:
            while True:
                data = sock.recv(RECV_SIZE)
                receive_us = now_us()  # one clock read for everything this recv returned
                if not data:
                    self._fail(f"connection closed by the broker at {self.address}")
                    return
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not None:
                    handler = handlers.get(frame.command.type)
                    if handler is not None:
                        handler(frame, receive_us)
                self._after_batch()
                # A recv that finds data never yields: without this, one busy connection would
                # starve the others, the subscribers and the timers.
                gevent.sleep(0)
        except RequestFailed:
            return  # a write failed, and _fail has run
        except OSError as exc:
            self._fail(f"connection to {self.address} lost: {exc.strerror or exc}")
        except RemoteProtocolError as exc:
            self._fail(f"protocol error from {self.address}: {exc}")
        except Exception as exc:
            log.exception("connection %d: reader failed", self.id)
            self._fail(f"reader failed: {exc!r}")

    def _after_batch(self) -> None:
        """Write the FLOWs and PONGs this recv produced in one go; wake the ack flusher."""
        if self._replies:
            replies, self._replies = self._replies, []
            self.write(b"".join(replies))
        if self._ack_dirty and not self._ack_wanted.is_set():
            self._ack_wanted.set()

    def _on_message(self, frame: Frame, receive_us: int) -> None:
        msg = frame.command.message
        consumer = self.consumers.get(msg.consumer_id)
        if consumer is None or frame.payload is None:
            return  # closed meanwhile
        try:
            bodies = self._deliveries.bodies(frame.payload)
        except RemoteProtocolError as exc:
            log.warning(
                "connection %d: dropped a delivery to consumer %d: %s", self.id, consumer.index, exc
            )
            bodies = []
        stamps = self._deliveries.stamps(frame.broker_entry_metadata)
        index, received = consumer.index, self._callback.message_received
        for body in bodies:
            received(index, body, receive_us, stamps)
        flow = consumer.delivered(msg.message_id, len(bodies) or 1)
        if flow is not None:
            self._replies.append(flow)
        if not consumer.ack_queued:
            consumer.ack_queued = True
            self._ack_dirty.append(consumer)

    def _on_connected(self, frame: Frame, receive_us: int) -> None:
        if not self._ready.ready():
            self._ready.set(None)

    def _on_response(self, frame: Frame, receive_us: int) -> None:
        result = self._pending.pop(body_of(frame.command).request_id, None)
        if result is not None:
            result.set((frame.command, receive_us))

    def _on_error(self, frame: Frame, receive_us: int) -> None:
        if not self._ready.ready():
            err = frame.command.error
            self._fail(
                f"CONNECT refused by {self.address}: {server_error_text(err.error, err.message)}"
            )
            return
        self._on_response(frame, receive_us)

    def _on_ping(self, frame: Frame, receive_us: int) -> None:
        self._replies.append(_PONG)

    def _on_send_receipt(self, frame: Frame, receive_us: int) -> None:
        receipt = frame.command.send_receipt
        producer = self.producers.get(receipt.producer_id)
        if producer is not None:
            producer.on_receipt(receipt.sequence_id)

    def _on_send_error(self, frame: Frame, receive_us: int) -> None:
        err = frame.command.send_error
        producer = self.producers.get(err.producer_id)
        if producer is not None:
            producer.on_send_error(err.sequence_id, server_error_text(err.error, err.message))

    def _on_close_consumer(self, frame: Frame, receive_us: int) -> None:
        consumer = self.consumers.pop(frame.command.close_consumer.consumer_id, None)
        if consumer is not None:
            log.warning("connection %d: the broker closed consumer %d", self.id, consumer.index)
            if consumer.established:
                self._on_consumers_lost([consumer])

    def _on_close_producer(self, frame: Frame, receive_us: int) -> None:
        producer = self.producers.pop(frame.command.close_producer.producer_id, None)
        if producer is not None:
            producer.connection_lost(RequestFailed("the broker closed the producer"))

    # -- the ack flusher ------------------------------------------------------------------------
    def _ack_loop(self) -> None:
        """Every ackGroupTimeMs while deliveries come in: one write of every consumer's ACK."""
        delay = self._settings.ack_group_time_ms / 1000
        while True:
            self._ack_wanted.wait()
            gevent.sleep(delay)
            self._ack_wanted.clear()
            dirty, self._ack_dirty = self._ack_dirty, []
            frames = [frame for c in dirty if (frame := c.take_ack()) is not None]
            if frames:
                try:
                    self.write(b"".join(frames))
                except RequestFailed:
                    return
