"""One MQTT client connection: the gevent shell (drivers/peer/connection.py) over the sans-IO
packets (drivers/mqtt/packets.py).

MQTT names a session by its client id, one per connection, and a connection holds one
subscription per topic filter: subscribing again replaces it. So each consumer is a connection
of its own (consumersPerConnection is not used). A QoS 1 delivery is acknowledged with PUBACK
in the write that follows its read. A producer's QoS 1 PUBLISH is acknowledged by the server's
PUBACK; a QoS 0 one by the PINGRESP of a PINGREQ sent behind it (the server handles a
connection's packets in order, so it has routed the PUBLISH by then), the way NATS clients
learn what the server has processed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gevent.event import AsyncResult
from gevent.pool import Group

from drivers.base import ConsumerCallback
from drivers.mqtt import packets
from drivers.mqtt.packets import (
    NEED_DATA,
    ClientParser,
    ConnAck,
    Disconnect,
    PingResp,
    PubAck,
    Publish,
    SubAck,
)
from drivers.net.deliveries import ReadDeliveries
from drivers.peer.connection import PeerConnection, RequestFailed

Done = Callable[[int, Exception | None], None]
"""Called with the answer's receive time, or with the error that ended the wait."""

SUBSCRIBE_ID = 1


class MqttConnection(PeerConnection):
    def __init__(
        self,
        conn_id: int,
        host: str,
        port: int,
        group: Group,
        callback: ConsumerCallback,
        *,
        client_id: bytes,
        version: int,
        keep_alive: int,
        connect_timeout: float,
        operation_timeout: float,
        on_closed: Callable[[PeerConnection], None] = lambda conn: None,
    ) -> None:
        super().__init__(
            conn_id, host, port, group, connect_timeout=connect_timeout, on_closed=on_closed
        )
        self.client_id = client_id
        self.version = version
        self.keep_alive = keep_alive
        self.operation_timeout = operation_timeout
        self.consumer_index: int | None = None
        self._parser = ClientParser(version)
        self._deliveries = ReadDeliveries(self, callback)
        self._subscribed: AsyncResult[int] = AsyncResult()
        self._unpinged: list[Done] = []
        self._pinged: deque[list[Done]] = deque()
        self._acks: dict[int, Done] = {}
        """QoS 1 publishes waiting for PUBACK, by packet id."""
        self._next_id = 0

    def _hello(self) -> None:
        self.write_soon(packets.connect(self.client_id, self.version, self.keep_alive))

    # -- requests ------------------------------------------------------------------------------
    def subscribe(self, index: int, topic_filter: bytes, qos: int) -> int:
        """SUBSCRIBE consumer `index`; returns the SUBACK's receive time."""
        if self.consumer_index is not None:
            raise RequestFailed("an MQTT connection holds one subscriber")
        self.consumer_index = index
        self.write_soon(packets.subscribe(SUBSCRIBE_ID, topic_filter, qos, self.version))
        self._subscribed.wait(self.operation_timeout)
        if not self._subscribed.ready():
            self.close()  # a late SUBACK must not deliver to a consumer counted as failed
            raise RequestFailed("timeout")
        return self._subscribed.get() or 0

    def publish(self, topic: bytes, payload: bytes, qos: int, done: Done) -> None:
        if qos == 0:
            self._queue(packets.publish(topic, payload, 0, 0, self.version))
            self._unpinged.append(done)
        else:
            packet_id = self._packet_id()
            self._queue(packets.publish(topic, payload, qos, packet_id, self.version))
            self._acks[packet_id] = done
        self.write_soon(b"")

    def ping(self) -> None:
        """A keep-alive PINGREQ (within keepAliveSeconds, or the server disconnects)."""
        if not self.closed:
            self._unpinged.append(_ignore)
            self._before_flush()  # queues the PINGREQ (a flush of nothing would not)
            self.write_soon(b"")

    def _packet_id(self) -> int:
        for _ in range(0xFFFF):
            self._next_id = self._next_id % 0xFFFF + 1
            if self._next_id not in self._acks:
                return self._next_id
        raise RequestFailed("65,535 QoS 1 publishes waiting for PUBACK")

    def _before_flush(self) -> None:
        if self._unpinged:
            self._out += packets.PINGREQ
            self._pinged.append(self._unpinged)
            self._unpinged = []

    # -- the reader ------------------------------------------------------------------------------
    def _on_data(self, data: memoryview, receive_us: int, kernel_us: int) -> None:
        parser, deliveries = self._parser, self._deliveries
        parser.receive_data(data)
        deliveries.begin(receive_us, kernel_us)
        try:
            while (event := parser.next_event()) is not NEED_DATA:
                if type(event) is Publish:
                    if self.consumer_index is not None:
                        deliveries.add(self.consumer_index, event.payload)
                    if event.qos == 1:
                        self._queue(packets.puback(event.packet_id))
                    elif event.qos:
                        raise RequestFailed("a QoS 2 delivery (this client speaks QoS 0 and 1)")
                    continue
                deliveries.flush()
                if type(event) is PubAck:
                    done = self._acks.pop(event.packet_id, None)
                    if done is not None:
                        error = (
                            RequestFailed(f"PUBACK reason {event.code:#x}")
                            if event.code >= 0x80
                            else None
                        )
                        done(receive_us, error)
                elif type(event) is PingResp:
                    if not self._pinged:
                        raise RequestFailed(f"PINGRESP from {self.address} to no PINGREQ")
                    for done in self._pinged.popleft():
                        done(receive_us, None)
                elif type(event) is SubAck:
                    self._on_suback(event, receive_us)
                elif type(event) is ConnAck:
                    if event.code:
                        raise RequestFailed(f"CONNECT refused by {self.address}: {event.code:#x}")
                    self._set_ready()
                elif type(event) is Disconnect:
                    raise RequestFailed(f"DISCONNECT from {self.address}: reason {event.code:#x}")
        except packets.ProtocolError as exc:
            self._fail(f"protocol error from {self.address}: {exc}")
            raise RequestFailed(str(exc)) from None
        except RequestFailed as exc:
            self._fail(str(exc))
            raise

    def _on_suback(self, event: SubAck, receive_us: int) -> None:
        if self._subscribed.ready() or event.packet_id != SUBSCRIBE_ID:
            return
        code = event.codes[0] if event.codes else 0x80
        if code >= 0x80:
            self._subscribed.set_exception(RequestFailed(f"SUBSCRIBE refused: {code:#x}"))
        else:
            self._subscribed.set(receive_us)

    def _on_failed(self, error: RequestFailed) -> None:
        if not self._subscribed.ready():
            self._subscribed.set_exception(error)
        waiting = [done for batch in self._pinged for done in batch] + self._unpinged
        waiting += self._acks.values()
        self._pinged.clear()
        self._unpinged = []
        self._acks = {}
        for done in waiting:
            done(0, error)


def _ignore(receive_us: int, error: Exception | None) -> None:
    pass
