"""One write per connection per turn of the loop, scheduled once for all the connections."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from unittest import mock

import pytest

from broker.config import BrokerConfig
from broker.server.connection import ServerConnection
from broker.server.service import BrokerService
from broker.server.turn_writes import TurnWrites
from pulsar_protocol import events as ev
from pulsar_protocol.connection import Connection
from pulsar_protocol.state import CLIENT


class Queued:
    def __init__(self, log: list[str], name: str, fails: bool = False) -> None:
        self.log, self.name, self.fails = log, name, fails

    def flush_queued(self) -> None:
        self.log.append(self.name)
        if self.fails:
            raise OSError("broken pipe")


def test_the_connections_of_a_turn_are_flushed_by_one_callback_even_if_one_fails(caplog):
    async def scenario() -> tuple[list[str], list[str]]:
        writes = TurnWrites()
        flushed: list[str] = []
        loop = asyncio.get_running_loop()
        with mock.patch.object(loop, "call_soon", wraps=loop.call_soon) as call_soon:
            for conn in (
                Queued(flushed, "a"),
                Queued(flushed, "b", fails=True),
                Queued(flushed, "c"),
            ):
                writes.add(conn)
            assert call_soon.call_count == 1
            await asyncio.sleep(0)
            first = list(flushed)
            before = call_soon.call_count
            writes.add(Queued(flushed, "d"))  # a later turn schedules again
            assert call_soon.call_count == before + 1
        await asyncio.sleep(0)
        return first, flushed

    with caplog.at_level(logging.ERROR, logger="broker.connection"):
        first, flushed = asyncio.run(scenario())
    assert first == ["a", "b", "c"]
    assert flushed == ["a", "b", "c", "d"]
    assert "writing to a connection failed" in caplog.text


class CountingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def writelines(self, list_of_data: Any) -> None:
        self.writes.append(b"".join(list_of_data))

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


def _connected(service: BrokerService) -> tuple[ServerConnection, CountingTransport]:
    conn = ServerConnection(service)
    transport = CountingTransport()
    conn.connection_made(transport)
    client = Connection(CLIENT)
    client.send(ev.Connect("test", 20))
    conn.data_received(client.data_to_send())
    transport.writes.clear()  # CONNECTED, written at the end of that read
    return conn, transport


@pytest.mark.parametrize("rounds", [1, 3])
def test_frames_queued_on_connections_in_one_turn_leave_in_one_write_each(rounds: int):
    async def scenario() -> list[list[bytes]]:
        service = BrokerService(BrokerConfig())
        service.loop = asyncio.get_running_loop()
        pairs = [_connected(service) for _ in range(3)]
        for n in range(rounds):  # several subscriptions dispatching to them in the turn
            for i, (conn, _) in enumerate(pairs):
                conn.write_frames([f"head-{i}-{n}".encode(), b"payload"])
        assert all(t.writes == [] for _, t in pairs)
        await asyncio.sleep(0)
        return [t.writes for _, t in pairs]

    writes = asyncio.run(scenario())
    for i, written in enumerate(writes):
        assert written == [b"".join(f"head-{i}-{n}".encode() + b"payload" for n in range(rounds))]
