"""One AMQP 0-9-1 connection to RabbitMQ: the gevent shell (drivers/peer/connection.py) over
the sans-IO codec (drivers/rabbitmq/protocol.py).

A connection carries consumersPerConnection consumers, each on a channel of its own (its own
basic.qos window and delivery tags), and a producer has a connection and a channel of its own
in confirm mode. A request is a run of methods sent in one write and answered by the last one's
reply (a subscribe: channel.open, exchange.declare, queue.declare, queue.bind, basic.qos and
basic.consume, answered by basic.consume-ok); a channel.close from the server in between is its
refusal, with RabbitMQ's code and text.

Acknowledgements are grouped (`ack_every`, consumer.ackEvery; protocol.ChannelAcks decides
when): the ones a read made due go in the write that follows it, and what still waits when the
driver closes the connection goes in its last write. On a stream an ack only gives the consumer
its prefetch credit back (the window stays open while ack_every is at most prefetchCount); on a
queue it also removes the messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gevent.event import AsyncResult
from gevent.pool import Group
from pamqp import commands

from drivers.base import ConsumerCallback
from drivers.net.deliveries import ReadDeliveries
from drivers.peer.connection import PeerConnection, RequestFailed
from drivers.rabbitmq import protocol
from drivers.rabbitmq.protocol import (
    NEED_DATA,
    ChannelAcks,
    ClientParser,
    ConnectionClosed,
    Delivery,
    Heartbeat,
    Method,
    Payloads,
)

log = logging.getLogger("drivers.rabbitmq")

Done = Callable[[int, Exception | None], None]
"""Called with the answer's receive time, or with the error that ended the wait."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Login:
    """What connection.start-ok and connection.open say."""

    username: str = "guest"
    password: str = "guest"
    virtual_host: str = "/"
    heartbeat_seconds: int = 0
    frame_max: int = protocol.DEFAULT_FRAME_MAX


class RabbitMqConnection(PeerConnection):
    def __init__(
        self,
        conn_id: int,
        host: str,
        port: int,
        group: Group,
        callback: ConsumerCallback,
        *,
        login: Login,
        connect_timeout: float,
        operation_timeout: float,
        on_closed: Callable[[PeerConnection], None] = lambda conn: None,
        ack_every: int = 1,
        payloads: Payloads | None = None,
    ) -> None:
        """`ack_every`: deliveries a channel acknowledges at once (consumer.ackEvery);
        `payloads`: the latest body read, shared with the process's other connections
        (protocol.Payloads)."""
        super().__init__(
            conn_id, host, port, group, connect_timeout=connect_timeout, on_closed=on_closed
        )
        self.login = login
        self.operation_timeout = operation_timeout
        self.frame_max = login.frame_max
        self.channel_max = 0
        self.server_version = ""
        self.refusal: ConnectionClosed | None = None
        """The server's connection.close, when it ended the connection."""
        self.consumers: dict[int, int] = {}
        """channel -> the harness's consumer index."""
        self._parser = ClientParser(login.frame_max, payloads)
        self._deliveries = ReadDeliveries(self, callback)
        self._acks = ChannelAcks(ack_every)
        self._waiting: dict[int, tuple[type, AsyncResult[int]]] = {}
        """channel -> (the method that answers its request, the request's result)."""
        self._next_channel = 1
        self._confirm_channel = 0
        self._published = 0
        self._unconfirmed: dict[int, Done] = {}
        """Publishes waiting for the broker's confirm, by sequence number (in order)."""

    def _hello(self) -> None:
        self.write_soon(protocol.PROTOCOL_HEADER)

    # -- requests ------------------------------------------------------------------------------
    def new_channel(self) -> int:
        if self.channel_max and self._next_channel > self.channel_max:
            raise RequestFailed(
                f"{self.address} allows {self.channel_max} channels on a connection "
                "(give the workload fewer consumersPerConnection)"
            )
        channel = self._next_channel
        self._next_channel += 1
        return channel

    def request(self, channel: int, methods: list[object], answer: type) -> int:
        """Open `channel` and send `methods` on it in one write; block until `answer` comes
        (returns its receive time) or the server closes the channel (RequestFailed with its
        code and text)."""
        result: AsyncResult[int] = AsyncResult()
        self._waiting[channel] = (answer, result)
        frames = [protocol.method(channel, commands.Channel.Open())]
        frames += [protocol.method(channel, m) for m in methods]
        self.write_soon(b"".join(frames))
        result.wait(self.operation_timeout)
        self._waiting.pop(channel, None)
        if not result.ready():
            self.consumers.pop(channel, None)
            self.write_soon(protocol.method(channel, commands.Channel.Close(200, "timeout", 0, 0)))
            raise RequestFailed("timeout")
        return result.get() or 0

    def consume(self, channel: int, index: int, methods: list[object]) -> int:
        """`request` ending with basic.consume for consumer `index`; its deliveries count
        from then on."""
        self.consumers[channel] = index
        self._acks.consuming(channel)
        try:
            return self.request(channel, methods, commands.Basic.ConsumeOk)
        except RequestFailed:
            self.consumers.pop(channel, None)
            raise

    def open_publisher(self, methods: list[object]) -> None:
        """A channel in confirm mode for this connection's publishes."""
        channel = self.new_channel()
        self.request(channel, [*methods, commands.Confirm.Select()], commands.Confirm.SelectOk)
        self._confirm_channel = channel

    def publish(
        self, exchange: str, routing_key: str, payload: bytes, persistent: bool, done: Done
    ) -> None:
        """basic.publish; `done` runs at the broker's confirm (basic.ack) or its nack."""
        if not self._confirm_channel:
            raise RequestFailed("publish before the confirm channel is open")
        self._queue(
            protocol.publish(
                self._confirm_channel,
                exchange,
                routing_key,
                payload,
                self.frame_max,
                persistent=persistent,
            )
        )
        self._published += 1
        self._unconfirmed[self._published] = done
        self.write_soon(b"")

    def ping(self) -> None:
        """A heartbeat frame (drivers.net.keep_alive), when heartbeats were agreed."""
        if not self.closed:
            self.write_soon(protocol.HEARTBEAT_FRAME)

    # -- the reader ------------------------------------------------------------------------------
    def _on_data(self, data: memoryview, receive_us: int, kernel_us: int) -> None:
        parser, deliveries, consumers = self._parser, self._deliveries, self.consumers
        acks = self._acks
        parser.receive_data(data)
        deliveries.begin(receive_us, kernel_us)
        try:
            while (event := parser.next_event()) is not NEED_DATA:
                if type(event) is Delivery:
                    channel = event.channel
                    index = consumers.get(channel)
                    if index is not None:
                        deliveries.add(index, event.payload)
                        acks.delivered(channel, event.delivery_tag)
                    continue
                deliveries.flush()  # deliveries first, in the order they came
                if type(event) is Method:
                    self._on_method(event, receive_us)
                elif type(event) is ConnectionClosed:
                    self._queue(protocol.close_ok_reply(event))
                    self._flush_now()
                    self.refusal = event
                    raise RequestFailed(f"RabbitMQ closed the connection: {event.text}")
                elif type(event) is not Heartbeat:
                    raise RequestFailed(f"unexpected {event!r}")
        except protocol.ProtocolError as exc:
            self._fail(f"protocol error from {self.address}: {exc}")
            raise RequestFailed(str(exc)) from None
        except RequestFailed as exc:
            self._fail(str(exc))
            raise
        finally:
            due = acks.due()
            if due and not self.closed:
                self._queue(due)

    def close(self) -> None:
        """What waits to be acknowledged goes first (a queue would otherwise take it back
        and keep it), in one send that does not wait; then the connection closes."""
        waiting = self._acks.waiting(self.consumers) if not self.closed else b""
        if waiting:
            try:
                self._queue(waiting)
                self._flush_now()
            except RequestFailed:
                pass  # lost already: nothing to acknowledge on
        super().close()

    def _on_method(self, event: Method, receive_us: int) -> None:
        m, channel = event.method, event.channel
        if channel == self._confirm_channel and isinstance(
            m, commands.Basic.Ack | commands.Basic.Nack
        ):
            error = None
            if isinstance(m, commands.Basic.Nack):
                error = RequestFailed("RabbitMQ refused the message (basic.nack)")
            self._confirmed(m.delivery_tag, m.multiple, receive_us, error)
            return
        waiting = self._waiting.get(channel)
        if waiting is not None and isinstance(m, waiting[0]):
            if not waiting[1].ready():
                waiting[1].set(receive_us)
            return
        if isinstance(m, commands.Channel.Close):
            self._queue(protocol.close_ok_reply(event))
            self._channel_closed(channel, f"{m.reply_text}")
        elif isinstance(m, commands.Basic.Cancel):
            index = self.consumers.pop(channel, None)
            log.warning("connection %d: the broker cancelled consumer %s", self.id, index)
        elif isinstance(m, commands.Connection.Start):
            self.server_version = str((m.server_properties or {}).get("version", ""))
            if "PLAIN" not in str(m.mechanisms).split():
                raise RequestFailed(f"the server offers no PLAIN login ({m.mechanisms})")
            self._queue(protocol.start_ok(self.login.username, self.login.password))
        elif isinstance(m, commands.Connection.Tune):
            data, self.frame_max, self.channel_max = protocol.tune_ok_and_open(
                m, self.login.frame_max, self.login.heartbeat_seconds, self.login.virtual_host
            )
            self._parser.frame_max = self.frame_max
            self._queue(data)
        elif isinstance(m, commands.Connection.OpenOk):
            self._set_ready()
        elif isinstance(m, commands.Connection.Blocked):
            log.warning("connection %d: RabbitMQ blocked publishing: %s", self.id, m.reason)
        # channel.open-ok, declare-ok, bind-ok, qos-ok on the way to a request's answer,
        # connection.unblocked, basic.cancel-ok: nothing to do

    def _confirmed(
        self, tag: int, multiple: bool, receive_us: int, error: Exception | None
    ) -> None:
        waiting = self._unconfirmed
        tags = [t for t in waiting if t <= tag] if multiple else [tag]
        for t in tags:
            done = waiting.pop(t, None)
            if done is not None:
                done(receive_us, error)

    def _channel_closed(self, channel: int, reason: str) -> None:
        error = RequestFailed(reason)
        waiting = self._waiting.pop(channel, None)
        if waiting is not None and not waiting[1].ready():
            waiting[1].set_exception(error)
        index = self.consumers.pop(channel, None)
        if index is not None:
            log.warning("connection %d: consumer %d's channel closed: %s", self.id, index, reason)
        if channel == self._confirm_channel:
            self._confirm_channel = 0
            self._fail_publishes(error)

    def _fail_publishes(self, error: Exception) -> None:
        waiting, self._unconfirmed = self._unconfirmed, {}
        for done in waiting.values():
            done(0, error)

    def _on_failed(self, error: RequestFailed) -> None:
        for _, result in self._waiting.values():
            if not result.ready():
                result.set_exception(error)
        self._waiting.clear()
        self._fail_publishes(error)
