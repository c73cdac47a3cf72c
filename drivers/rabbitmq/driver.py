"""The RabbitMQ driver: `drivers.rabbitmq.driver:RabbitMqDriver` (drivers/rabbitmq.yaml), AMQP
0-9-1.

What maps to what:
- a topic is a durable fanout exchange named as the harness names the topic; a producer
  publishes to it on a channel in confirm mode, and the broker's basic.ack is the send's receipt
  (Pulsar's send receipt); messages are persistent (delivery mode 2) unless producer.persistent
  is false; partitionsPerTopic > 1 is refused;
- a subscription is a queue bound to the exchange, named `<topic>.<subscription>`:
  - Broadcast: a stream (`x-queue-type: stream`, RabbitMQ 3.9+), one append-only log for the
    whole subscription, which each consumer reads at an offset of its own from `next` (the
    Broadcast subscription's virtual cursors, seed 000). `next` is the offset after the last
    chunk written when the consumer attaches: the consumer gets the messages published after
    its basic.consume-ok, and none before. A stream is a run of segment files, and a reader
    attached at the end of the last one follows the writer into the next one when it rolls
    over (osiris opens the next segment when it reads past the end of its file), so `next` at
    a segment boundary skips nothing and repeats nothing: the boundary is a file's, never an
    offset's;
  - Shared, seed 000's baseline (one subscription per consumer): a queue of its own per
    subscription, durable, classic (or quorum: consumer.queueType), which the fanout exchange
    copies every message into; several consumers of one Shared subscription compete for its
    queue, as Pulsar's Shared consumers do;
  - Exclusive: the same queue, consumed with `exclusive` (a second consumer is refused);
  - Failover: the same queue with `x-single-active-consumer` (one consumer gets everything,
    the next takes over when it goes);
- each consumer has a channel of its own (its basic.qos window, consumer.prefetchCount);
  consumersPerConnection channels share a connection; a channel's deliveries are acknowledged
  consumer.ackEvery at a time, by one basic.ack (multiple), and the rest when the driver
  closes (drivers/rabbitmq/connection.py).

Refused, never emulated: Key_Shared (RabbitMQ routes by key to queues, not to the consumers of
one queue), ackHoles (acknowledgements here are cumulative per channel). A lost connection
loses its consumers for the rest of the run: no resubscribe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent import socket
from gevent.event import AsyncResult
from pamqp import commands

from drivers.base import ConsumerCallback, ConsumerSpec, DriverError, SubscribeResult
from drivers.config import (
    ConfigError,
    Parser,
    boolean,
    check_keys,
    choice,
    integer,
    parse_section,
    string,
)
from drivers.net.keep_alive import keep_alive
from drivers.peer.connection import RequestFailed, now_us
from drivers.peer.driver import PeerDriver
from drivers.peer.pool import Connections
from drivers.peer.settings import (
    ClientConfig,
    PeerUrls,
    check_service_url,
    client_keys,
    parse_client,
    section_dict,
)
from drivers.rabbitmq import protocol
from drivers.rabbitmq.connection import Login, RabbitMqConnection

SCHEME, DEFAULT_PORT = "amqp", 5672
REFUSED = {
    "Key_Shared": "RabbitMQ routes by key to queues, not to the consumers of one queue",
}
ACCESS_REFUSED, NOT_ALLOWED = 403, 530
MAX_MESSAGE_SIZE = 134_217_728
QUEUE_PROBE_S = 0.2
"""Between two attempts to declare a new quorum queue or attach to a new stream."""


def _any_string(value: object) -> str:
    """A string, empty allowed (a password may be)."""
    if not isinstance(value, str):
        return string(value)  # says what is wrong
    return value


_CLIENT: dict[str, tuple[str, Parser]] = {
    **client_keys(SCHEME),
    "username": ("username", string),
    "password": ("password", _any_string),
    "virtualHost": ("virtual_host", string),
    "heartbeatSeconds": ("heartbeat_seconds", integer(minimum=0)),
    "frameMaxBytes": ("frame_max_bytes", integer(minimum=4096)),
}
_PRODUCER: dict[str, tuple[str, Parser]] = {"persistent": ("persistent", boolean)}
_CONSUMER: dict[str, tuple[str, Parser]] = {
    "prefetchCount": ("prefetch_count", integer(minimum=1)),
    "ackEvery": ("ack_every", integer(minimum=1)),
    "queueType": ("queue_type", choice("classic", "quorum")),
    "queueExpiresSeconds": ("queue_expires_seconds", integer(minimum=0)),
}
_STREAM: dict[str, tuple[str, Parser]] = {
    "maxLengthBytes": ("max_length_bytes", integer(minimum=0)),
    "maxSegmentSizeBytes": ("max_segment_size_bytes", integer(minimum=1)),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RabbitMqClientConfig(ClientConfig):
    username: str = "guest"
    password: str = "guest"
    virtual_host: str = "/"
    heartbeat_seconds: int = 0
    """AMQP heartbeats (a frame each way every this many seconds); 0 = none, as agreed in
    connection.tune-ok."""
    frame_max_bytes: int = protocol.DEFAULT_FRAME_MAX


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    persistent: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    prefetch_count: int = 100
    ack_every: int = 50
    """Deliveries a channel acknowledges at once, one basic.ack (multiple); at most
    prefetch_count, or the broker would stop at prefetch_count unacknowledged before the ack
    is due. Half the window keeps it open with half of it to spare; 1 acknowledges every read
    (one send per delivery with one consumer per connection)."""
    queue_type: str = "classic"
    """The queues of Shared, Exclusive and Failover subscriptions: classic or quorum."""
    queue_expires_seconds: int = 300
    """x-expires: a subscription's queue unused this long is deleted (0 = kept), so that runs
    against a RabbitMQ of your own leave no queues filling behind them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamConfig:
    max_length_bytes: int = 1_000_000_000
    """x-max-length-bytes: the stream's retention (whole segments go); 0 = unlimited."""
    max_segment_size_bytes: int = 500_000_000
    """x-stream-max-segment-size-bytes (RabbitMQ's default)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RabbitMqConfig(PeerUrls):
    client: RabbitMqClientConfig = field(default_factory=RabbitMqClientConfig)
    producer: ProducerConfig = field(default_factory=ProducerConfig)
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)

    @classmethod
    def parse(cls, sections: Mapping[Any, object], where: str) -> RabbitMqConfig:
        check_keys(sections, ["client", "producer", "consumer", "stream"], where)
        consumer = ConsumerConfig(**parse_section(sections, "consumer", _CONSUMER, where))
        if consumer.ack_every > consumer.prefetch_count:
            raise ConfigError(
                f"{where}consumer.ackEvery is {consumer.ack_every}, more than "
                f"consumer.prefetchCount ({consumer.prefetch_count}): RabbitMQ would stop "
                "delivering before an ack is due (set it to at most prefetchCount)"
            )
        return cls(
            client=parse_client(sections, RabbitMqClientConfig, _CLIENT, where),
            producer=ProducerConfig(**parse_section(sections, "producer", _PRODUCER, where)),
            consumer=consumer,
            stream=StreamConfig(**parse_section(sections, "stream", _STREAM, where)),
        )

    @property
    def login(self) -> Login:
        c = self.client
        return Login(
            username=c.username,
            password=c.password,
            virtual_host=c.virtual_host,
            heartbeat_seconds=c.heartbeat_seconds,
            frame_max=c.frame_max_bytes,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "client": section_dict(self.client, _CLIENT),
            "producer": section_dict(self.producer, _PRODUCER),
            "consumer": section_dict(self.consumer, _CONSUMER),
            "stream": section_dict(self.stream, _STREAM),
        }

    @property
    def max_message_size(self) -> int:
        """RabbitMQ 3.10's default `max_message_size` (128 MiB), which the embedded node
        keeps: drivers.base.MessageSizeLimit, checked before a run."""
        return MAX_MESSAGE_SIZE

    def partitions_problem(self, partitions: int) -> str | None:
        if partitions <= 1:
            return None
        return "is not possible: a RabbitMQ exchange has no partitions (set it to 1)"


def queue_methods(spec: ConsumerSpec, config: RabbitMqConfig) -> list[object]:
    """What a consumer's channel sends before basic.consume: the topic's exchange, the
    subscription's queue (a stream for Broadcast), its binding, the prefetch window."""
    queue = f"{spec.topic}.{spec.subscription}"
    arguments: dict[str, Any]
    if spec.subscription_type == "Broadcast":
        arguments = {"x-queue-type": "stream"}
        if config.stream.max_length_bytes:
            arguments["x-max-length-bytes"] = config.stream.max_length_bytes
        arguments["x-stream-max-segment-size-bytes"] = config.stream.max_segment_size_bytes
    else:
        arguments = {"x-queue-type": config.consumer.queue_type}
        if config.consumer.queue_expires_seconds:
            arguments["x-expires"] = config.consumer.queue_expires_seconds * 1000
        if spec.subscription_type == "Failover":
            arguments["x-single-active-consumer"] = True
    return [
        commands.Exchange.Declare(exchange=spec.topic, exchange_type="fanout", durable=True),
        commands.Queue.Declare(queue=queue, durable=True, arguments=arguments),
        commands.Queue.Bind(queue=queue, exchange=spec.topic),
        commands.Basic.Qos(prefetch_count=config.consumer.prefetch_count),
        commands.Basic.Consume(
            queue=queue,
            consumer_tag=f"c{spec.index}",
            exclusive=spec.subscription_type == "Exclusive",
            arguments=(
                {"x-stream-offset": "next"} if spec.subscription_type == "Broadcast" else {}
            ),
        ),
    ]


class RabbitMqProducer:
    def __init__(self, conn: RabbitMqConnection, exchange: str, persistent: bool) -> None:
        self._conn = conn
        self._exchange = exchange
        self._persistent = persistent

    def send_async(
        self, key: bytes | None, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        routing_key = key.decode(errors="replace") if key else ""
        try:
            self._conn.publish(
                self._exchange,
                routing_key,
                payload,
                self._persistent,
                lambda receive_us, error: on_done(error),
            )
        except RequestFailed as exc:
            on_done(exc)

    def close(self) -> None:
        pass  # the driver closes the connection


class RabbitMqDriver(PeerDriver[RabbitMqConnection]):
    SCHEME = SCHEME
    DEFAULT_PORT = DEFAULT_PORT
    SYSTEM = "RabbitMQ"
    REFUSED = REFUSED

    def __init__(self) -> None:
        super().__init__()
        self._config = RabbitMqConfig()
        self._queues: dict[str, AsyncResult[None]] = {}
        """Streams and quorum queues this process has seen ready for consumers, by name."""
        self._payloads = protocol.Payloads()
        """The latest body read, shared by the connections' parsers."""

    def parse_config(self, sections: Mapping[Any, object], where: str) -> RabbitMqConfig:
        """Typed sections; kept, so that check_reachable (the coordinator's, on this very
        driver) logs in with them."""
        self._config = RabbitMqConfig.parse(sections, where)
        return self._config

    def check_reachable(self, service_url: str, timeout: float) -> None:
        """A TCP connect and the whole AMQP login (start, tune, open): a wrong username,
        password or virtual host stops the run before any worker starts, naming the key."""
        super().check_reachable(service_url, timeout)
        host, port = check_service_url(service_url, SCHEME, DEFAULT_PORT)
        login_check(host, port, self._config.login, timeout, service_url)

    def initialize(
        self,
        config: RabbitMqConfig,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        self._config = config
        self._initialize(config.client, callback, consumers_per_connection, service_url)
        seconds = config.client.heartbeat_seconds
        if seconds:
            self._group.spawn(keep_alive, lambda: self._ready().live, seconds / 2)

    def _make_connection(
        self,
        conn_id: int,
        host: str,
        port: int,
        callback: ConsumerCallback,
        client: ClientConfig,
        conns: Connections[RabbitMqConnection],
    ) -> RabbitMqConnection:
        return RabbitMqConnection(
            conn_id,
            host,
            port,
            self._group,
            callback,
            login=self._config.login,
            connect_timeout=float(client.connect_timeout_seconds),
            operation_timeout=float(client.operation_timeout_seconds),
            on_closed=conns.closed,
            ack_every=self._config.consumer.ack_every,
            payloads=self._payloads,
        )

    def create_producer(self, topic: str) -> RabbitMqProducer:
        conn = self._producer_connection(topic)
        try:
            conn.open_publisher(
                [commands.Exchange.Declare(exchange=topic, exchange_type="fanout", durable=True)]
            )
        except RequestFailed as exc:
            raise DriverError(f"producer on {topic}: {exc}") from None
        return RabbitMqProducer(conn, topic, self._config.producer.persistent)

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        self._check_mode(spec)
        if spec.ack_skip_every:
            raise DriverError(
                "ackHoles: RabbitMQ's acknowledgements are cumulative per channel here, so a "
                "hole cannot be left (drop ackHoles for this driver)"
            )
        start_us = now_us()
        conn: RabbitMqConnection | None = None
        try:
            self._queue_ready(spec)
            conn = self._ready().for_consumer(spec.index)
            conn.wait_ready()
            channel = conn.new_channel()
            end_us = conn.consume(channel, spec.index, queue_methods(spec, self._config))
        except RequestFailed as exc:
            conn_id = conn.id if conn else -1
            return SubscribeResult(
                spec.index, conn_id, start_us, max(start_us, now_us()), False, str(exc)
            )
        return SubscribeResult(spec.index, conn.id, start_us, max(start_us, end_us), True)

    def _queue_ready(self, spec: ConsumerSpec) -> None:
        """Declare the subscription's queue once per process, on a probe connection of its
        own, before any consumer's connection declares it too. Two cases need this, both
        closing the whole connection (INTERNAL_ERROR) if a consumer's channel met them:
        RabbitMQ 3.10 answers a stream's queue.declare before the stream's log has started,
        and a basic.consume in between fails with `stream_not_found`; and two declares of one
        new quorum queue at once (two consumers of one Shared subscription, in this process
        or in two workers) fail for one of them. The probe tries again until it works; the
        consumers' declares then find the queue there. Classic queues need no probe: the
        one-queue-per-consumer baseline would pay a connection per consumer for nothing."""
        if spec.subscription_type != "Broadcast" and self._config.consumer.queue_type != "quorum":
            return
        queue = f"{spec.topic}.{spec.subscription}"
        ready = self._queues.get(queue)
        if ready is None:
            ready = self._queues[queue] = AsyncResult()
            try:
                self._probe_queue(spec)
            except RequestFailed as exc:
                ready.set_exception(exc)
                del self._queues[queue]
            else:
                ready.set(None)
        ready.get()

    def _probe_queue(self, spec: ConsumerSpec) -> None:
        deadline = time.monotonic() + self._config.client.operation_timeout_seconds
        methods = queue_methods(spec, self._config)
        if spec.subscription_type == "Broadcast":
            answer: type = commands.Basic.ConsumeOk
        else:
            methods, answer = methods[:3], commands.Queue.BindOk
        while True:
            conn = self._ready().open()
            try:
                conn.wait_ready()
                # attached, never a consumer of the run: its deliveries count for no one
                conn.request(conn.new_channel(), methods, answer)
                return
            except RequestFailed:
                if time.monotonic() > deadline:
                    raise
            finally:
                conn.close()
            gevent.sleep(QUEUE_PROBE_S)


def login_check(host: str, port: int, login: Login, timeout: float, service_url: str) -> str:
    """Log in at host:port as `login` says and close; the server's version. Raises
    DriverError, one line naming the key to fix, when RabbitMQ refuses."""
    deadline = time.monotonic() + timeout
    parser = protocol.ClientParser(login.frame_max)
    where = f"RabbitMQ at {service_url}"
    stage = "login"
    version = ""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(protocol.PROTOCOL_HEADER)
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = sock.recv(65536)
            except OSError as exc:
                raise DriverError(f"{where}: no answer to the AMQP {stage} ({exc})") from None
            if not data:
                raise DriverError(_refusal(where, stage, None, login))
            parser.receive_data(data)
            while (event := parser.next_event()) is not protocol.NEED_DATA:
                if isinstance(event, protocol.ConnectionClosed):
                    sock.sendall(protocol.close_ok_reply(event))
                    raise DriverError(_refusal(where, stage, event, login))
                if not isinstance(event, protocol.Method):
                    continue
                m = event.method
                if isinstance(m, commands.Connection.Start):
                    version = str((m.server_properties or {}).get("version", ""))
                    sock.sendall(protocol.start_ok(login.username, login.password))
                elif isinstance(m, commands.Connection.Tune):
                    data, _, _ = protocol.tune_ok_and_open(
                        m, login.frame_max, 0, login.virtual_host
                    )
                    stage = "open"
                    sock.sendall(data)
                elif isinstance(m, commands.Connection.OpenOk):
                    sock.sendall(protocol.method(0, commands.Connection.Close(200, "bye", 0, 0)))
                    return version


def _refusal(where: str, stage: str, closed: protocol.ConnectionClosed | None, login: Login) -> str:
    """The one line that says which key of the driver file to fix."""
    said = f" ({closed.text})" if closed else ""
    if stage == "login" or (closed and closed.code == ACCESS_REFUSED and "vhost" not in said):
        return (
            f"client.username / client.password: {where} refused the login of "
            f"{login.username!r}{said}; fix them in the driver file"
        )
    if closed is None or closed.code in (NOT_ALLOWED, ACCESS_REFUSED):
        return (
            f"client.virtualHost: {where} refused virtual host {login.virtual_host!r}{said}; "
            "fix it in the driver file (RabbitMQ's default is '/')"
        )
    return f"{where} closed the connection at the AMQP {stage}{said}"
