"""The receive engine (drivers/net/reactor.py) and the per-pass grouping of deliveries
(drivers/net/deliveries.py), on socketpairs and plain callbacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import gevent
from gevent import socket

from drivers.net.deliveries import Deliveries
from drivers.net.reactor import Reactor


class Reader:
    """Reads what it is woken for, and asks for the end of the pass (as a connection does
    for its deliveries)."""

    carries_consumers = False

    def __init__(self, sock: socket.socket, log: list, engine: Reactor, ends: list) -> None:
        self.sock, self.log, self.engine, self.ends = sock, log, engine, ends

    def on_readable(self) -> None:
        self.log.append((self, self.sock.recv(100)))  # ready: gevent's recv does not wait
        self.engine.after_pass("end", lambda: self.ends.append(len(self.log)))


@contextmanager
def _ready_sockets(
    kind: type[Reader], n: int
) -> Iterator[tuple[Reactor, list, list, tuple[list, list]]]:
    """`n` socketpairs, a `kind` reader on each registered with a new engine, each made ready
    (b"m<i>" sent) before the engine first runs: (engine, pairs, readers, (log, ends))."""
    engine = Reactor()
    pairs = [socket.socketpair() for _ in range(n)]
    log: list = []
    ends: list[int] = []
    readers = [kind(ours, log, engine, ends) for ours, _ in pairs]
    try:
        for reader in readers:
            engine.add(reader.sock.fileno(), reader)
        for i, (_, theirs) in enumerate(pairs):
            theirs.sendall(b"m%d" % i)
        yield engine, pairs, readers, (log, ends)
    finally:
        for reader in readers:
            engine.remove(reader.sock.fileno())
        for ours, theirs in pairs:
            ours.close()
            theirs.close()


def test_one_pass_reads_every_ready_socket_then_runs_its_end_once() -> None:
    with _ready_sockets(Reader, 20) as (engine, pairs, readers, (log, ends)):
        with gevent.Timeout(2):
            while len(log) < 20:
                gevent.sleep(0.01)
        assert sorted(data for _, data in log) == sorted(b"m%d" % n for n in range(20))
        assert ends == [20]  # asked for by 20 reads of one pass, run once, after them all
        engine.remove(readers[0].sock.fileno())
        pairs[0][1].sendall(b"late")
        pairs[1][1].sendall(b"again")
        with gevent.Timeout(2):
            while len(log) < 21:
                gevent.sleep(0.01)
        gevent.sleep(0.05)
        assert log[20] == (readers[1], b"again")  # a removed socket is not read
        assert len(log) == 21 and ends == [20, 21]


@dataclass
class Calls:
    """A callback without the batch entry point: one messages_received per read."""

    calls: list[tuple] = field(default_factory=list)

    def message_received(self, index, payload, receive_us, stamps, kernel_us) -> None:
        self.messages_received([index], payload, receive_us, stamps, kernel_us)

    def messages_received(self, indexes, payload, receive_us, stamps, kernel_us) -> None:
        self.calls.append((tuple(indexes), payload, receive_us, kernel_us))


@dataclass
class Batched(Calls):
    passes: list[tuple] = field(default_factory=list)

    def deliveries_received(self, payload, indexes, reads) -> None:
        self.passes.append((payload, tuple(indexes), [tuple(r) for r in reads]))


def test_a_pass_groups_one_message_across_sockets_and_keeps_each_sockets_order() -> None:
    """Equal payloads from different sockets are one message; a socket that brings an older
    message after a newer one starts a group of its own, so the harness still sees its
    reordering; a callback without the batch entry point gets one call per read."""
    a, b = b"a" * 500, b"b" * 500
    for callback in (Batched(), Calls()):
        firsts: list[int] = []
        deliveries = Deliveries(callback, partial(firsts.append, 1))
        deliveries.add("s1", a, [1], 10, 5)
        deliveries.add("s2", bytes(a), [2], 11, 6)  # equal bytes, another object
        deliveries.add("s2", b, [2], 11, 6)
        deliveries.add("s3", bytes(a), [3], 12, 7)  # joins a's group: s3 added nothing later
        deliveries.add("s2", bytes(a), [2], 13, 8)  # a redelivery after b: a group of its own
        deliveries.flush()
        deliveries.flush()  # nothing left
        assert firsts == [1]
        if isinstance(callback, Batched):
            assert callback.passes == [
                (a, (1, 2, 3), [(1, 10, 5, None), (1, 11, 6, None), (1, 12, 7, None)]),
                (b, (2,), [(1, 11, 6, None)]),
                (a, (2,), [(1, 13, 8, None)]),
            ]
            assert all(p[0] is a for p in (callback.passes[0], callback.passes[2]))
        else:
            assert callback.calls == [
                ((1,), a, 10, 5),
                ((2,), a, 11, 6),
                ((3,), a, 12, 7),
                ((2,), b, 11, 6),
                ((2,), a, 13, 8),
            ]


class SlowReader(Reader):
    """A reader that takes 10 ms of the loop, as an entry to 100 consumers does."""

    def on_readable(self) -> None:
        import time

        time.sleep(0.01)  # the real sleep: the loop does not turn meanwhile
        super().on_readable()


def test_a_long_pass_ends_early_and_the_loop_turns_before_the_rest_is_read() -> None:
    turned: list[int] = []
    with _ready_sockets(SlowReader, 20) as (_, _, _, (log, ends)):
        gevent.spawn_later(0, lambda: turned.append(len(log)))  # a timer, as the lag probe
        with gevent.Timeout(3):
            while len(log) < 20:
                gevent.sleep(0.01)
        assert sorted(data for _, data in log) == sorted(b"m%d" % n for n in range(20))
        assert len(ends) > 1  # more than one pass, each ended once
        assert turned and turned[0] < 20  # the timer ran before every socket was read
