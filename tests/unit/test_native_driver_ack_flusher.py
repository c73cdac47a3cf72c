"""The process-wide ack flusher: one timer for every connection's grouped acks."""

from __future__ import annotations

import time

import gevent
import pytest
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


def test_a_long_turn_lets_the_loop_run_between_its_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn over many connections must not hold the event loop for its whole length (at a
    million consumers it was the lag that flagged a run client-bound): with a slice of no
    length, a timer's greenlet runs between two connections' flushes, and every connection is
    still flushed once, in the order it became due."""
    monkeypatch.setattr("drivers.pulsar.ack_flusher.PASS_SECONDS", -1.0)
    log: list[object] = []

    class Logged:
        def flush_acks(self) -> None:
            log.append(self)

    def probe() -> None:
        while True:
            gevent.sleep(0.0001)
            log.append("timer")

    group = Group()
    flusher = AckFlusher(10, group)
    conns = [Logged() for _ in range(5)]
    for conn in conns:
        flusher.due(conn)
    prober = gevent.spawn(probe)
    gevent.sleep(0.3)
    prober.kill()
    flushed = [entry for entry in log if entry != "timer"]
    assert flushed == conns
    first, last = log.index(conns[0]), log.index(conns[-1])
    assert "timer" in log[first:last]
    flusher.close()
    group.kill()
