"""The process-wide ack flusher: one timer for every connection's grouped acks."""

from __future__ import annotations

import time

import gevent
from gevent.pool import Group

from drivers.pulsar.ack_flusher import AckFlusher


class FakeConnection:
    def __init__(self) -> None:
        self.flushed_at: list[float] = []

    def flush_acks(self) -> None:
        self.flushed_at.append(time.monotonic())


def test_connections_due_together_are_flushed_in_one_turn_after_the_group_time() -> None:
    group = Group()
    flusher = AckFlusher(50, group)
    conns = [FakeConnection() for _ in range(5)]
    started = time.monotonic()
    for conn in conns:
        flusher.due(conn)
        flusher.due(conn)  # due again before the flush: still one flush
    gevent.sleep(0.2)
    assert [len(conn.flushed_at) for conn in conns] == [1] * 5
    times = [conn.flushed_at[0] for conn in conns]
    assert min(times) - started >= 0.05
    assert max(times) - min(times) < 0.01  # one turn of the one timer
    flusher.close()
    group.kill()


def test_a_connection_due_again_after_a_flush_is_flushed_again() -> None:
    group = Group()
    flusher = AckFlusher(20, group)
    conn = FakeConnection()
    flusher.due(conn)
    gevent.sleep(0.1)
    flusher.due(conn)
    gevent.sleep(0.1)
    assert len(conn.flushed_at) == 2
    flusher.close()
    flusher.due(conn)  # closed: nothing more is flushed
    gevent.sleep(0.1)
    assert len(conn.flushed_at) == 2
    group.kill()
