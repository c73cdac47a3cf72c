"""One client connection: a thin asyncio shell translating codec events into calls on the core.

As uvicorn's h11_impl over h11: `data_received` feeds pulsar_protocol's Connection and hands
each event to a handler (a table by event type, and for requests by command type); the codec
enforces every rule of the wire (handshake, PING/PONG, request ids, the unknown-command
policy, SEND checksums) and queues its own answers, which this shell only writes. Handlers
record state and schedule; dispatch stays off the read path.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any, Protocol

from broker.config import BrokerConfig
from broker.core.consumer import Consumer, ConsumerSubscription
from broker.core.topic import Producer, Topic
from broker.core.topic_name import InvalidTopicName, parse_topic
from broker.subscriptions.base import SubscriptionError
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import FIELD_OF_TYPE, SERVER_BOUND_REQUESTS, T, command, refusal
from pulsar_protocol.connection import Connection
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.extensions import now_us
from pulsar_protocol.state import SERVER

log = logging.getLogger("broker.connection")

SERVER_VERSION = "fanout-bench-broker 0.1"
_producer_names = itertools.count()

PRE_HANDSHAKE_MAX_FRAME = 64 * 1024
"""The largest frame taken before the handshake. A CONNECT is a few hundred bytes (a few KB
with auth data); a peer that has not even said CONNECT must not make the broker buffer the
codec's limit after the handshake (maxMessageSize, 5 MB) for it."""


def _text_fields(type_: int) -> tuple[str, ...]:
    """The `string` fields of a request's body, topic first: protobuf hands a proto2 string
    that is not valid UTF-8 over as bytes instead of refusing the frame, so each is checked."""
    body = pb.BaseCommand.DESCRIPTOR.fields_by_name[FIELD_OF_TYPE[type_]].message_type
    assert body is not None  # every body field is a message
    names = [f.name for f in body.fields if f.type == f.TYPE_STRING and not f.is_repeated]
    return tuple(sorted(names, key=lambda name: name != "topic"))


_TEXT_FIELDS: dict[int, tuple[str, ...]] = {
    t: names for t in SERVER_BOUND_REQUESTS if (names := _text_fields(t))
}
"""Request type → the names it carries, read from the schema so that no request with a topic
(PARTITIONED_METADATA, LOOKUP, PRODUCER, SUBSCRIBE, GET_SCHEMA) reaches its handler unchecked."""


class ConnectionHost(Protocol):
    """What a connection needs of the broker service (broker.server.service.BrokerService),
    declared here so that the service imports its connections and not the reverse."""

    config: BrokerConfig
    instance_id: str
    connections: set[ServerConnection]

    def topic(self, name: str) -> Topic: ...

    def partitions_of(self, name: str) -> int: ...

    def subscription_mode(self, req: pb.CommandSubscribe) -> str: ...


class ServerConnection(asyncio.Protocol):
    def __init__(self, service: ConnectionHost) -> None:
        self.service = service
        max_size = service.config.maxMessageSize
        self.conn = Connection(
            SERVER,
            max_frame_size=max_size + 10 * 1024,
            handshake_max_frame_size=PRE_HANDSHAKE_MAX_FRAME,
            server_version=SERVER_VERSION,
            max_message_size=max_size,
        )
        self.transport: asyncio.Transport | None = None
        self._flush_due = False
        """A write of what the codec queued is scheduled for the end of this loop turn."""
        self.writable = True
        self.sends_broker_entry_metadata = False
        """The client asked for the stage stamps ahead of each payload (CONNECT's flags)."""
        self.address = ""
        self._handshake_timer: asyncio.TimerHandle | None = None
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._handlers: dict[type[ev.Event], Callable[[Any, int], None]] = {
            ev.Connect: self._on_connect,
            ev.Request: self._on_request,
            ev.Send: self._on_send,
            ev.Flow: self._on_flow,
            ev.Ack: self._on_ack,
            ev.AckRun: self._on_ack_run,
            ev.Notice: self._on_notice,
        }
        self._requests: dict[int, Callable[[Any], None]] = {
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.PRODUCER: self._on_producer,
            T.SUBSCRIBE: self._on_subscribe,
            T.UNSUBSCRIBE: self._on_unsubscribe,
            T.CLOSE_PRODUCER: self._on_close_producer,
            T.CLOSE_CONSUMER: self._on_close_consumer,
            T.GET_LAST_MESSAGE_ID: self._on_get_last_message_id,
            T.SEEK: self._on_seek,
            T.GET_SCHEMA: self._on_get_schema,
        }
        self._notices: dict[int, Callable[[Any], None]] = {
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
        }

    @property
    def protocol_version(self) -> int:
        return self.conn.protocol_version

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.set_write_buffer_limits(high=8 * 1024 * 1024)
        peer = transport.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if peer else ""
        self.service.connections.add(self)
        self._handshake_timer = asyncio.get_running_loop().call_later(
            self.service.config.keepAliveIntervalSeconds, self._handshake_expired
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_handshake_timer()
        self.service.connections.discard(self)
        for consumer in list(self.consumers.values()):
            self._detach_consumer(consumer)
        for producer in self.producers.values():
            producer.topic.producers.pop(id(producer), None)
        self.producers.clear()
        self.transport = None

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        for consumer in self.consumers.values():
            if consumer.subscription is not None:
                consumer.subscription.wake(consumer)

    def data_received(self, data: bytes) -> None:
        # One clock read per read from the socket: the wire timestamp of everything in it.
        received_us = now_us()
        conn, handlers = self.conn, self._handlers
        conn.receive_data(data)
        try:
            while (event := conn.next_event()) is not ev.NEED_DATA:
                if type(event) is ev.ConnectionClosed:
                    break  # the client's EOF (eof_received): asyncio closes the transport
                handlers[type(event)](event, received_us)
        except RemoteProtocolError as exc:
            log.warning("closing %s: %s", self.address, exc)
            self._flush()  # the codec's ERROR reply goes out before the close
            self.close()
            return
        self._flush()

    def eof_received(self) -> bool | None:
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

    def write_frames(self, frames: list[bytes]) -> None:
        if self._open():
            self.conn.send_frames(frames)
            self._write_soon()

    def _write_soon(self) -> None:
        """Write what the codec queued once this turn of the event loop ends (or at the end
        of the read being handled, whichever comes first): the answers to a read, and the
        MESSAGE frames of every subscription dispatching to this connection in the turn,
        leave in one write (a client subscribing 100 consumers gets its 100 SUCCESS frames in
        one segment; 100 one-consumer Shared subscriptions per connection: 100 writes → 1)."""
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_later)

    def _flush_later(self) -> None:
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

    def _names_valid(self, type_: int, body: Any, fields: tuple[str, ...]) -> bool:
        """Whether the request's topic and other names may be used; if not, the client has its
        refusal (the connection stays). The one check before every handler that takes a name,
        as Pulsar's ServerCnx.validateTopicName."""
        for name in fields:
            value = getattr(body, name)
            if name == "topic":
                try:
                    parse_topic(value)
                except InvalidTopicName as exc:
                    self._send(
                        ev.Response(refusal(type_, body.request_id, pb.InvalidTopicName, str(exc)))
                    )
                    return False
            elif not isinstance(value, str):
                message = f"{name} is not valid UTF-8: {value[:64]!r}"
                self._send(
                    ev.Response(refusal(type_, body.request_id, pb.NotAllowedError, message))
                )
                return False
        return True

    # -- handlers --------------------------------------------------------------------------
    def _on_connect(self, event: ev.Connect, now: int) -> None:
        """The codec has answered CONNECTED already; only the client's wishes are kept."""
        self._cancel_handshake_timer()
        self.sends_broker_entry_metadata = event.supports_broker_entry_metadata

    def _on_request(self, event: ev.Request, now: int) -> None:
        body = event.body
        fields = _TEXT_FIELDS.get(event.type)
        if fields is not None and not self._names_valid(event.type, body, fields):
            return
        self._requests[event.type](body)

    def _on_notice(self, event: ev.Notice, now: int) -> None:
        self._notices[event.type](event.body)

    def _on_partitioned_metadata(self, req: pb.CommandPartitionedTopicMetadata) -> None:
        self._answer(
            T.PARTITIONED_METADATA_RESPONSE,
            request_id=req.request_id,
            partitions=self.service.partitions_of(req.topic),
            response=pb.CommandPartitionedTopicMetadataResponse.Success,
        )

    def _on_lookup(self, req: pb.CommandLookupTopic) -> None:
        self._answer(
            T.LOOKUP_RESPONSE,
            request_id=req.request_id,
            brokerServiceUrl=self.service.config.advertised_url,
            response=pb.CommandLookupTopicResponse.Connect,
            authoritative=True,
        )

    def _topic_for(self, req: pb.CommandProducer | pb.CommandSubscribe) -> Topic | None:
        """The request's topic, or None after answering InvalidTopicName (a name that passed
        `_names_valid` may still be one persistent storage cannot hold)."""
        try:
            return self.service.topic(req.topic)
        except ValueError as exc:
            self._error(req.request_id, pb.InvalidTopicName, str(exc))
            return None

    def _on_producer(self, req: pb.CommandProducer) -> None:
        topic = self._topic_for(req)
        if topic is None:
            return
        name = req.producer_name or f"fanout-{self.service.instance_id}-{next(_producer_names)}"
        producer = Producer(req.producer_id, name, topic, self.address)
        self.producers[req.producer_id] = producer
        topic.producers[id(producer)] = producer
        self._answer(T.PRODUCER_SUCCESS, request_id=req.request_id, producer_name=name)

    def _on_send(self, send: ev.Send, received_us: int) -> None:
        """A SEND the codec checked (checksum, metadata): publish, and receipt in order."""
        producer = self.producers.get(send.producer_id)
        if producer is None:
            self._send_error(send, pb.UnknownError, "unknown producer")
            return
        meta = send.metadata
        assert meta is not None  # a server's codec always parses it
        key = meta.ordering_key or meta.partition_key.encode()
        producer.messages_in += 1
        producer.bytes_in += len(send.payload)
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

    def _on_subscribe(self, req: pb.CommandSubscribe) -> None:
        topic = self._topic_for(req)
        if topic is None:
            return
        if req.consumer_id in self.consumers:
            # The client re-subscribes after a timeout with the same id: answer success again.
            self._answer(T.SUCCESS, request_id=req.request_id)
            return
        requested = self.service.subscription_mode(req)
        sub = topic.subscriptions.get(req.subscription)
        if (
            sub is not None
            and sub.mode != requested
            and not (sub.mode == "Broadcast" and requested != "Exclusive")
        ):
            self._error(
                req.request_id,
                pb.ConsumerBusy,
                f"subscription {req.subscription!r} is {sub.mode}, not {requested}",
            )
            return
        if sub is None:
            earliest = req.initialPosition == pb.CommandSubscribe.Earliest
            sub = topic.subscription(req.subscription, requested, earliest)
        consumer = Consumer(
            consumer_id=req.consumer_id,
            name=req.consumer_name or f"{req.subscription}-{req.consumer_id}",
            wire=self,
            priority=req.priority_level,
            address=self.address,
        )
        try:
            sub.add_consumer(consumer)
        except SubscriptionError as exc:
            self._error(req.request_id, exc.server_error, str(exc))
            return
        self.consumers[req.consumer_id] = consumer
        self._answer(T.SUCCESS, request_id=req.request_id)

    def _consumer(self, consumer_id: int) -> Consumer | None:
        consumer = self.consumers.get(consumer_id)
        if consumer is None or consumer.subscription is None:
            return None
        return consumer

    def _on_flow(self, flow: ev.Flow, now: int) -> None:
        consumer = self._consumer(flow.consumer_id)
        if consumer is not None and consumer.subscription is not None:
            consumer.subscription.on_flow(consumer, flow.permits)

    def _on_ack(self, ack: ev.Ack, now: int) -> None:
        consumer = self.consumers.get(ack.consumer_id)
        if consumer is not None and (sub := consumer.subscription) is not None:
            index_of = sub.topic.log.index_of
            indexes = [index_of(ledger_id, entry_id) for ledger_id, entry_id in ack.message_ids]
            sub.on_ack(consumer, ack.cumulative, indexes)
        if ack.request_id is not None:
            self._answer(T.ACK_RESPONSE, consumer_id=ack.consumer_id, request_id=ack.request_id)

    def _on_ack_run(self, run: ev.AckRun, now: int) -> None:
        """ACKs of one message for many consumers (a broadcast's consumers of this connection
        acknowledging the same entry): handed to each subscription as one run, its index
        looked up once."""
        consumers = self.consumers
        group: list[Consumer] = []
        sub: ConsumerSubscription | None = None
        for consumer_id in run.consumer_ids:
            consumer = consumers.get(consumer_id)
            if consumer is None or (its := consumer.subscription) is None:
                continue
            if its is not sub:
                if group:
                    self._ack_group(sub, group, run)
                sub, group = its, []
            group.append(consumer)
        if group:
            self._ack_group(sub, group, run)

    @staticmethod
    def _ack_group(sub: ConsumerSubscription | None, group: list[Consumer], run: ev.AckRun) -> None:
        assert sub is not None
        sub.on_ack_run(group, run.cumulative, sub.topic.log.index_of(run.ledger_id, run.entry_id))

    def _on_redeliver(self, req: pb.CommandRedeliverUnacknowledgedMessages) -> None:
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            return
        log_ = consumer.subscription.topic.log
        ids = [log_.index_of(m.ledgerId, m.entryId) for m in req.message_ids] or None
        consumer.subscription.on_redeliver(consumer, ids)

    def _detach_consumer(self, consumer: Consumer) -> None:
        self.consumers.pop(consumer.consumer_id, None)
        if consumer.subscription is not None:
            consumer.subscription.remove_consumer(consumer)

    def _on_unsubscribe(self, req: pb.CommandUnsubscribe) -> None:
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        if len(sub.consumers) > 1 and not req.force:
            self._error(req.request_id, pb.ConsumerBusy, "other consumers are connected")
            return
        self._detach_consumer(consumer)
        sub.topic.remove_subscription(sub.name)
        self._answer(T.SUCCESS, request_id=req.request_id)

    def _on_close_producer(self, req: pb.CommandCloseProducer) -> None:
        producer = self.producers.pop(req.producer_id, None)
        if producer is not None:
            producer.topic.producers.pop(id(producer), None)
        self._answer(T.SUCCESS, request_id=req.request_id)

    def _on_close_consumer(self, req: pb.CommandCloseConsumer) -> None:
        consumer = self.consumers.get(req.consumer_id)
        if consumer is not None:
            self._detach_consumer(consumer)
        self._answer(T.SUCCESS, request_id=req.request_id)

    def _on_get_last_message_id(self, req: pb.CommandGetLastMessageId) -> None:
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        last = sub.topic.log.read(sub.topic.log.next_index - 1, 1)
        # An empty topic answers (-1, -1) as Pulsar does, which is 2**64 - 1 on the wire.
        none = (1 << 64) - 1
        msg_id = (
            pb.MessageIdData(ledgerId=last[0].ledger_id, entryId=last[0].entry_id)
            if last
            else pb.MessageIdData(ledgerId=none, entryId=none)
        )
        self._answer(
            T.GET_LAST_MESSAGE_ID_RESPONSE, request_id=req.request_id, last_message_id=msg_id
        )

    def _on_seek(self, req: pb.CommandSeek) -> None:
        consumer = self._consumer(req.consumer_id)
        if consumer is None or consumer.subscription is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        if req.HasField("message_id"):
            index = sub.topic.log.index_of(req.message_id.ledgerId, req.message_id.entryId)
        else:
            index = sub.topic.log.first_index
        sub.seek(index)
        self._answer(T.SUCCESS, request_id=req.request_id)

    def _on_get_schema(self, req: pb.CommandGetSchema) -> None:
        self._answer(
            T.GET_SCHEMA_RESPONSE,
            request_id=req.request_id,
            error_code=pb.TopicNotFound,
            error_message="no schema",
        )
