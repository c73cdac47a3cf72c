"""A producer on a connection: SEND frames out, receipts matched in FIFO order.

The broker answers a producer's sends in the order it got them, so pending sends sit in a
deque and each receipt settles its head. At most producer.maxPendingMessages are pending: the
sending greenlet blocks for room, as the official clients' blockIfQueueFull does, so a broker
that falls behind shows up as publish delay instead of unbounded memory.

With batching, consecutive messages with the same key share one SEND (one entry on the broker,
its key the batch's, so Key_Shared keeps each key's order), sent when it is full or when its
first message has waited batchingMaxPublishDelayMs. One receipt then settles the batch: its
sequence_id is the first message's and highest_sequence_id the last one's.
"""

from __future__ import annotations

import base64
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent.event import Event
from gevent.lock import Semaphore
from gevent.pool import Group

from drivers.base import DriverError
from drivers.pulsar import backoff
from drivers.pulsar.connection import Connection, RequestFailed
from drivers.pulsar.settings import Settings
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.events import Send
from pulsar_protocol.payload import encode_payload, join_batch

OnDone = Callable[[Exception | None], None]
log = logging.getLogger("drivers.pulsar")


@dataclass(slots=True)
class _Pending:
    sequence_id: int
    on_done: OnDone
    deadline: float
    """time.monotonic() after which the send has timed out."""
    send: Send | None = None
    """The SEND that carries it, kept to send again on a new connection; on the first message
    of a batch only."""


@dataclass(slots=True)
class _Batch:
    key: bytes | None
    first: int
    last: int
    messages: list[tuple[pb.SingleMessageMetadata, bytes]]
    size: int
    head: _Pending


def set_key(metadata: pb.MessageMetadata | pb.SingleMessageMetadata, key: bytes) -> None:
    """partition_key is a string on the wire: bytes that are not UTF-8 go base64, flagged."""
    try:
        metadata.partition_key = key.decode("utf-8")
    except UnicodeDecodeError:
        metadata.partition_key = base64.b64encode(key).decode("ascii")
        metadata.partition_key_b64_encoded = True


class PulsarProducer:
    """`reconnect`, when given, makes a new ready connection to the topic's owner: after a lost
    connection the producer registers there and sends what is still pending again, as the
    official clients do; without it, a lost connection fails every pending and later send."""

    def __init__(
        self,
        conn: Connection,
        topic: str,
        settings: Settings,
        group: Group,
        reconnect: Callable[[], Connection] | None = None,
    ) -> None:
        self.topic = topic
        self.name = ""
        """Given by the broker in PRODUCER_SUCCESS; every message's metadata carries it."""
        self._conn: Connection | None = conn
        """None while reconnecting (or after a lost connection without `reconnect`)."""
        self._reconnect = reconnect
        self._reconnector: gevent.Greenlet | None = None
        self.reconnections = 0
        self._group = group
        self._id = conn.next_object_id()
        self._timeout = settings.producer.send_timeout_ms / 1000
        self._pending: deque[_Pending] = deque()
        self._room = Semaphore(settings.producer.max_pending_messages)
        self._sequence = itertools.count()
        self._failure: DriverError | None = None
        self._wake = Event()
        self._expirer: gevent.Greenlet | None = None
        self._batching = settings.producer.batching_enabled
        self._batch_delay = settings.producer.batching_max_publish_delay_ms / 1000
        self._batch_messages = settings.producer.batching_max_messages
        self._batch_bytes = settings.producer.batching_max_bytes
        self._batch: _Batch | None = None
        self._batch_timer: gevent.Greenlet | None = None
        self._batch_ends: dict[int, int] = {}
        """First sequence id of each batch in flight → its last."""

    def open(self) -> None:
        """Register on the owner's connection (the driver looked the topic up); raises
        DriverError when it cannot."""
        assert self._conn is not None, "open() comes first"
        self._register(self._conn)
        if self._timeout:
            self._expirer = self._group.spawn(self._expire_loop)

    def _register(self, conn: Connection) -> None:
        conn.wait_ready()
        rid = conn.next_request_id()
        conn.producers[self._id] = self
        # Again after a reconnection: under the name the broker gave, which messages carry.
        named = {"producer_name": self.name} if self.name else {}
        try:
            answer, _ = conn.request(
                command(
                    T.PRODUCER, topic=self.topic, producer_id=self._id, request_id=rid, **named
                ),
                rid,
            )
        except RequestFailed as exc:
            conn.producers.pop(self._id, None)
            raise RequestFailed(f"cannot create a producer on {self.topic!r}: {exc}") from None
        self.name = answer.producer_success.producer_name

    def send_async(self, key: bytes | None, payload: bytes, on_done: OnDone) -> None:
        if self._failure is None:
            self._room.acquire()  # blocks this greenlet while maxPendingMessages are pending
            if self._failure is not None:
                self._room.release()
        if self._failure is not None:
            on_done(self._failure)
            return
        sequence_id = next(self._sequence)
        pending = _Pending(sequence_id, on_done, time.monotonic() + self._timeout)
        self._pending.append(pending)
        if len(self._pending) == 1:
            self._wake.set()
        if self._batching:
            self._add_to_batch(key, sequence_id, payload, pending)
            return
        metadata = pb.MessageMetadata(
            producer_name=self.name,
            sequence_id=sequence_id,
            publish_time=time.time_ns() // 1_000_000,
        )
        if key is not None:
            set_key(metadata, key)
        pending.send = Send(self._id, sequence_id, encode_payload(metadata, payload))
        self._write(pending.send)

    def _write(self, *sends: Send) -> None:
        """Send now, or, while reconnecting, leave it pending: it goes out on the new one."""
        if self._conn is None:
            return
        try:
            self._conn.send(*sends)
        except RequestFailed as exc:
            self.connection_lost(exc)

    # -- batching --------------------------------------------------------------------------------
    def _add_to_batch(
        self, key: bytes | None, sequence_id: int, payload: bytes, pending: _Pending
    ) -> None:
        batch = self._batch
        if batch is not None and (
            batch.key != key or batch.size + len(payload) > self._batch_bytes
        ):
            self._flush_batch()
            batch = None
        single = pb.SingleMessageMetadata(sequence_id=sequence_id)
        if key is not None:
            set_key(single, key)
        if batch is None:
            batch = self._batch = _Batch(key, sequence_id, sequence_id, [], 0, pending)
            self._batch_timer = gevent.spawn_later(self._batch_delay, self._flush_batch)
            self._group.add(self._batch_timer)
        batch.messages.append((single, payload))
        batch.last = sequence_id
        batch.size += len(payload)
        if len(batch.messages) >= self._batch_messages or batch.size >= self._batch_bytes:
            self._flush_batch()

    def _flush_batch(self) -> None:
        batch, self._batch = self._batch, None
        timer, self._batch_timer = self._batch_timer, None
        if timer is not None and timer is not gevent.getcurrent():
            timer.kill(block=False)
        if batch is None or self._failure is not None:
            return
        count = len(batch.messages)
        metadata = pb.MessageMetadata(
            producer_name=self.name,
            sequence_id=batch.first,
            publish_time=time.time_ns() // 1_000_000,
            num_messages_in_batch=count,
            highest_sequence_id=batch.last,
        )
        if batch.key is not None:
            set_key(metadata, batch.key)
        self._batch_ends[batch.first] = batch.last
        batch.head.send = Send(
            self._id,
            batch.first,
            encode_payload(metadata, join_batch(batch.messages)),
            num_messages=count,
            highest_sequence_id=batch.last,
        )
        self._write(batch.head.send)

    def close(self) -> None:
        self._flush_batch()
        self._give_up(DriverError(f"producer on {self.topic!r} closed"))
        if self._conn is not None:
            self._conn.close()
        for greenlet in (self._expirer, self._reconnector):
            if greenlet is not None:
                greenlet.kill(block=False)

    # -- called by the connection's reader ------------------------------------------------------
    def on_receipt(self, sequence_id: int) -> None:
        self._settle(sequence_id, None)

    def on_send_error(self, sequence_id: int, error: str) -> None:
        self._settle(sequence_id, DriverError(f"send to {self.topic!r} failed: {error}"))

    def connection_lost(self, error: DriverError) -> None:
        if self._reconnect is None or self._failure is not None:
            self._give_up(DriverError(f"producer on {self.topic!r}: {error}"))
            return
        if self._conn is None:
            return  # reconnecting already
        self._conn.producers.pop(self._id, None)
        self._conn = None
        self._reconnector = self._group.spawn(self._reconnect_loop)

    def _reconnect_loop(self) -> None:
        """Until registered on a new connection (or closed): what is pending then goes out
        again, in order; sends that time out meanwhile fail as usual."""
        reconnect = self._reconnect
        assert reconnect is not None
        for delay in backoff.delays():
            if self._failure is not None:
                return
            gevent.sleep(delay)
            try:
                conn = reconnect()
                self._register(conn)
            except DriverError as exc:
                log.debug("producer on %s: reconnecting failed (%s)", self.topic, exc)
                continue
            self._conn, self._reconnector = conn, None
            self.reconnections += 1
            log.info("producer on %s connected again", self.topic)
            self._write(*(p.send for p in self._pending if p.send is not None))
            return

    # -- settling --------------------------------------------------------------------------------
    def _settle(self, sequence_id: int, error: Exception | None) -> None:
        """Settle the send `sequence_id` (with its whole batch); ignore what already timed out.
        Sends before it that the broker skipped (never, if it keeps FIFO order) fail rather
        than wait forever."""
        last = self._batch_ends.pop(sequence_id, sequence_id)
        pending = self._pending
        while pending and pending[0].sequence_id < sequence_id:
            self._finish(
                pending.popleft(),
                DriverError(f"no receipt from {self.topic!r} (a later send was answered first)"),
            )
        while pending and pending[0].sequence_id <= last:
            self._finish(pending.popleft(), error)

    def _give_up(self, error: DriverError) -> None:
        """Fail every pending send, and every later one: closed, or no way to reconnect."""
        if self._failure is None:
            self._failure = error
        while self._pending:
            self._finish(self._pending.popleft(), self._failure)

    def _finish(self, pending: _Pending, error: Exception | None) -> None:
        self._room.release()
        pending.on_done(error)

    def _expire_loop(self) -> None:
        """Fail sends older than sendTimeoutMs; deadlines grow along the deque."""
        pending = self._pending
        while True:
            if not pending:
                self._wake.clear()
                self._wake.wait()
                continue
            wait = pending[0].deadline - time.monotonic()
            if wait > 0:
                gevent.sleep(wait)
                continue
            error = DriverError(
                f"send to {self.topic!r} timed out: no receipt in {self._timeout * 1000:g} ms"
            )
            now = time.monotonic()
            while pending and pending[0].deadline <= now:
                self._finish(pending.popleft(), error)
