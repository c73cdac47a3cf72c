"""OMB's paused consumers with one receive engine per process (drivers.net.reactor): the
sockets consumers receive on are no longer read, the producers' still are (their receipts),
and reading resumes with what waited. A callback that waited instead stopped every socket,
the producer's receipts too, and the backlog test never built its backlog."""

from __future__ import annotations

import socket

import gevent

from drivers.net.reactor import Reactor


class Reader:
    def __init__(self, sock: socket.socket, carries_consumers: bool) -> None:
        self.sock = sock
        self.carries_consumers = carries_consumers
        self.got = b""

    def on_readable(self) -> None:
        self.got += self.sock.recv(4096)


def test_held_consumer_sockets_wait_while_a_producers_socket_is_read() -> None:
    engine = Reactor()
    consumer_end, consumer_peer = socket.socketpair()
    producer_end, producer_peer = socket.socketpair()
    for s in (consumer_end, producer_end):
        s.setblocking(False)
    consumer, producer = Reader(consumer_end, True), Reader(producer_end, False)
    try:
        engine.add(consumer_end.fileno(), consumer)
        engine.add(producer_end.fileno(), producer)
        engine.hold_consumers(True)
        consumer_peer.sendall(b"message")
        producer_peer.sendall(b"receipt")
        with gevent.Timeout(5):
            while not producer.got:
                gevent.sleep(0.01)
        gevent.sleep(0.05)
        assert (producer.got, consumer.got) == (b"receipt", b"")

        engine.hold_consumers(False)
        with gevent.Timeout(5):
            while not consumer.got:
                gevent.sleep(0.01)
        assert consumer.got == b"message"
    finally:
        engine.remove(consumer_end.fileno())
        engine.remove(producer_end.fileno())
        for s in (consumer_end, consumer_peer, producer_end, producer_peer):
            s.close()
