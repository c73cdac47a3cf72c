"""Request deadlines, for every connection of a process: one greenlet, waking once a second.

Every request (a lookup, a SUBSCRIBE) has operationTimeoutSeconds to be answered. A sweeper
greenlet per connection slept until its oldest request's deadline, 30 s by default, however
soon the request was answered: after a connect storm with one connection per consumer, a
greenlet, a timer and the answered requests stayed 30 s per consumer (a fifth of what a worker
held per consumer at its peak, tracemalloc, benchmarks/client_connect.py). Here one greenlet
per process wakes once a second while requests are pending, lets go of those answered, and
times out the ones past their deadline (sooner when the oldest is due sooner). A deadline may
pass by up to a second before its request is timed out, which a timeout of seconds does not
notice.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Protocol

import gevent
from gevent.pool import Group

TICK_S = 1.0


class Settles(Protocol):
    """An answer to come: an AsyncResult, or a group's (drivers.pulsar.connection.GroupAnswers,
    one deadline for all its requests)."""

    def ready(self) -> bool: ...


class TimesOut(Protocol):
    def timed_out(self, request_id: int, result: Any) -> None:
        """`result`, for `request_id`, had no answer by its deadline: settle it so."""


class Deadlines:
    """Pending requests in the order they were made; every request of the process has the same
    timeout, so that is deadline order too."""

    def __init__(self, group: Group) -> None:
        self._group = group
        self._pending: deque[tuple[float, TimesOut, int, Settles]] = deque()
        self._greenlet: gevent.Greenlet | None = None

    def expect(self, owner: TimesOut, request_id: int, result: Settles, timeout_s: float) -> None:
        """Tell `owner` if `result` is still unsettled `timeout_s` from now."""
        self._pending.append((time.monotonic() + timeout_s, owner, request_id, result))
        if self._greenlet is None:
            self._greenlet = self._group.spawn(self._run)

    def _run(self) -> None:
        pending = self._pending
        try:
            while pending:
                gevent.sleep(min(TICK_S, max(0.0, pending[0][0] - time.monotonic())))
                now = time.monotonic()
                while pending:
                    deadline, owner, request_id, result = pending[0]
                    if not result.ready():
                        if deadline > now:
                            break
                        owner.timed_out(request_id, result)
                    pending.popleft()
        finally:
            self._greenlet = None

    def close(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
        self._pending.clear()
