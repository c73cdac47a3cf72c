"""A client's keep-alive pings, spread over their interval (drivers/net/keep_alive.py)."""

from __future__ import annotations

import gevent

from drivers.net import keep_alive as module
from drivers.net.keep_alive import MAX_SLICES, PER_SLICE, keep_alive, slices_of

PAUSE = ("pause", 10.0)  # a 30 s interval in three slices


class Conn:
    def __init__(self, conn_id: int, log: list) -> None:
        self.id, self.log = conn_id, log

    def ping(self) -> None:
        self.log.append(self.id)


def test_slices_hold_at_most_per_slice_connections_up_to_the_most_slices() -> None:
    assert slices_of([]) == [[]]
    assert slices_of(list(range(10))) == [list(range(10))]  # few: one wake-up per interval
    assert [len(s) for s in slices_of(list(range(250)))] == [84, 84, 82]
    many = slices_of(list(range(5000)))
    assert len(many) == MAX_SLICES and max(len(s) for s in many) == 167
    assert [c for s in many for c in s] == list(range(5000))  # each once, in order
    assert max(len(s) for s in slices_of(list(range(PER_SLICE * 7)))) == PER_SLICE


def _run(live: set, log: list, pauses: int, monkeypatch) -> list:
    """The log of keep_alive over `live` until it has paused `pauses` times (each pause
    logged, not waited: only the order of pings and pauses is checked)."""
    real_sleep = gevent.sleep

    def sleep(seconds: float) -> None:
        log.append(("pause", seconds))
        real_sleep(0)

    monkeypatch.setattr(module.gevent, "sleep", sleep)
    pinger = gevent.spawn(keep_alive, lambda: live, 30.0)
    try:
        with gevent.Timeout(5):
            while log.count(PAUSE) < pauses:
                real_sleep(0.001)
    finally:
        pinger.kill()
    cut = [i for i, entry in enumerate(log) if entry == PAUSE][pauses - 1]
    return log[: cut + 1]


def _slices(log: list) -> list[list[int]]:
    assert all(entry == PAUSE for entry in log if isinstance(entry, tuple))  # one pause length
    at = [i for i, entry in enumerate(log) if entry == PAUSE]
    assert at[0] == 0  # a pause before the first ping
    return [log[a + 1 : b] for a, b in zip(at, at[1:], strict=False)]


def test_each_connection_is_pinged_once_an_interval_a_slice_after_each_pause(monkeypatch) -> None:
    log: list = []
    live = {Conn(n, log) for n in range(250)}
    slices = _slices(_run(live, log, 7, monkeypatch))
    assert slices[:3] == [list(range(84)), list(range(84, 168)), list(range(168, 250))]
    assert slices[3:] == slices[:3]  # the next interval the same


def test_a_connection_gone_is_skipped_and_a_new_one_pinged_from_the_next_interval(
    monkeypatch,
) -> None:
    log: list = []
    live: set = set()
    newcomer = Conn(1000, log)

    class Changing(Conn):
        def ping(self) -> None:  # while the first slice is pinged: one leaves, one comes
            super().ping()
            live.discard(gone)
            live.add(newcomer)

    live.update(Conn(n, log) for n in range(1, 250))
    live.add(Changing(0, log))
    gone = next(c for c in live if c.id == 200)
    slices = _slices(_run(live, log, 7, monkeypatch))
    assert len(slices) == 6
    first, second = sum(slices[:3], []), sum(slices[3:], [])
    assert 200 not in first and 1000 not in first and len(first) == 249
    assert 200 not in second and 1000 in second and len(second) == 250
