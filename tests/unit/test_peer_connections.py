"""The peer drivers' connection shells without a socket: what a server sends, fed to `_on_data`
whole and byte by byte, reaches the harness as the same deliveries, grouped per read where a
read holds one message for several consumers, with that read's clock and kernel times; answers
settle the right waiters; what the protocol owes the server (PONG, PUBACK) is queued.

The same shells against the real servers: tests/integration/test_driver_{nats,redis,mqtt}.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from gevent.pool import Group

from drivers.mqtt import packets
from drivers.mqtt.connection import MqttConnection
from drivers.nats.connection import NatsConnection
from drivers.peer.connection import PeerConnection, RequestFailed
from drivers.redis.connection import RedisConnection, command

PAYLOAD = b"m" * 3000


@dataclass
class Calls:
    """A ConsumerCallback that keeps each call."""

    calls: list[tuple[tuple[int, ...], bytes, int, int]] = field(default_factory=list)

    def message_received(self, consumer_index, payload, receive_us, stamps, kernel_us) -> None:
        self.messages_received([consumer_index], payload, receive_us, stamps, kernel_us)

    def messages_received(self, consumer_indexes, payload, receive_us, stamps, kernel_us) -> None:
        assert stamps is None  # peers carry no broker stamps
        self.calls.append((tuple(consumer_indexes), payload, receive_us, kernel_us))

    def per_consumer(self) -> dict[int, list[bytes]]:
        out: dict[int, list[bytes]] = {}
        for indexes, payload, _, _ in self.calls:
            for index in indexes:
                out.setdefault(index, []).append(payload)
        return out


def feed(conn: PeerConnection, data: bytes, byte_by_byte: bool) -> None:
    """Reads of `data`: one, or one per byte, each a pass of the receive engine; read n has
    receive time n and kernel time 100+n."""
    chunks = [data[i : i + 1] for i in range(len(data))] if byte_by_byte else [data]
    for n, chunk in enumerate(chunks):
        conn._on_data(memoryview(chunk), n, 100 + n)
        conn._deliveries.flush()  # what the receive engine does at the end of each pass


def queued(conn: PeerConnection) -> bytes:
    return bytes(conn._out)


# -- NATS --------------------------------------------------------------------------------------
def nats(calls: Calls) -> NatsConnection:
    conn = NatsConnection(
        1, "127.0.0.1", 4222, Group(), calls, connect_timeout=1, operation_timeout=1
    )
    conn.consumers.update({11: 0, 12: 1, 13: 2})
    return conn


def nats_msg(sid: int, payload: bytes) -> bytes:
    return b"MSG fanout-1 %d %d\r\n%s\r\n" % (sid, len(payload), payload)


def test_nats_a_broadcast_in_one_read_is_one_call_with_every_consumer() -> None:
    calls = Calls()
    conn = nats(calls)
    feed(conn, b"".join(nats_msg(sid, PAYLOAD) for sid in (11, 12, 13)), byte_by_byte=False)
    assert calls.calls == [((0, 1, 2), PAYLOAD, 0, 100)]


def test_nats_byte_by_byte_every_consumer_gets_every_message_in_order() -> None:
    calls = Calls()
    conn = nats(calls)
    stream = b"".join(
        nats_msg(sid, b"%d" % k + PAYLOAD) for k in range(3) for sid in (11, 12, 13, 99)
    )
    feed(conn, stream, byte_by_byte=True)
    expected = [b"%d" % k + PAYLOAD for k in range(3)]
    assert calls.per_consumer() == {0: expected, 1: expected, 2: expected}  # sid 99: nobody's
    # Each delivery completes in a later read than the one before: its own read's times.
    times = [(r, k) for _, _, r, k in calls.calls]
    assert all(k == 100 + r for r, k in times) and times == sorted(set(times))


def test_nats_ping_is_answered_and_pong_settles_the_oldest_waiters() -> None:
    calls = Calls()
    conn = nats(calls)
    settled: list[tuple[str, int, object]] = []
    conn._pinged.append([lambda r, e: settled.append(("first", r, e))])
    conn._pinged.append([lambda r, e: settled.append(("second", r, e))])
    feed(conn, b"PING\r\n" + nats_msg(11, PAYLOAD) + b"PONG\r\n", byte_by_byte=False)
    assert queued(conn) == b"PONG\r\n"
    assert settled == [("first", 0, None)]
    assert calls.calls == [((0,), PAYLOAD, 0, 100)]  # the delivery went first


def test_nats_err_fails_the_connection_and_its_waiters() -> None:
    conn = nats(Calls())
    errors: list[object] = []
    conn._pinged.append([lambda r, e: errors.append(e)])
    with pytest.raises(RequestFailed):
        feed(conn, b"-ERR 'Slow Consumer Detected'\r\n", byte_by_byte=False)
    assert conn.closed and "Slow Consumer" in (conn.error or "")
    assert len(errors) == 1 and isinstance(errors[0], RequestFailed)


# -- Redis -------------------------------------------------------------------------------------
def redis_push(channel: bytes, payload: bytes) -> bytes:
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(channel),
        channel,
        len(payload),
        payload,
    )


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_redis_replies_answer_commands_in_order_and_pushes_are_deliveries(
    byte_by_byte: bool,
) -> None:
    calls = Calls()
    conn = RedisConnection(
        1, "127.0.0.1", 6379, Group(), calls, connect_timeout=1, operation_timeout=1
    )
    conn.consumer_index = 5
    answers: list[tuple[object, object]] = []
    conn._waiting.append(lambda reply, r, e: answers.append((reply, e)))
    conn._waiting.append(lambda reply, r, e: answers.append((reply, e)))
    stream = (
        b"*3\r\n$9\r\nsubscribe\r\n$8\r\nfanout-1\r\n:1\r\n"
        + redis_push(b"fanout-1", PAYLOAD)
        + redis_push(b"fanout-1", b"second")
        + b"-ERR wrong\r\n"
    )
    feed(conn, stream, byte_by_byte)
    assert answers[0] == ([b"subscribe", b"fanout-1", 1], None)
    assert answers[1][0] is None and isinstance(answers[1][1], RequestFailed)
    assert calls.per_consumer() == {5: [PAYLOAD, b"second"]}


def test_redis_commands_are_resp_arrays_of_bulk_strings() -> None:
    assert command(b"PUBLISH", b"ch", b"a\r\nb") == (
        b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$4\r\na\r\nb\r\n"
    )


# -- MQTT --------------------------------------------------------------------------------------
def mqtt(calls: Calls, version: int) -> MqttConnection:
    conn = MqttConnection(
        1,
        "127.0.0.1",
        1883,
        Group(),
        calls,
        client_id=b"c",
        version=version,
        keep_alive=0,
        connect_timeout=1,
        operation_timeout=1,
    )
    conn.consumer_index = 3
    return conn


@pytest.mark.parametrize("version", [packets.MQTT_3_1_1, packets.MQTT_5])
@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_mqtt_deliveries_are_passed_up_and_qos1_ones_acknowledged(
    version: int, byte_by_byte: bool
) -> None:
    calls = Calls()
    conn = mqtt(calls, version)
    stream = packets.publish(b"t", PAYLOAD, 1, 41, version) + packets.publish(
        b"t", b"second", 0, 0, version
    )
    feed(conn, stream, byte_by_byte)
    assert calls.per_consumer() == {3: [PAYLOAD, b"second"]}
    assert queued(conn) == packets.puback(41)


def test_mqtt_suback_pingresp_and_puback_settle_their_waiters() -> None:
    conn = mqtt(Calls(), packets.MQTT_3_1_1)
    settled: list[tuple[str, object]] = []
    conn._pinged.append([lambda r, e: settled.append(("ping", e))])
    conn._acks[9] = lambda r, e: settled.append(("puback", e))
    feed(conn, b"\x90\x03\x00\x01\x00" + b"\xd0\x00" + b"\x40\x02\x00\x09", byte_by_byte=True)
    assert conn._subscribed.get(timeout=0) == 4  # the time of the read that completed it
    assert settled == [("ping", None), ("puback", None)]


def test_mqtt_a_refused_subscribe_says_so() -> None:
    conn = mqtt(Calls(), packets.MQTT_5)
    feed(conn, b"\x90\x04\x00\x01\x00\x87", byte_by_byte=False)  # 0x87: not authorized
    with pytest.raises(RequestFailed, match="0x87"):
        conn._subscribed.get(timeout=0)


def test_mqtt_a_refused_connect_fails_the_connection() -> None:
    conn = mqtt(Calls(), packets.MQTT_3_1_1)
    with pytest.raises(RequestFailed):
        feed(conn, b"\x20\x02\x00\x05", byte_by_byte=False)  # 5: not authorized
    assert "CONNECT refused" in (conn.error or "")


def test_mqtt_a_keep_alive_ping_goes_out_alone_and_its_pingresp_settles_nothing_else() -> None:
    conn = mqtt(Calls(), packets.MQTT_5)
    conn.ping()
    assert queued(conn) == packets.PINGREQ
    settled: list[object] = []
    conn.publish(b"t", b"x", 0, lambda r, e: settled.append(e))
    feed(conn, b"\xd0\x00", byte_by_byte=False)  # the keep-alive's answer
    assert settled == []  # the publish waits for the PINGREQ queued behind it
    conn._before_flush()
    assert queued(conn).endswith(
        packets.publish(b"t", b"x", 0, 0, packets.MQTT_5) + packets.PINGREQ
    )
    feed(conn, b"\xd0\x00", byte_by_byte=False)
    assert settled == [None]
