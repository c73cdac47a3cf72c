"""One connection to a Redis server: the gevent shell (drivers/peer/connection.py) with
hiredis's RESP reader, which is sans-IO (`feed` bytes, `gets` replies) and written in C.

A subscriber connection SUBSCRIBEs one consumer to one channel: Redis sends a connection one
copy of a channel's message however often it subscribed, so consumers cannot share a
connection. Every other reply answers the oldest command still waiting (RESP is strictly in
order), and a publisher's PUBLISH is acknowledged by its integer reply (how many subscribers
the server handed the message to).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import hiredis
from gevent.event import AsyncResult
from gevent.pool import Group

from drivers.base import ConsumerCallback
from drivers.net.deliveries import ReadDeliveries
from drivers.peer.connection import PeerConnection, RequestFailed

Done = Callable[[object, int, Exception | None], None]
"""Called with the reply and its receive time, or with the error (None reply)."""

MESSAGE = b"message"


def command(*args: bytes) -> bytes:
    """One RESP command (an array of bulk strings)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class RedisConnection(PeerConnection):
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
        self.consumer_index: int | None = None
        """The consumer this connection subscribed, once SUBSCRIBE is sent."""
        self._resp = hiredis.Reader()
        self._deliveries = ReadDeliveries(self, callback)
        self._waiting: deque[Done] = deque()

    def request(self, data: bytes, done: Done) -> None:
        """Queue one command; `done` gets its reply."""
        self._queue(data)
        self._waiting.append(done)
        self.write_soon(b"")

    def _hello(self) -> None:
        # A PING's +PONG says the server is there and talking RESP.
        self.request(command(b"PING"), lambda reply, receive_us, error: self._set_ready())

    def subscribe(self, index: int, channel: bytes) -> int:
        """SUBSCRIBE consumer `index` to `channel`; returns the answer's receive time."""
        if self.consumer_index is not None:
            raise RequestFailed("a Redis connection holds one subscriber")
        self.consumer_index = index
        result: AsyncResult[int] = AsyncResult()

        def done(reply: object, receive_us: int, error: Exception | None) -> None:
            if error is not None:
                result.set_exception(error)
            elif isinstance(reply, list) and reply[:2] == [b"subscribe", channel]:
                result.set(receive_us)
            else:
                result.set_exception(RequestFailed(f"SUBSCRIBE answered {reply!r:.80}"))

        self.request(command(b"SUBSCRIBE", channel), done)
        result.wait(self.operation_timeout)
        if not result.ready():
            self.close()  # a late SUBSCRIBE must not deliver to a consumer counted as failed
            raise RequestFailed("timeout")
        return result.get() or 0

    def _on_data(self, data: memoryview, receive_us: int, kernel_us: int) -> None:
        reader, deliveries, waiting = self._resp, self._deliveries, self._waiting
        reader.feed(data)  # type: ignore[arg-type]  # any buffer; the stub says bytes
        deliveries.begin(receive_us, kernel_us)
        try:
            while (reply := reader.gets()) is not False:
                if (
                    type(reply) is list
                    and len(reply) == 3
                    and reply[0] == MESSAGE
                    and self.consumer_index is not None
                ):
                    deliveries.add(self.consumer_index, reply[2])
                    continue
                deliveries.flush()
                if not waiting:
                    raise RequestFailed(f"a reply from {self.address} to no command: {reply!r:.80}")
                done = waiting.popleft()
                if isinstance(reply, hiredis.ReplyError):
                    done(None, receive_us, RequestFailed(str(reply)))
                else:
                    done(reply, receive_us, None)
        except hiredis.ProtocolError as exc:
            self._fail(f"protocol error from {self.address}: {exc}")
            raise RequestFailed(str(exc)) from None
        except RequestFailed as exc:
            self._fail(str(exc))
            raise

    def _on_failed(self, error: RequestFailed) -> None:
        waiting, self._waiting = self._waiting, deque()
        for done in waiting:
            done(None, 0, error)
