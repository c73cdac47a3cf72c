"""One client connection: a thin asyncio shell translating codec events into calls on the core.

As uvicorn's h11_impl over h11: `data_received` feeds pulsar_protocol's Connection and hands
each event to a handler (a table by event type: requests come typed, pulsar_protocol.requests);
the codec enforces every rule of the wire (handshake, PING/PONG, request ids, the
unknown-command policy, SEND checksums, names that are not UTF-8) and queues its own answers,
which this shell only writes. Who may do what is decided in broker.core.admission, which
answers a refusal this shell passes on. Handlers record state and schedule; dispatch stays off
the read path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

from broker.config import BrokerConfig
from broker.core.admission import (
    consumer_admission,
    delivery_delay_refusal,
    producer_admission,
    subscription_start,
    topic_refusal,
    unsubscribe_refusal,
)
from broker.core.consumer import Consumer, ConsumerSubscription
from broker.core.entry_log import EntryLog
from broker.core.limits import Refusal
from broker.core.namespace import topics_hash, topics_of_namespace
from broker.core.positions import index_at_publish_time, index_of_message
from broker.core.producer_access import ProducerRefused
from broker.core.schemas import SchemaRegistry, schema_topic
from broker.core.topic import Producer, Topic
from broker.core.topic_name import parse_topic
from broker.server.auth import TokenAuthenticator
from broker.server.turn_writes import TurnWrites
from broker.subscriptions.base import SubscriptionError
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol import requests as rq
from pulsar_protocol.commands import T, command
from pulsar_protocol.connection import server_codec
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.extensions import now_us
from pulsar_protocol.state import ConnectionState

log = logging.getLogger("broker.connection")

SERVER_VERSION = "fanout-bench-broker 0.1"
_producer_names = itertools.count()

SEEK_RETURN_S = 60.0
"""How long a non-durable subscription (a Reader's) waits for the consumers a seek disconnected
to subscribe again (the official client comes back within its reconnection back-off)."""

_AckGroups = list[tuple[ConsumerSubscription, list[Consumer]]]
_UNKNOWN = object()
"""ServerConnection._one_sub not worked out yet."""


def _one_subscription(consumers: Iterable[Consumer]) -> ConsumerSubscription | None:
    """The subscription all `consumers` are on, None if they are not all on one."""
    subs = {id(c.subscription): c.subscription for c in consumers}
    return next(iter(subs.values())) if len(subs) == 1 else None


PRE_HANDSHAKE_MAX_FRAME = 64 * 1024
"""The largest frame taken before the handshake. A CONNECT is a few hundred bytes (a few KB
with auth data); a peer that has not even said CONNECT must not make the broker buffer the
codec's limit after the handshake (maxMessageSize, 5 MB) for it."""


_NAMED = (rq.Lookup, rq.PartitionedMetadata, rq.Producer, rq.Subscribe, rq.GetSchema)
"""The requests that name a topic: none reaches its handler with a name that is no topic's."""


@functools.cache
def _frame_limit(max_message_size: int) -> int:
    """The largest frame taken after the handshake: a message and its command. One int object
    for every connection (each made its own, 32 bytes)."""
    return max_message_size + 10 * 1024


class ConnectionHost(Protocol):
    """What a connection needs of the broker service (broker.server.service.BrokerService),
    declared here so that the service imports its connections and not the reverse."""

    config: BrokerConfig
    instance_id: str
    connections: set[ServerConnection]
    authenticator: TokenAuthenticator | None
    topics: dict[str, Topic]
    partitioned: dict[str, int]
    schemas: SchemaRegistry

    def topic(self, name: str) -> Topic: ...

    def known_topics(self) -> frozenset[str]: ...

    def partitions_of(self, name: str) -> int: ...

    def subscription_mode(self, req: rq.Subscribe) -> str: ...

    @property
    def turn_writes(self) -> TurnWrites: ...


class ServerConnection(asyncio.Protocol):
    """With a connection per consumer (19,000 of them) this object and its codec are most of
    what the broker holds per consumer: slotted, its handler tables the class's, nothing made
    before it is used (issue 40: 2 KiB a consumer)."""

    __slots__ = (
        "service",
        "conn",
        "transport",
        "_flush_due",
        "writable",
        "sends_broker_entry_metadata",
        "connected_since",
        "_handshake_timer",
        "seen",
        "_pinged",
        "reading_paused",
        "_paused_read_us",
        "_holds",
        "producers",
        "_waiting_producers",
        "_only",
        "_by_id",
        "_one_sub",
    )

    def __init__(self, service: ConnectionHost) -> None:
        self.service = service
        max_size = service.config.maxMessageSize
        codec = server_codec(
            SERVER_VERSION,
            max_frame_size=_frame_limit(max_size),
            max_message_size=max_size,
            authenticate=auth.check_connect if (auth := service.authenticator) else None,
            consumer_runs=True,
        )
        self.conn = codec(handshake_max_frame_size=PRE_HANDSHAKE_MAX_FRAME)
        self.transport: asyncio.Transport | None = None
        self._flush_due = False
        """A write of what the codec queued is scheduled for the end of this loop turn."""
        self.writable = True
        self.sends_broker_entry_metadata = False
        """The client asked for the stage stamps ahead of each payload (CONNECT's flags)."""
        self.connected_since = time.time()
        """Epoch seconds (admin stats' connectedSince, its consumers'): the loop makes this
        object as it accepts the connection, just before `connection_made`."""
        self._handshake_timer: asyncio.TimerHandle | None = None
        self.seen = True
        """Something was read since the last keep-alive sweep (broker.server.keep_alive): the
        one cost of keep-alive per read."""
        self._pinged = False
        """The sweep sent a PING and nothing has been read since."""
        self.reading_paused = False
        """A publish rate limit or backlog hold stopped reading: frames already read wait,
        unhandled, in the codec until `resume_reading`."""
        self._paused_read_us = 0
        """The wire time of the read the waiting frames came in (0: none wait)."""
        self._holds = 0
        """Broadcast rounds under way that have served this connection (`hold_reads`)."""
        self.producers: dict[int, Producer] | None = None
        """By producer id; made at the first (most connections of a fan-out have none)."""
        self._waiting_producers: dict[int, Producer] | None = None
        """WaitForExclusive producers told "not ready yet", by producer id; made at the first."""
        self._only: Consumer | None = None
        """The connection's consumer while it has had one only: most connections of a
        fan-out with a connection per consumer (a dict of one is 224 bytes)."""
        self._by_id: dict[int, Consumer] | None = None
        """The consumers by id, once it has had two at once (`_only` is None from then)."""
        self._one_sub: ConsumerSubscription | None | object = _UNKNOWN
        """The subscription all its consumers are on, None if they are not on one (for
        `_on_ack_run`): kept as consumers come and go, worked out again only when one leaves
        those that were on several."""

    # -- its consumers -----------------------------------------------------------------------
    @property
    def consumers(self) -> list[Consumer]:
        """Its consumers (a copy: detaching them while iterating is fine)."""
        if self._only is not None:
            return [self._only]
        return list(self._by_id.values()) if self._by_id else []

    @property
    def consumer_count(self) -> int:
        return 1 if self._only is not None else len(self._by_id or ())

    def consumer_by_id(self, consumer_id: int) -> Consumer | None:
        only = self._only
        if only is not None:
            return only if only.consumer_id == consumer_id else None
        by_id = self._by_id
        return by_id.get(consumer_id) if by_id else None

    def _add_consumer(self, consumer: Consumer) -> None:
        """Keep `consumer`, which is on its subscription already."""
        only, by_id = self._only, self._by_id
        if only is None and not by_id:
            self._one_sub = consumer.subscription
        elif self._one_sub is not consumer.subscription and self._one_sub is not _UNKNOWN:
            self._one_sub = None
        if only is None and by_id is None:
            self._only = consumer
            return
        if by_id is None:
            assert only is not None
            by_id = self._by_id = {only.consumer_id: only}
            self._only = None
        by_id[consumer.consumer_id] = consumer

    def _remove_consumer(self, consumer: Consumer) -> None:
        if self._one_sub is None:  # those left may all be on one
            self._one_sub = _UNKNOWN
        if self._only is consumer:
            self._only = None
        elif self._by_id is not None and self._by_id.get(consumer.consumer_id) is consumer:
            del self._by_id[consumer.consumer_id]

    @property
    def address(self) -> str:
        """The peer's host:port, made when asked (logs, admin stats), not kept: 60 B of every
        connection (issue 40). "" once the connection is gone."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return f"{peer[0]}:{peer[1]}" if peer else ""

    @property
    def protocol_version(self) -> int:
        return self.conn.protocol_version

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.set_write_buffer_limits(high=8 * 1024 * 1024)
        self.service.connections.add(self)
        self._handshake_timer = asyncio.get_running_loop().call_later(
            self.service.config.keepAliveIntervalSeconds, self._handshake_expired
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_handshake_timer()
        self.service.connections.discard(self)
        for consumer in self.consumers:
            self._detach_consumer(consumer)
        ready, waiting = self.producers or {}, self._waiting_producers or {}
        for producer in [*ready.values(), *waiting.values()]:
            producer.topic.producer_access.remove(producer)
        self.producers = self._waiting_producers = None
        self.transport = None

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        for consumer in self.consumers:
            if consumer.subscription is not None:
                consumer.subscription.wake(consumer)

    def data_received(self, data: bytes) -> None:
        # One clock read per read from the socket: the wire timestamp of everything in it.
        received_us = now_us()
        self.seen = True
        self.conn.receive_data(data)
        if self._holds:
            if not self._paused_read_us:
                self._paused_read_us = received_us
            return
        self._handle(received_us)

    def _handle(self, received_us: int) -> None:
        """Handle the frames the codec holds, until they run out or reading is paused."""
        conn, handlers = self.conn, _HANDLERS
        self._paused_read_us = 0
        try:
            while not self.reading_paused and (event := conn.next_event()) is not ev.NEED_DATA:
                if type(event) is ev.ConnectionClosed:
                    break  # the client's EOF (eof_received): asyncio closes the transport
                handlers[type(event)](self, event, received_us)
            if self.reading_paused:
                self._paused_read_us = received_us
            else:
                # Between reads a connection holds no bytes it has read (with one connection
                # per consumer, the largest read's 135 B each: its SUBSCRIBE and FLOW).
                conn.release_buffer()
        except RemoteProtocolError as exc:
            log.warning("closing %s: %s", self.address, exc)
            self._flush()  # the codec's ERROR reply goes out before the close
            self.close()
            return
        self._flush()

    def pause_reading(self) -> None:
        """Stop reading, and stop handling what was read: a publish limit's window holds to
        the SEND that used its quota, not to the end of the socket read it came in (a read
        holds up to 256 KB here: 250 SENDs of 1 KB, which would all be published). Pulsar's
        precise publish limiter stops the connection's reads likewise; ACKs, FLOWs and PINGs
        on the connection wait too, as they do there."""
        self.reading_paused = True
        if self._open():
            assert self.transport is not None
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again, first the frames that waited since `pause_reading`."""
        if not self.reading_paused:
            return
        self.reading_paused = False
        if self._open():
            assert self.transport is not None
            self.transport.resume_reading()
            if not self._holds:
                self._handle(self._paused_read_us)

    def hold_reads(self) -> None:
        """Read, but leave what is read unhandled until `release_reads` (as many as holds).

        A Broadcast round holds the connections it has served until it ends: their clients'
        ACKs and FLOWs would otherwise be handled between the round's slices and lengthen it,
        which is the fan-out's latency (benchmarks/broker_core.py --acks-in-round, 100,000
        consumers: 1.9 -> 1.1 us of the round's CPU a delivery). Unlike `pause_reading` the
        socket is still read: a publish limit's pause is a separate state."""
        self._holds += 1

    def release_reads(self) -> None:
        """End one `hold_reads`; after the last, handle what waited (unless reading is paused)."""
        if self._holds <= 0:
            return  # released at the client's EOF already
        self._holds -= 1
        if not self._holds and self._paused_read_us and not self.reading_paused and self._open():
            self._handle(self._paused_read_us)

    def is_closing(self) -> bool:
        return not self._open()

    def eof_received(self) -> bool | None:
        self._holds = 0  # what waited is handled before the close: the last ACKs count
        self.data_received(b"")
        return None  # close the transport

    # -- before the handshake --------------------------------------------------------------
    def _handshake_expired(self) -> None:
        """Pulsar's rule: no CONNECT within keepAliveIntervalSeconds closes the connection (a
        silent socket otherwise holds a file descriptor and a place in `connections`)."""
        self._handshake_timer = None
        if self._open():
            log.warning(
                "closing %s: no CONNECT within %s s (keepAliveIntervalSeconds)",
                self.address,
                self.service.config.keepAliveIntervalSeconds,
            )
            self.close()

    def keep_alive(self) -> None:
        """One turn of the broker's keep-alive sweep (broker.server.keep_alive), as Pulsar's
        ServerCnx: a client silent for a whole interval gets a PING; one still silent an
        interval later is closed. Before the handshake, the handshake timeout applies."""
        if self.conn.state is not ConnectionState.CONNECTED or not self._open():
            return
        if self.seen or self.reading_paused:
            # A paused connection's PONG waits unread: Pulsar's ServerCnx likewise closes
            # for a missing answer only while auto-read is on.
            self.seen = self._pinged = False
        elif not self._pinged:
            self._pinged = True
            self._send(ev.Ping())
        else:
            log.warning(
                "closing %s: no answer to a PING within %s s (keepAliveIntervalSeconds)",
                self.address,
                self.service.config.keepAliveIntervalSeconds,
            )
            self.close()

    def _cancel_handshake_timer(self) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    # -- writing ---------------------------------------------------------------------------
    def _flush(self) -> None:
        buffers = self.conn.buffers_to_send()
        if buffers and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(buffers)

    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _send(self, event: ev.Event) -> None:
        if self._open():
            self.conn.send(event)
            self._write_soon()

    def _answer(self, type_: int, **fields: Any) -> None:
        """The Response to a request: `fields` carry its request_id, echoed."""
        self._send(ev.Response(command(type_, **fields)))

    def _succeed(self, request_id: int) -> None:
        """SUCCESS for `request_id`, from bytes (`_answer` builds a protobuf command)."""
        self._succeed_all([request_id])

    def _succeed_all(self, request_ids: list[int]) -> None:
        """SUCCESS for each of `request_ids`, in one buffer; the list is emptied."""
        if request_ids:
            if self._open():
                self.conn.send_successes(request_ids)
                self._write_soon()
            request_ids.clear()

    def write_frames(self, frames: list[bytes]) -> None:
        """Queue a dispatch's MESSAGE frames (`_open` and `_write_soon` inline: once per
        delivery with a connection per consumer)."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            self.conn.send_frames(frames)
            if not self._flush_due:
                self._flush_due = True
                self.service.turn_writes.add(self)

    def _write_soon(self) -> None:
        """Write what the codec queued once this turn of the event loop ends (or at the end
        of the read being handled, whichever comes first): the answers to a read, and the
        MESSAGE frames of every subscription dispatching to this connection in the turn,
        leave in one write (a client subscribing 100 consumers gets its 100 SUCCESS frames in
        one segment; 100 one-consumer Shared subscriptions per connection: 100 writes → 1).
        One callback writes for every connection of the turn (broker.server.turn_writes)."""
        if not self._flush_due:
            self._flush_due = True
            self.service.turn_writes.add(self)

    def flush_queued(self) -> None:
        self._flush_due = False
        self._flush()

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None:
        self._send(
            ev.Notice(command(T.ACTIVE_CONSUMER_CHANGE, consumer_id=consumer_id, is_active=active))
        )

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _error(self, request_id: int, error: int, message: str) -> None:
        self._answer(T.ERROR, request_id=request_id, error=error, message=message)

    def _refuse(self, req: rq.ClientRequest, refused: Refusal) -> None:
        """Answer `req` with a refusal, in the shape its client waits for (the codec's)."""
        if self._open():
            self.conn.refuse(req, refused.server_error, refused.message)
            self._write_soon()

    # -- handlers --------------------------------------------------------------------------
    def _on_connect(self, event: ev.Connect, now: int) -> None:
        """The codec has answered CONNECTED already; only the client's wishes are kept."""
        self._cancel_handshake_timer()
        self.sends_broker_entry_metadata = event.supports_broker_entry_metadata

    def _on_request(self, req: rq.ClientRequest, now: int) -> None:
        """A request, after the one check every request naming a topic passes first."""
        if isinstance(req, _NAMED) and (refused := topic_refusal(req.topic)) is not None:
            self._refuse(req, refused)
            return
        _REQUESTS[type(req)](self, req)

    def _on_partitioned_metadata(self, req: rq.PartitionedMetadata) -> None:
        self._answer(
            T.PARTITIONED_METADATA_RESPONSE,
            request_id=req.request_id,
            partitions=self.service.partitions_of(req.topic),
            response=pb.CommandPartitionedTopicMetadataResponse.Success,
        )

    def _on_lookup(self, req: rq.Lookup) -> None:
        self._answer(
            T.LOOKUP_RESPONSE,
            request_id=req.request_id,
            brokerServiceUrl=self.service.config.advertised_url,
            brokerServiceUrlTls=self.service.config.advertised_tls_url,
            response=pb.CommandLookupTopicResponse.Connect,
            authoritative=True,
        )

    def _topic_for(self, name: str, request_ids: Iterable[int]) -> Topic | None:
        """The topic `name`, or None after answering InvalidTopicName to each of
        `request_ids` (a name that passed `topic_refusal` may still be one persistent storage
        cannot hold)."""
        try:
            return self.service.topic(name)
        except ValueError as exc:
            for request_id in request_ids:
                self._error(request_id, pb.InvalidTopicName, str(exc))
            return None

    def _on_producer(self, req: rq.Producer) -> None:
        """Schema first, then the topic's access rules (broker.core.producer_access), as
        Pulsar's ServerCnx.handleProducer; the same producer id again is answered again."""
        known = self.producers.get(req.producer_id) if self.producers else None
        if known is not None:
            self._answer(T.PRODUCER_SUCCESS, request_id=req.request_id, producer_name=known.name)
            return
        if self._waiting_producers and req.producer_id in self._waiting_producers:
            self._error(
                req.request_id, pb.ServiceNotReady, "Producer is already present on the connection"
            )
            return
        topic = self._topic_for(req.topic, (req.request_id,))
        if topic is None:
            return
        version = producer_admission(self.service.config, self.service.schemas, topic, req.schema)
        if isinstance(version, Refusal):
            self._refuse(req, version)
            return
        name = req.producer_name or f"fanout-{self.service.instance_id}-{next(_producer_names)}"
        producer = Producer(
            req.producer_id,
            name,
            topic,
            self.address,
            access_mode=req.access_mode,
            epoch=req.epoch,
            owner=self,
        )
        producer.on_fenced = functools.partial(self._producer_fenced, producer)
        ready = functools.partial(self._producer_ready, producer, req.request_id, version)
        try:
            admitted, epoch = topic.producer_access.admit(producer, req.topic_epoch, ready)
        except ProducerRefused as exc:
            self._error(req.request_id, exc.server_error, str(exc))
            return
        if not admitted:
            if self._waiting_producers is None:
                self._waiting_producers = {}
            self._waiting_producers[req.producer_id] = producer
            self._answer(
                T.PRODUCER_SUCCESS,
                request_id=req.request_id,
                producer_name=name,
                producer_ready=False,
            )
            return
        self._add_producer(producer)
        self._producer_success(producer, req.request_id, version, epoch)

    def _add_producer(self, producer: Producer) -> None:
        if self.producers is None:
            self.producers = {}
        self.producers[producer.producer_id] = producer

    def _producer_success(
        self, producer: Producer, request_id: int, version: bytes | None, epoch: int | None
    ) -> None:
        fields: dict[str, Any] = {}
        if version is not None:
            fields["schema_version"] = version
        if epoch is not None:
            fields["topic_epoch"] = epoch
        self._answer(
            T.PRODUCER_SUCCESS, request_id=request_id, producer_name=producer.name, **fields
        )

    def _producer_ready(
        self,
        producer: Producer,
        request_id: int,
        version: bytes | None,
        epoch: int | None,
        refused: ProducerRefused | None,
    ) -> None:
        """A waiting (WaitForExclusive) producer got the topic, or was refused meanwhile."""
        waiting = self._waiting_producers
        if waiting is None or waiting.pop(producer.producer_id, None) is None:
            return
        if refused is not None:
            self._error(request_id, refused.server_error, str(refused))
            return
        self._add_producer(producer)
        self._producer_success(producer, request_id, version, epoch)

    def _producer_fenced(self, producer: Producer) -> None:
        """Another producer took the topic (ExclusiveWithFencing): the client is told its
        producer is closed; when it comes back, access control refuses it."""
        if self.producers and self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            self._send(
                ev.Notice(command(T.CLOSE_PRODUCER, producer_id=producer.producer_id, request_id=0))
            )

    def _on_send(self, send: ev.Send, received_us: int) -> None:
        """A SEND the codec checked (checksum, metadata): publish, and receipt in order."""
        producer = self.producers.get(send.producer_id) if self.producers else None
        if producer is None:
            self._send_error(send, pb.UnknownError, "unknown producer")
            return
        meta = send.metadata
        assert meta is not None  # a server's codec always parses it
        topic = producer.topic
        if meta.deliver_at_time and topic.max_delivery_delay_ms:  # delayed: ask (off the hot path)
            refused = delivery_delay_refusal(topic, meta.deliver_at_time, meta.publish_time)
            if refused is not None:
                self._send_error(send, refused.server_error, refused.message)
                return
        key = meta.ordering_key or meta.partition_key.encode()
        producer.messages_in += 1
        producer.bytes_in += len(send.payload)
        gate = producer.topic.publish_gate
        if gate is not None and self.transport is not None:
            # A publish rate limit: this SEND completes; the next ones wait to be handled.
            gate.admit(send.num_messages, len(send.payload), self)
        if meta.deliver_at_time and (on_delayed := producer.topic.on_delayed_message) is not None:
            on_delayed()  # the topic's Shared subscriptions start tracking delayed entries
        task = asyncio.ensure_future(
            producer.topic.publish(send.payload, key, received_us, meta.publish_time)
        )
        # Receipts leave in SEND order: each waits for the previous one of its producer.
        previous = producer.pending[-1] if producer.pending else None
        producer.pending.append(task)
        asyncio.ensure_future(self._receipt(producer, send, task, previous))

    async def _receipt(self, producer: Producer, send: ev.Send, task, previous) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            entry = await task
        except Exception as exc:  # storage failure: the client must hear it, not time out
            log.exception("persisting a message failed")
            self._send_error(send, pb.PersistenceError, str(exc))
        else:
            self._send(
                ev.SendReceipt(
                    send.producer_id,
                    send.sequence_id,
                    entry.ledger_id,
                    entry.entry_id,
                    send.highest_sequence_id,
                )
            )
        finally:
            producer.pending.remove(task)

    def _send_error(self, send: ev.Send, error: int, message: str) -> None:
        """SEND_ERROR for one SEND: the client fails that message instead of timing out."""
        self._send(ev.SendError(send.producer_id, send.sequence_id, error, message))

    def _on_subscribe(self, req: rq.Subscribe) -> None:
        self._subscribe(req, [])

    def _on_subscribe_run(self, run: rq.SubscribeRun, now: int) -> None:
        """SUBSCRIBEs in a row that differ only in their ids and consumer names (a client
        subscribing its connection's consumers in one write): what a Subscribe each would do,
        with the topic's name checked, the topic looked up and the mode chosen once, as each
        depends only on what they share."""
        req = run.subscribe
        if (refused := topic_refusal(req.topic)) is not None:
            for each in run.requests():
                self._refuse(each, refused)
            return
        more = zip(run.consumer_ids, run.request_ids, run.consumer_names, strict=True)
        self._subscribe(req, list(more))

    def _subscribe(self, req: rq.Subscribe, more: list[tuple[int, int, str | None]]) -> None:
        """`req`'s consumer, then those of its run (`more`: their consumer id, request id and
        name), each joining the subscription (`_join`)."""
        request_ids = itertools.chain((req.request_id,), (rid for _, rid, _ in more))
        topic = self._topic_for(req.topic, request_ids)
        if topic is None:
            return
        requested = self.service.subscription_mode(req)
        ranges = _sticky_ranges(req)
        join = self._join
        answered: list[int] = []
        join(
            req,
            topic,
            requested,
            ranges,
            req.consumer_id,
            req.request_id,
            req.consumer_name,
            answered,
        )
        for consumer_id, request_id, name in more:
            join(req, topic, requested, ranges, consumer_id, request_id, name, answered)
        self._succeed_all(answered)

    def _join(
        self,
        req: rq.Subscribe,
        topic: Topic,
        requested: str,
        ranges: tuple[tuple[int, int], ...] | None,
        consumer_id: int,
        request_id: int,
        name: str | None,
        answered: list[int],
    ) -> None:
        """The consumer `req` asks for, or one of its run (these ids and name in its stead),
        joins its subscription on `topic` in mode `requested`. Its SUCCESS waits in `answered`
        to leave with the run's (`_succeed_all`); a refusal leaves at once, after the SUCCESSes
        before it, so the answers keep the requests' order."""
        if self.consumer_by_id(consumer_id) is not None:
            # The client re-subscribes after a timeout with the same id: answer success again.
            answered.append(request_id)
            return
        refused = consumer_admission(
            self.service.config,
            self.service.schemas,
            topic,
            req.subscription,
            requested,
            req.durable,
            req.schema,
        )
        if refused is not None:
            self._succeed_all(answered)
            self._refuse(_with_ids(req, consumer_id, request_id, name), refused)
            return
        sub = topic.subscriptions.get(req.subscription)
        if sub is None:
            earliest = req.initial_position is rq.InitialPosition.EARLIEST
            start = subscription_start(topic, req)
            sub = topic.subscription(
                req.subscription, requested, earliest, start=start, durable=req.durable
            )
        consumer = Consumer(
            consumer_id=consumer_id,
            name=name or f"{req.subscription}-{consumer_id}",
            wire=self,
            priority=req.priority_level,
            hash_ranges=ranges,
        )
        try:
            sub.add_consumer(consumer)
        except SubscriptionError as exc:
            if not sub.durable and not sub.consumers:
                topic.remove_subscription(sub.name)
            self._succeed_all(answered)
            self._error(request_id, exc.server_error, str(exc))
            return
        self._add_consumer(consumer)
        answered.append(request_id)

    def _consumer(self, consumer_id: int) -> Consumer | None:
        consumer = self.consumer_by_id(consumer_id)
        if consumer is None or consumer.subscription is None:
            return None
        return consumer

    def _on_flow(self, flow: ev.Flow, now: int) -> None:
        consumer = self._consumer(flow.consumer_id)
        if consumer is not None and consumer.subscription is not None:
            consumer.subscription.on_flow(consumer, flow.permits)

    def _on_flow_run(self, run: ev.FlowRun, now: int) -> None:
        """FLOWs of the same permits for many consumers: what a Flow each would do."""
        permits = run.permits
        for consumer_id in run.consumer_ids:
            consumer = self._consumer(consumer_id)
            if consumer is not None and consumer.subscription is not None:
                consumer.subscription.on_flow(consumer, permits)

    def _on_ack(self, ack: ev.Ack, now: int) -> None:
        consumer = self.consumer_by_id(ack.consumer_id)
        if consumer is not None and (sub := consumer.subscription) is not None:
            index_of = sub.topic.log.index_of
            indexes = [index_of(ledger_id, entry_id) for ledger_id, entry_id in ack.message_ids]
            sub.on_ack(consumer, ack.cumulative, indexes)
        if ack.request_id is not None:
            self._answer(T.ACK_RESPONSE, consumer_id=ack.consumer_id, request_id=ack.request_id)

    def _on_ack_run(self, run: ev.AckRun, now: int) -> None:
        """ACKs of one message for many consumers (a broadcast's consumers of this connection
        acknowledging the same entry, or one-consumer subscriptions each acknowledging it):
        handed to each subscription as one run, the entry's index looked up once a topic.

        A run for every consumer of the connection, in the order they subscribed, all on one
        subscription (a broadcast client acknowledging an entry) takes them as they are kept,
        compared in C, where looking each id up was 0.15 us an ack."""
        ids = run.consumer_ids
        by_id = self._by_id
        groups: _AckGroups
        sub = self._one_sub  # None (several subscriptions, as Shared's): nothing to compare
        if sub is not None and by_id is not None and len(by_id) == len(ids) and list(by_id) == ids:
            if sub is _UNKNOWN:
                sub = self._one_sub = _one_subscription(by_id.values())
            if sub is not None:
                groups = [(cast(ConsumerSubscription, sub), list(by_id.values()))]
            else:
                groups = self._ack_groups_of(ids)
        else:
            groups = self._ack_groups_of(ids)
        cumulative, ledger_id, entry_id = run.cumulative, run.ledger_id, run.entry_id
        entry_log: EntryLog | None = None
        index = 0
        for sub, consumers in groups:
            if sub.topic.log is not entry_log:
                entry_log = sub.topic.log
                index = entry_log.index_of(ledger_id, entry_id)
            sub.on_ack_run(consumers, cumulative, index)

    def _ack_groups_of(self, consumer_ids: list[int]) -> _AckGroups:
        """The connection's consumers of `consumer_ids` that are on a subscription, in order,
        in runs of one subscription (unknown ids left out)."""
        by_id = self._by_id
        consumer_of = by_id.get if by_id is not None else self.consumer_by_id
        groups: _AckGroups = []
        group: list[Consumer] = []
        sub: ConsumerSubscription | None = None
        for consumer_id in consumer_ids:
            consumer = consumer_of(consumer_id)
            if consumer is None or (its := consumer.subscription) is None:
                continue
            if its is not sub:
                sub, group = its, []
                groups.append((its, group))
            group.append(consumer)
        return groups

    def _on_redeliver(self, req: rq.RedeliverUnacknowledged, now: int) -> None:
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            return
        log_ = consumer.subscription.topic.log
        ids = [log_.index_of(m.ledger_id, m.entry_id) for m in req.message_ids] or None
        consumer.subscription.on_redeliver(consumer, ids)

    def _detach_consumer(self, consumer: Consumer, seeking: bool = False) -> None:
        """A non-durable subscription goes with its last consumer, unless the consumer was
        disconnected by a seek (it subscribes again to the position sought)."""
        self._remove_consumer(consumer)
        sub = consumer.subscription
        if sub is not None:
            sub.remove_consumer(consumer)
            if not sub.durable and not sub.consumers and not seeking:
                sub.topic.remove_subscription(sub.name)

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close `consumer` from the broker's side (CLOSE_CONSUMER): its client subscribes
        again, with fresh permits."""
        if self.consumer_by_id(consumer.consumer_id) is consumer:
            self._detach_consumer(consumer, seeking=True)
            self._send(
                ev.Notice(command(T.CLOSE_CONSUMER, consumer_id=consumer.consumer_id, request_id=0))
            )

    def _on_unsubscribe(self, req: rq.Unsubscribe) -> None:
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        if (refused := unsubscribe_refusal(sub, req.force)) is not None:
            self._refuse(req, refused)
            return
        self._detach_consumer(consumer)
        sub.topic.remove_subscription(sub.name)
        self._succeed(req.request_id)

    def _on_close_producer(self, req: rq.CloseProducer) -> None:
        producer = (self.producers or {}).pop(req.producer_id, None) or (
            self._waiting_producers or {}
        ).pop(req.producer_id, None)
        if producer is not None:
            producer.topic.producer_access.remove(producer)
        self._succeed(req.request_id)

    def _on_close_consumer(self, req: rq.CloseConsumer) -> None:
        consumer = self.consumer_by_id(req.consumer_id)
        if consumer is not None:
            self._detach_consumer(consumer)
        self._succeed(req.request_id)

    def _on_get_last_message_id(self, req: rq.GetLastMessageId) -> None:
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        log_ = sub.topic.log
        # An empty topic answers (-1, -1) as Pulsar does, which is 2**64 - 1 on the wire.
        last = log_.next_index - 1
        last_id = _message_id(*log_.position_of(last)) if last >= log_.first_index else _NO_ID
        # The cursor's mark-delete position: the official client compares it with the last id
        # to tell a Reader started at `latest` (or sought by time) whether a message is there.
        mark = sub.mark_delete
        mark_id = _message_id(*log_.position_of(mark)) if mark >= log_.first_index else _NO_ID
        self._answer(
            T.GET_LAST_MESSAGE_ID_RESPONSE,
            request_id=req.request_id,
            last_message_id=last_id,
            consumer_mark_delete_position=mark_id,
        )

    def _on_seek(self, req: rq.Seek) -> None:
        """To a message id or a publish time: the codec let through a seek with one of them."""
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        if req.message_id is not None:
            self._reset(sub, req.request_id, index_of_message(sub.topic.log, req.message_id))
        else:
            assert req.publish_time_ms is not None
            asyncio.ensure_future(self._seek_to_time(sub, req.request_id, req.publish_time_ms))

    async def _seek_to_time(self, sub: ConsumerSubscription, request_id: int, ms: int) -> None:
        try:
            index = await index_at_publish_time(sub.topic.log, ms)
        except Exception as exc:  # a read back from disk failed: the client must hear it
            log.exception("seeking by publish time failed")
            self._error(request_id, pb.UnknownError, f"seek failed: {exc}")
            return
        self._reset(sub, request_id, index)

    def _reset(self, sub: ConsumerSubscription, request_id: int, index: int) -> None:
        """As Pulsar's resetCursor: the subscription's consumers are disconnected, the cursor
        moves, then the seek is answered. The clients subscribe again with fresh permits (each
        drops what it had queued from before the seek); the official client expects the
        CLOSE_CONSUMER before the answer (it completes the seek on reconnecting)."""
        for consumer in list(sub.consumers):
            if isinstance(consumer.wire, ServerConnection):
                consumer.wire.disconnect_consumer(consumer)
        sub.seek(index)
        self._succeed(request_id)
        if not sub.durable:  # kept for its consumers to come back; not forever
            asyncio.get_running_loop().call_later(SEEK_RETURN_S, _drop_if_abandoned, sub)

    def _on_get_schema(self, req: rq.GetSchema) -> None:
        found = self.service.schemas.get(
            schema_topic(parse_topic(req.topic)[1]), req.schema_version
        )
        if found is None:
            self._answer(
                T.GET_SCHEMA_RESPONSE,
                request_id=req.request_id,
                error_code=pb.TopicNotFound,
                error_message="Topic not found or no-schema",
            )
            return
        schema, version = found
        self._answer(
            T.GET_SCHEMA_RESPONSE,
            request_id=req.request_id,
            schema=schema.to_pb(),
            schema_version=version,
        )

    def _on_get_topics_of_namespace(self, req: rq.GetTopicsOfNamespace) -> None:
        """The namespace's topic list for pattern subscriptions (broker.core.namespace)."""
        topics = topics_of_namespace(
            req.namespace, req.domain, self.service.known_topics(), self.service.partitioned
        )
        self._answer(
            T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
            request_id=req.request_id,
            topics=topics,
            filtered=False,
            topics_hash=topics_hash(topics),
            changed=True,
        )


_REQUESTS: dict[type[rq.ClientRequest], Callable[[ServerConnection, Any], None]] = {
    rq.PartitionedMetadata: ServerConnection._on_partitioned_metadata,
    rq.Lookup: ServerConnection._on_lookup,
    rq.Producer: ServerConnection._on_producer,
    rq.Subscribe: ServerConnection._on_subscribe,
    rq.Unsubscribe: ServerConnection._on_unsubscribe,
    rq.CloseProducer: ServerConnection._on_close_producer,
    rq.CloseConsumer: ServerConnection._on_close_consumer,
    rq.GetLastMessageId: ServerConnection._on_get_last_message_id,
    rq.Seek: ServerConnection._on_seek,
    rq.GetSchema: ServerConnection._on_get_schema,
    rq.GetTopicsOfNamespace: ServerConnection._on_get_topics_of_namespace,
}
"""Each request's handler, by its type. Plain functions called with the connection, one
table for all: a table of bound methods per connection was 2.6 KB (tracemalloc,
benchmarks/broker_core.py --per-connection 1), half of what the broker held per consumer."""

_HANDLERS: dict[type[ev.Event], Callable[[ServerConnection, Any, int], None]] = {
    ev.Connect: ServerConnection._on_connect,
    ev.Send: ServerConnection._on_send,
    ev.Flow: ServerConnection._on_flow,
    ev.FlowRun: ServerConnection._on_flow_run,
    ev.Ack: ServerConnection._on_ack,
    ev.AckRun: ServerConnection._on_ack_run,
    rq.SubscribeRun: ServerConnection._on_subscribe_run,
    rq.RedeliverUnacknowledged: ServerConnection._on_redeliver,
    **dict.fromkeys(_REQUESTS, ServerConnection._on_request),
}
"""Each event's handler, by its type (with the read's wire time)."""


def _drop_if_abandoned(sub: ConsumerSubscription) -> None:
    """A non-durable subscription whose consumers a seek disconnected and that none came
    back to goes, as it would have with its last consumer."""
    if not sub.consumers:
        sub.topic.remove_subscription(sub.name)


_NO_ID = rq.MessageId(-1, -1).to_pb()
"""Pulsar's (-1, -1): no entry."""


def _message_id(ledger_id: int, entry_id: int) -> pb.MessageIdData:
    """A position as a MessageIdData (entry id -1, "before the ledger's first", is Pulsar's
    int64 -1; the codec's MessageId wraps it onto the uint64 wire)."""
    return rq.MessageId(ledger_id, entry_id).to_pb()


def _with_ids(
    req: rq.Subscribe, consumer_id: int, request_id: int, name: str | None
) -> rq.Subscribe:
    """`req` with another consumer's ids and name (one of its run's, to refuse it)."""
    if (consumer_id, request_id, name) == (req.consumer_id, req.request_id, req.consumer_name):
        return req
    return dataclasses.replace(
        req, consumer_id=consumer_id, request_id=request_id, consumer_name=name
    )


def _sticky_ranges(req: rq.Subscribe) -> tuple[tuple[int, int], ...] | None:
    """A Key_Shared consumer's own key hash ranges (keySharedMeta STICKY); None otherwise."""
    meta = req.key_shared
    if req.sub_type is not rq.SubType.KEY_SHARED or meta is None:
        return None
    return meta.hash_ranges if meta.mode is rq.KeySharedMode.STICKY else None
