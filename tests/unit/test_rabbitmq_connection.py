"""The RabbitMQ connection's acknowledgements against a scripted server on a socketpair: a
channel's deliveries acknowledged consumer.ackEvery at a time, one basic.ack (multiple) per
read that makes them due, and what still waits when the driver closes the connection, in its
last write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import gevent
import pytest
from gevent import socket
from gevent.pool import Group
from pamqp import commands, frame

from drivers.rabbitmq import protocol
from drivers.rabbitmq.connection import Login, RabbitMqConnection
from tests.unit.test_rabbitmq_protocol import deliver

CHANNEL, INDEX = 1, 7


@dataclass
class Calls:
    """A ConsumerCallback that keeps each payload."""

    payloads: list[bytes] = field(default_factory=list)

    def message_received(self, consumer_index, payload, receive_us, stamps, kernel_us) -> None:
        self.messages_received([consumer_index], payload, receive_us, stamps, kernel_us)

    def messages_received(self, consumer_indexes, payload, receive_us, stamps, kernel_us) -> None:
        assert list(consumer_indexes) == [INDEX]
        self.payloads.append(payload)


@dataclass
class Server:
    sock: socket.socket
    calls: Calls
    conn: RabbitMqConnection
    seen: bytes = b""

    def send(self, *tags: int) -> None:
        """Deliveries `tags` in one write (so one read), and wait until they are read."""
        want = len(self.calls.payloads) + len(tags)
        self.sock.sendall(b"".join(deliver(CHANNEL, tag, b"m%d" % tag) for tag in tags))
        with gevent.Timeout(5):
            while len(self.calls.payloads) < want:
                gevent.sleep(0.001)

    def acks(self) -> list[tuple[int, int, bool]]:
        """Every basic.ack the client wrote so far: (channel, delivery tag, multiple)."""
        self.sock.settimeout(0.2)
        try:
            while chunk := self.sock.recv(65536):
                self.seen += chunk
        except TimeoutError:
            pass
        data, found = self.seen[len(protocol.PROTOCOL_HEADER) :], []
        while data:
            used, channel, value = frame.unmarshal(data)
            if isinstance(value, commands.Basic.Ack):
                found.append((channel, value.delivery_tag, value.multiple))
            data = data[used:]
        return found


@contextmanager
def consuming(ack_every: int) -> Iterator[Server]:
    """A connection with consumer INDEX on CHANNEL (basic.consume answered by the server)."""
    ours, theirs = socket.socketpair()
    calls = Calls()
    conn = RabbitMqConnection(
        0,
        "127.0.0.1",
        5672,
        Group(),
        calls,
        login=Login(),
        connect_timeout=5,
        operation_timeout=5,
        ack_every=ack_every,
    )
    conn.start(ours)
    try:
        job = gevent.spawn(conn.consume, CHANNEL, INDEX, [commands.Basic.Consume(queue="q")])
        theirs.sendall(frame.marshal(commands.Basic.ConsumeOk(consumer_tag="c7"), CHANNEL))
        job.get(timeout=5)
        yield Server(theirs, calls, conn)
    finally:
        conn.close()
        theirs.close()


def test_acks_wait_for_ack_every_deliveries_and_one_read_makes_one_ack() -> None:
    with consuming(ack_every=3) as server:
        for tag in range(1, 8):
            server.send(tag)
        assert server.acks() == [(CHANNEL, 3, True), (CHANNEL, 6, True)]
        server.send(8, 9, 10, 11, 12)  # due at 9, read with three more: one ack, of the last
        assert server.acks()[2:] == [(CHANNEL, 12, True)]
        assert server.calls.payloads == [b"m%d" % tag for tag in range(1, 13)]


def test_what_waits_is_acknowledged_when_the_driver_closes() -> None:
    with consuming(ack_every=50) as server:
        server.send(1)
        server.send(2, 3)
        assert server.acks() == []
        server.conn.close()
        assert server.acks() == [(CHANNEL, 3, True)]


def test_ack_every_1_acknowledges_every_read_and_leaves_nothing_for_the_close() -> None:
    with consuming(ack_every=1) as server:
        server.send(1)
        server.send(2, 3)
        server.conn.close()
        assert server.acks() == [(CHANNEL, 1, True), (CHANNEL, 3, True)]


@pytest.mark.parametrize("closed_by", ["server", "channel.close"])
def test_nothing_is_acknowledged_for_a_consumer_that_is_gone(closed_by: str) -> None:
    """A lost connection has no one to write to; a channel the server closed has no
    deliveries left to acknowledge (an ack there would close the whole connection)."""
    with consuming(ack_every=50) as server:
        server.send(1, 2)
        if closed_by == "server":
            server.sock.shutdown(socket.SHUT_WR)
            with gevent.Timeout(5):
                while not server.conn.closed:
                    gevent.sleep(0.001)
        else:
            close = commands.Channel.Close(404, "NOT_FOUND - gone", 0, 0)
            server.sock.sendall(frame.marshal(close, CHANNEL))
            with gevent.Timeout(5):
                while CHANNEL in server.conn.consumers:
                    gevent.sleep(0.001)
        server.conn.close()
        assert server.acks() == []
