"""Issue 14: the broker's keep-alive, as Pulsar's ServerCnx. A client silent for
keepAliveIntervalSeconds is sent a PING; one that does not answer is closed an interval later
(and the broker says so); one that answers, raw or the official client, stays connected."""

from __future__ import annotations

import socket
import time

import pulsar
import pytest

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.frames import FrameDecoder, encode_frame
from tests.conftest import start_broker

pytestmark = pytest.mark.integration

INTERVAL = 0.5


@pytest.fixture
def broker(tmp_path):
    b = start_broker(
        tmp_path / "data",
        extra=("--set", "journalSyncData=false", "--set", f"keepAliveIntervalSeconds={INTERVAL}"),
    )
    yield b
    b.stop()


def _connected(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(encode_frame(command(T.CONNECT, client_version="raw", protocol_version=20)))
    return sock


def _read_commands(sock: socket.socket, decoder: FrameDecoder) -> list[pb.BaseCommand] | None:
    """The commands of one read; None at EOF."""
    data = sock.recv(65536)
    if not data:
        return None
    decoder.receive_data(data)
    return [frame.command for frame in decoder.frames()]


def test_a_client_that_answers_nothing_is_pinged_then_closed(broker) -> None:
    sock = _connected(broker.port)
    decoder = FrameDecoder()
    started = time.monotonic()
    seen: list[tuple[float, int]] = []
    while (commands := _read_commands(sock, decoder)) is not None:
        seen += [(time.monotonic() - started, c.type) for c in commands]
    closed_after = time.monotonic() - started
    sock.close()
    types = [t for _, t in seen]
    assert types == [T.CONNECTED, T.PING]
    ping_at = seen[1][0]
    # Pinged one to two intervals after its last frame, closed at the sweep after the PING's
    # (one interval later). The client sees each event late by its own scheduling delay, so
    # the gap it measures is an interval give or take that: half an interval apart still
    # tells "the next sweep" from "the same sweep".
    assert INTERVAL * 0.9 <= ping_at <= INTERVAL * 2 + 1
    assert INTERVAL * 0.5 <= closed_after - ping_at <= INTERVAL + 1
    log = broker.log_path.read_text()
    assert "no answer to a PING" in log and "keepAliveIntervalSeconds" in log


def test_a_client_that_answers_pings_stays_open(broker) -> None:
    sock = _connected(broker.port)
    sock.settimeout(INTERVAL / 5)
    decoder = FrameDecoder()
    pings = 0
    deadline = time.monotonic() + INTERVAL * 8
    while time.monotonic() < deadline:
        try:
            commands = _read_commands(sock, decoder)
        except TimeoutError:
            continue
        assert commands is not None, "the broker closed a connection that answers its PINGs"
        for c in commands:
            if c.type == T.PING:
                pings += 1
                sock.sendall(encode_frame(command(T.PONG)))
    # Still served: a request is answered on the same connection.
    sock.settimeout(10)
    sock.sendall(
        encode_frame(
            command(T.PARTITIONED_METADATA, topic="persistent://public/default/k", request_id=1)
        )
    )
    answer = None
    while answer is None:
        commands = _read_commands(sock, decoder)
        assert commands is not None
        answer = next((c for c in commands if c.type == T.PARTITIONED_METADATA_RESPONSE), None)
    sock.close()
    assert pings >= 2  # silent between its PONGs: pinged again and again, never closed
    assert "no answer to a PING" not in broker.log_path.read_text()


def test_the_official_client_stays_connected_across_intervals(broker) -> None:
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe("keep-alive", "s")
        producer = client.create_producer("keep-alive")
        time.sleep(INTERVAL * 8)  # idle: only the broker's PINGs and the client's PONGs
        producer.send(b"still here")
        assert consumer.receive(timeout_millis=5000).data() == b"still here"
    finally:
        client.close()
    log = broker.log_path.read_text()
    assert "no answer to a PING" not in log
    assert "closing" not in log  # no connection of the client's was dropped and reopened
