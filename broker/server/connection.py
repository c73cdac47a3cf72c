"""One client connection: a thin asyncio shell translating frames into calls on the core.

The codec enforces framing; this class maps each command type to a handler (a table, not a
long if-chain), answers errors with the ServerError codes the client understands, and keeps
dispatch off the read path: handlers only record state and schedule.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

from broker.core.consumer import Consumer
from broker.core.entry_log import now_us
from broker.core.topic import Producer, Topic
from broker.subscriptions.base import SubscriptionError
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.frames import FrameDecoder, encode_frame
from pulsar_protocol.payload import decode_payload

if TYPE_CHECKING:
    from broker.server.service import BrokerService

log = logging.getLogger("broker.connection")

SERVER_VERSION = "fanout-bench-broker 0.1"
MAX_PROTOCOL_VERSION = 20
_producer_names = itertools.count()


class ServerConnection(asyncio.Protocol):
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.decoder = FrameDecoder(service.config.maxMessageSize + 10 * 1024)
        self.transport: asyncio.Transport | None = None
        self.connected = False
        self.protocol_version = 0
        self.sends_broker_entry_metadata = False
        self.writable = True
        self.address = ""
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._handlers = {
            T.CONNECT: self._on_connect,
            T.PING: self._on_ping,
            T.PONG: lambda cmd, frame, now: None,
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.PRODUCER: self._on_producer,
            T.SEND: self._on_send,
            T.SUBSCRIBE: self._on_subscribe,
            T.FLOW: self._on_flow,
            T.ACK: self._on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
            T.UNSUBSCRIBE: self._on_unsubscribe,
            T.CLOSE_PRODUCER: self._on_close_producer,
            T.CLOSE_CONSUMER: self._on_close_consumer,
            T.GET_LAST_MESSAGE_ID: self._on_get_last_message_id,
            T.SEEK: self._on_seek,
            T.GET_SCHEMA: self._on_get_schema,
        }

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.set_write_buffer_limits(high=8 * 1024 * 1024)
        peer = transport.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if peer else ""
        self.service.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
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
        self.decoder.receive_data(data)
        try:
            while (frame := self.decoder.next_frame()) is not None:
                handler = self._handlers.get(frame.command.type)
                if handler is None:
                    raise RemoteProtocolError(f"unsupported command type {frame.command.type}")
                if not self.connected and frame.command.type != T.CONNECT:
                    raise RemoteProtocolError("first command must be CONNECT")
                handler(frame.command, frame, received_us)
        except RemoteProtocolError as exc:
            log.warning("closing %s: %s", self.address, exc)
            self._send(command(T.ERROR, request_id=0, error=exc.server_error, message=str(exc)))
            self.close()

    # -- writing ---------------------------------------------------------------------------
    def _send(self, cmd: pb.BaseCommand, payload: bytes | None = None) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(cmd, payload))

    def write_frames(self, frames: list[bytes]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(frames)

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None:
        self._send(command(T.ACTIVE_CONSUMER_CHANGE, consumer_id=consumer_id, is_active=active))

    def consumer_closed_by_broker(self, consumer_id: int) -> None:
        self._send(command(T.CLOSE_CONSUMER, consumer_id=consumer_id, request_id=0))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _error(self, request_id: int, error: int, message: str) -> None:
        self._send(command(T.ERROR, request_id=request_id, error=error, message=message))

    # -- handlers --------------------------------------------------------------------------
    def _on_connect(self, cmd, frame, now) -> None:
        c = cmd.connect
        self.protocol_version = min(c.protocol_version, MAX_PROTOCOL_VERSION)
        self.sends_broker_entry_metadata = c.feature_flags.supports_broker_entry_metadata
        self.connected = True
        self._send(
            command(
                T.CONNECTED,
                server_version=SERVER_VERSION,
                protocol_version=self.protocol_version,
                max_message_size=self.service.config.maxMessageSize,
            )
        )

    def _on_ping(self, cmd, frame, now) -> None:
        self._send(command(T.PONG))

    def _on_partitioned_metadata(self, cmd, frame, now) -> None:
        req = cmd.partitionMetadata
        self._send(
            command(
                T.PARTITIONED_METADATA_RESPONSE,
                request_id=req.request_id,
                partitions=self.service.partitions_of(req.topic),
                response=pb.CommandPartitionedTopicMetadataResponse.Success,
            )
        )

    def _on_lookup(self, cmd, frame, now) -> None:
        self._send(
            command(
                T.LOOKUP_RESPONSE,
                request_id=cmd.lookupTopic.request_id,
                brokerServiceUrl=self.service.config.advertised_url,
                response=pb.CommandLookupTopicResponse.Connect,
                authoritative=True,
            )
        )

    def _topic_for(self, req) -> Topic | None:
        """The request's topic, or None after answering InvalidTopicName."""
        try:
            return self.service.topic(req.topic)
        except ValueError as exc:
            self._error(req.request_id, pb.InvalidTopicName, str(exc))
            return None

    def _on_producer(self, cmd, frame, now) -> None:
        req = cmd.producer
        topic = self._topic_for(req)
        if topic is None:
            return
        name = req.producer_name or f"fanout-{self.service.instance_id}-{next(_producer_names)}"
        producer = Producer(req.producer_id, name, topic, self.address)
        self.producers[req.producer_id] = producer
        topic.producers[id(producer)] = producer
        self._send(command(T.PRODUCER_SUCCESS, request_id=req.request_id, producer_name=name))

    def _on_send(self, cmd, frame, received_us) -> None:
        send = cmd.send
        producer = self.producers.get(send.producer_id)
        if producer is None or frame.payload is None:
            self._send_error(send, pb.UnknownError, "unknown producer or empty SEND")
            return
        try:
            payload = decode_payload(frame.payload, verify=True)
        except RemoteProtocolError as exc:
            self._send_error(send, exc.server_error, str(exc))
            return
        meta = payload.metadata
        key = meta.ordering_key or meta.partition_key.encode()
        producer.messages_in += 1
        producer.bytes_in += len(frame.payload)
        task = asyncio.ensure_future(
            producer.topic.publish(frame.payload, key, received_us, meta.publish_time)
        )
        # Receipts leave in SEND order: each waits for the previous one of its producer.
        previous = producer.pending[-1] if producer.pending else None
        producer.pending.append(task)
        asyncio.ensure_future(self._receipt(producer, send, task, previous))

    async def _receipt(self, producer: Producer, send, task, previous) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            entry = await task
        except Exception as exc:  # storage failure: the client must hear it, not time out
            log.exception("persisting a message failed")
            self._send_error(send, pb.PersistenceError, str(exc))
        else:
            self._send(
                command(
                    T.SEND_RECEIPT,
                    producer_id=send.producer_id,
                    sequence_id=send.sequence_id,
                    message_id=pb.MessageIdData(ledgerId=entry.ledger_id, entryId=entry.entry_id),
                    highest_sequence_id=send.highest_sequence_id,
                )
            )
        finally:
            producer.pending.remove(task)

    def _send_error(self, send: pb.CommandSend, error: int, message: str) -> None:
        """SEND_ERROR for one SEND: the client fails that message instead of timing out."""
        self._send(
            command(
                T.SEND_ERROR,
                producer_id=send.producer_id,
                sequence_id=send.sequence_id,
                error=error,
                message=message,
            )
        )

    def _on_subscribe(self, cmd, frame, now) -> None:
        req = cmd.subscribe
        topic = self._topic_for(req)
        if topic is None:
            return
        if req.consumer_id in self.consumers:
            # The client re-subscribes after a timeout with the same id: answer success again.
            self._send(command(T.SUCCESS, request_id=req.request_id))
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
        self._send(command(T.SUCCESS, request_id=req.request_id))

    def _consumer(self, consumer_id: int) -> Consumer | None:
        consumer = self.consumers.get(consumer_id)
        if consumer is None or consumer.subscription is None:
            return None
        return consumer

    def _on_flow(self, cmd, frame, now) -> None:
        consumer = self._consumer(cmd.flow.consumer_id)
        if consumer is not None:
            consumer.subscription.on_flow(consumer, cmd.flow.messagePermits)

    def _on_ack(self, cmd, frame, now) -> None:
        ack = cmd.ack
        consumer = self._consumer(ack.consumer_id)
        if consumer is None:
            return
        log_ = consumer.subscription.topic.log
        indexes = [log_.index_of(m.ledgerId, m.entryId) for m in ack.message_id]
        consumer.subscription.on_ack(consumer, ack.ack_type == pb.CommandAck.Cumulative, indexes)
        if ack.HasField("request_id"):
            self._send(
                command(T.ACK_RESPONSE, consumer_id=ack.consumer_id, request_id=ack.request_id)
            )

    def _on_redeliver(self, cmd, frame, now) -> None:
        req = cmd.redeliverUnacknowledgedMessages
        consumer = self._consumer(req.consumer_id)
        if consumer is None:
            return
        log_ = consumer.subscription.topic.log
        ids = [log_.index_of(m.ledgerId, m.entryId) for m in req.message_ids] or None
        consumer.subscription.on_redeliver(consumer, ids)

    def _detach_consumer(self, consumer: Consumer) -> None:
        self.consumers.pop(consumer.consumer_id, None)
        if consumer.subscription is not None:
            consumer.subscription.remove_consumer(consumer)

    def _on_unsubscribe(self, cmd, frame, now) -> None:
        req = cmd.unsubscribe
        consumer = self._consumer(req.consumer_id)
        if consumer is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        if len(sub.consumers) > 1 and not req.force:
            self._error(req.request_id, pb.ConsumerBusy, "other consumers are connected")
            return
        self._detach_consumer(consumer)
        sub.topic.remove_subscription(sub.name)
        self._send(command(T.SUCCESS, request_id=req.request_id))

    def _on_close_producer(self, cmd, frame, now) -> None:
        producer = self.producers.pop(cmd.close_producer.producer_id, None)
        if producer is not None:
            producer.topic.producers.pop(id(producer), None)
        self._send(command(T.SUCCESS, request_id=cmd.close_producer.request_id))

    def _on_close_consumer(self, cmd, frame, now) -> None:
        consumer = self.consumers.get(cmd.close_consumer.consumer_id)
        if consumer is not None:
            self._detach_consumer(consumer)
        self._send(command(T.SUCCESS, request_id=cmd.close_consumer.request_id))

    def _on_get_last_message_id(self, cmd, frame, now) -> None:
        req = cmd.getLastMessageId
        consumer = self._consumer(req.consumer_id)
        if consumer is None:
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
        self._send(
            command(
                T.GET_LAST_MESSAGE_ID_RESPONSE, request_id=req.request_id, last_message_id=msg_id
            )
        )

    def _on_seek(self, cmd, frame, now) -> None:
        req = cmd.seek
        consumer = self._consumer(req.consumer_id)
        if consumer is None:
            self._error(req.request_id, pb.ConsumerNotFound, "no such consumer")
            return
        sub = consumer.subscription
        if req.HasField("message_id"):
            index = sub.topic.log.index_of(req.message_id.ledgerId, req.message_id.entryId)
        else:
            index = sub.topic.log.first_index
        sub.seek(index)
        self._send(command(T.SUCCESS, request_id=req.request_id))

    def _on_get_schema(self, cmd, frame, now) -> None:
        self._send(
            command(
                T.GET_SCHEMA_RESPONSE,
                request_id=cmd.getSchema.request_id,
                error_code=pb.TopicNotFound,
                error_message="no schema",
            )
        )
