"""One connection to a NATS server: the gevent shell (drivers/peer/connection.py) over the
sans-IO codec (drivers/nats/protocol.py).

Many subscriptions share a connection, consumersPerConnection of them, each its own SUB with its
own sid: the server sends one MSG per subscription, so a broadcast is a run of MSGs of identical
payload in one read, handed to the harness as one `messages_received`.

Core NATS answers nothing to SUB or PUB (the CONNECT says verbose: false). What the server has
processed is learned as its clients do (`flush()`): a PING behind the commands, whose PONG comes
back once everything before it was handled. The SUBs and PUBs queued in one loop turn share one
PING (`_before_flush`); a subscribe ends, and a publish is acknowledged, at that PONG.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gevent.event import AsyncResult
from gevent.pool import Group

from drivers.base import ConsumerCallback
from drivers.nats import protocol
from drivers.nats.protocol import NEED_DATA, ClientParser, Err, Info, Msg, Ping, Pong
from drivers.net.deliveries import ReadDeliveries
from drivers.peer.connection import PeerConnection, RequestFailed

Done = Callable[[int, Exception | None], None]
"""Called with the PONG's receive time, or with the error that ended the wait."""


class NatsConnection(PeerConnection):
    def __init__(
        self,
        conn_id: int,
        host: str,
        port: int,
        group: Group,
        callback: ConsumerCallback,
        *,
        connect_timeout: float,
        operation_timeout: float,
        on_closed: Callable[[PeerConnection], None] = lambda conn: None,
    ) -> None:
        super().__init__(
            conn_id, host, port, group, connect_timeout=connect_timeout, on_closed=on_closed
        )
        self.operation_timeout = operation_timeout
        self.consumers: dict[int, int] = {}
        """sid -> the harness's consumer index."""
        self.server_info: dict[str, object] = {}
        self._parser = ClientParser()
        self._deliveries = ReadDeliveries(self, callback)
        self._unpinged: list[Done] = []
        """Waiters whose commands are queued but not yet followed by a PING."""
        self._pinged: deque[list[Done]] = deque()
        """Waiters of each PING sent, oldest first: a PONG settles the oldest list."""
        self._next_sid = 1

    # -- requests ------------------------------------------------------------------------------
    def after(self, data: bytes, done: Done) -> None:
        """Queue `data`; `done` runs once the server has processed it (its PING's PONG)."""
        self._queue(data)
        self._unpinged.append(done)
        self.write_soon(b"")

    def subscribe(self, index: int, subject: bytes, queue: bytes | None) -> int:
        """SUB for consumer `index` (in queue group `queue` when given); blocks until the
        server has processed it and returns the PONG's receive time."""
        sid = self._next_sid
        self._next_sid += 1
        self.consumers[sid] = index
        result: AsyncResult[int] = AsyncResult()
        self.after(protocol.sub(subject, sid, queue), _settle(result))
        result.wait(self.operation_timeout)
        if not result.ready():
            self.consumers.pop(sid, None)
            self.write_soon(protocol.unsub(sid))  # lest a late SUB deliver to no one
            raise RequestFailed("timeout")
        return result.get() or 0

    def _before_flush(self) -> None:
        if self._unpinged:
            self._out += protocol.PING
            self._pinged.append(self._unpinged)
            self._unpinged = []

    # -- the reader ------------------------------------------------------------------------------
    def _on_data(self, data: memoryview, receive_us: int, kernel_us: int) -> None:
        parser, deliveries, consumers = self._parser, self._deliveries, self.consumers
        parser.receive_data(data)
        deliveries.begin(receive_us, kernel_us)
        try:
            while (event := parser.next_event()) is not NEED_DATA:
                if type(event) is Msg:
                    index = consumers.get(event.sid)
                    if index is not None:
                        deliveries.add(index, event.payload)
                    continue
                deliveries.flush()  # deliveries first, in the order they came
                if type(event) is Pong:
                    if not self._pinged:
                        raise RequestFailed(f"PONG from {self.address} to no PING")
                    for done in self._pinged.popleft():
                        done(receive_us, None)
                elif type(event) is Ping:
                    self._queue(protocol.PONG)
                elif type(event) is Info:
                    self._on_info(event)
                elif type(event) is Err:
                    self._fail(f"-ERR from {self.address}: {event.message}")
                    raise RequestFailed(event.message)
        except protocol.ProtocolError as exc:
            self._fail(f"protocol error from {self.address}: {exc}")
            raise RequestFailed(str(exc)) from None

    def _on_info(self, event: Info) -> None:
        """The server's greeting (and later updates): answer the first with CONNECT, whose
        PING's PONG ends the handshake."""
        if self.server_info:
            self.server_info.update(event.fields)
            return
        self.server_info = dict(event.fields)
        self._queue(protocol.connect(f"fanout-bench-{self.id}"))
        self._unpinged.append(lambda receive_us, error: self._set_ready())

    def _on_failed(self, error: RequestFailed) -> None:
        waiting = [done for batch in self._pinged for done in batch] + self._unpinged
        self._pinged.clear()
        self._unpinged = []
        for done in waiting:
            done(0, error)


def _settle(result: AsyncResult[int]) -> Done:
    def done(receive_us: int, error: Exception | None) -> None:
        if error is None:
            result.set(receive_us)
        else:
            result.set_exception(error)

    return done
