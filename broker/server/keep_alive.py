"""The broker's keep-alive: one periodic sweep over the connections, not a timer each.

Pulsar's ServerCnx pings a client that has been silent for `keepAliveIntervalSeconds` and
closes it when the next interval passes without a frame. Here a read only sets its connection's
`seen` flag; a sweep every interval clears the flags, pings the connections it finds silent
and closes those it pinged the turn before (ServerConnection.keep_alive). With 100,000
consumers on 1,000 connections that is 1,000 calls every 30 s and nothing per frame but the
flag. A silent client is pinged one to two intervals after its last frame and closed one
interval after that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

log = logging.getLogger("broker.connection")


class KeptAlive(Protocol):
    def keep_alive(self) -> None: ...


async def sweep_connections(connections: Iterable[KeptAlive], interval_s: float) -> None:
    """Every `interval_s`, one keep-alive turn for each connection (until cancelled)."""
    while True:
        await asyncio.sleep(interval_s)
        for conn in list(connections):
            try:
                conn.keep_alive()
            except Exception:  # one connection's failure must not end the sweep for all
                log.exception("keep-alive of a connection failed")
