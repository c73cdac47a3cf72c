"""Issue 14: a named Broadcast consumer's own cursor survives a blip, a restart and kill -9;
a departed one expires after broadcastCursorExpirationTimeSeconds (counted); acks of entries
a subscription cannot have sent are refused (counted in stats and /metrics)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.connection import Connection
from pulsar_protocol.events import NEED_DATA, Connect, Request, Response
from pulsar_protocol.frames import encode_frame
from pulsar_protocol.state import CLIENT
from tests.conftest import BrokerProcess, SharedBroker, start_broker, wait_cursors_saved

pytestmark = pytest.mark.integration

BROADCAST = {"subscriptionMode": "broadcast"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBroker]:
    # journalSyncData true, the default: what the kill -9 test is about.
    held = SharedBroker(tmp_path_factory.mktemp("broadcast-durability") / "data")
    yield held
    held.broker.stop()


@pytest.fixture
def running(shared: SharedBroker) -> SharedBroker:
    return shared.running()


def _log_since(broker: BrokerProcess, offset: int) -> list[str]:
    """The broker's log lines written after `offset` bytes (a shared broker's log holds every
    test's, through every restart)."""
    with open(broker.log_path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace").splitlines()


def _subscribe(client: pulsar.Client, topic: str, name: str) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "all",
        consumer_name=name,
        properties=BROADCAST,
        initial_position=pulsar.InitialPosition.Earliest,
    )


def _drain(consumer: pulsar.Consumer, timeout_ms: int = 1500) -> list[bytes]:
    """Everything the consumer gets until it is quiet, each acknowledged."""
    got: list[bytes] = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return got
        got.append(msg.data())
        consumer.acknowledge(msg)


def _stats(broker: BrokerProcess, topic: str) -> dict:
    url = f"{broker.admin}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.load(reply)


def _body(i: int) -> bytes:
    return f"m{i}".encode()


def _eventually(check, timeout_s: float = 15) -> None:
    """Wait for a condition the broker reaches on its own (acks in, a cursor expired)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _unacked(broker: BrokerProcess, topic: str, consumer: str) -> int:
    return _unacked_in(_stats(broker, topic), consumer)


def _consumer_stat(stats: dict, consumer: str, field: str) -> int:
    """One field of a Broadcast consumer's entry in a topic's stats."""
    consumers = stats["subscriptions"]["all"]["consumers"]
    (found,) = [c[field] for c in consumers if c["consumerName"] == consumer]
    return int(found)


def _unacked_in(stats: dict, consumer: str) -> int:
    """A Broadcast consumer's messages sent and not yet acknowledged."""
    return _consumer_stat(stats, consumer, "unackedMessages")


def _sent_to(stats: dict, consumer: str) -> int:
    """A Broadcast consumer's messages sent (msgOutCounter)."""
    return _consumer_stat(stats, consumer, "msgOutCounter")


def test_a_named_broadcast_consumer_away_3_s_resumes_where_it_stood(running):
    broker = running.broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    steady = _subscribe(client, "blip", "steady")
    away_client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    away = _subscribe(away_client, "blip", "away")
    producer = client.create_producer("blip", batching_enabled=False)
    for i in range(10):
        producer.send(_body(i))
    assert _drain(steady) == [_body(i) for i in range(10)]
    assert _drain(away) == [_body(i) for i in range(10)]
    _eventually(lambda: _unacked(broker, "blip", "away") == 0)  # the client groups acks
    away_client.close()

    for i in range(10, 20):
        producer.send(_body(i))
    assert _drain(steady, 1000) == [_body(i) for i in range(10, 20)]
    time.sleep(3)  # the steady one's acks are in; the other is still away

    away_client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    back = _subscribe(away_client, "blip", "away")
    assert _drain(back) == [_body(i) for i in range(10, 20)]
    away_client.close()
    client.close()


def test_named_broadcast_consumers_resume_after_kill_9_even_when_one_comes_back_late(running):
    broker = running.broker  # journalSyncData: true
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    fast = _subscribe(client, "bc-kill", "fast")
    late = _subscribe(client, "bc-kill", "late")
    producer = client.create_producer("bc-kill", batching_enabled=False)
    for i in range(20):
        producer.send(_body(i))
    assert _drain(fast) == [_body(i) for i in range(20)]
    for _ in range(5):
        late.acknowledge(late.receive(timeout_millis=5000))
    wait_cursors_saved(
        broker,
        "bc-kill",
        # All 20 sent to each: 15 unacknowledged of fewer sent would not mean 5 acknowledged.
        lambda t: (
            all(_sent_to(t, c) == 20 for c in ("fast", "late"))
            and _unacked_in(t, "fast") == 0
            and _unacked_in(t, "late") == 15
        ),
    )
    broker.kill9()
    with contextlib.suppress(pulsar.NotConnected):
        client.close()

    broker = running.broker = broker.restart()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    fast = _subscribe(client, "bc-kill", "fast")
    producer = client.create_producer("bc-kill", batching_enabled=False)
    for i in range(20, 30):
        producer.send(_body(i))
    # The first one back gets only what is new to it, and acknowledges it all.
    assert _drain(fast) == [_body(i) for i in range(20, 30)]
    _eventually(lambda: _unacked(broker, "bc-kill", "fast") == 0)
    # The late one gets everything it had not acknowledged, none of it lost.
    late = _subscribe(client, "bc-kill", "late")
    assert _drain(late) == [_body(i) for i in range(5, 30)]
    client.close()


def test_a_departed_broadcast_consumer_cursor_expires_and_is_counted(tmp_path):
    broker = start_broker(
        tmp_path / "data",
        extra=(
            "--set",
            "journalSyncData=false",
            "--set",
            "broadcastCursorExpirationTimeSeconds=1.0",
        ),
    )
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        steady = _subscribe(client, "expiry", "steady")
        gone = _subscribe(client, "expiry", "gone")
        producer = client.create_producer("expiry", batching_enabled=False)
        producer.send(_body(0))
        assert _drain(steady) == [_body(0)]
        gone.close()  # it leaves without acknowledging

        def subscription_now() -> dict:
            return _stats(broker, "expiry")["subscriptions"]["all"]

        left = time.monotonic()
        _eventually(lambda: subscription_now()["departedConsumerCursors"] == 1)
        assert subscription_now()["msgBacklog"] == 1  # held for the one that left
        _eventually(lambda: subscription_now()["expiredConsumerCursorsCounter"] == 1)
        assert time.monotonic() - left >= 1.0 - 0.1  # not before its expiration time
        subscription = subscription_now()
        assert subscription["expiredConsumerCursorsCounter"] == 1
        assert subscription["departedConsumerCursors"] == 0
        assert subscription["msgBacklog"] == 0  # nothing held for it any more
        # Coming back after expiry, it starts where the subscription stands.
        again = _subscribe(client, "expiry", "gone")
        producer.send(_body(1))
        assert _drain(again) == [_body(1)]
        client.close()
    finally:
        broker.stop()


def _raw_client(port: int) -> tuple[socket.socket, Connection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn = Connection(CLIENT)
    conn.send(Connect(client_version="raw-test", protocol_version=20))
    sock.sendall(conn.data_to_send())
    _wait_for(sock, conn)
    return sock, conn


def _wait_for(sock: socket.socket, conn: Connection) -> object:
    while True:
        event = conn.next_event()
        if event is not NEED_DATA:
            return event
        conn.receive_data(sock.recv(65536))


def test_acks_beyond_what_was_sent_are_refused_and_counted(running):
    """A cumulative ack far past the log's end (the issue's Shared-killer) and one of an entry
    not yet dispatched leave the backlog as it was; stats and /metrics count them."""
    broker = running.broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    producer = client.create_producer("acks", batching_enabled=False)
    ids = [producer.send(_body(i)) for i in range(5)]
    sock, conn = _raw_client(broker.port)
    conn.send(
        Request(
            command(
                T.SUBSCRIBE,
                topic="persistent://public/default/acks",
                subscription="shared",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=1,
                initialPosition=pb.CommandSubscribe.Earliest,
            )
        )
    )
    sock.sendall(conn.data_to_send())
    assert isinstance(_wait_for(sock, conn), Response)
    # No FLOW: nothing dispatched, so neither ack can be of something received.
    last = ids[-1]
    for ledger_id, entry_id in [(last.ledger_id() + 1000, 0), (ids[0].ledger_id(), 2)]:
        ack = command(
            T.ACK,
            consumer_id=1,
            ack_type=pb.CommandAck.Cumulative,
            message_id=[pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id)],
        )
        sock.sendall(encode_frame(ack))  # raw: the client codec sends ACKs its own way

    def subscription_now() -> dict:
        return _stats(broker, "acks")["subscriptions"]["shared"]

    _eventually(lambda: subscription_now()["acksRefusedCounter"] == 2)
    subscription = subscription_now()
    assert subscription["msgBacklog"] == 5
    assert subscription["acksRefusedCounter"] == 2
    with urllib.request.urlopen(f"{broker.admin}/metrics", timeout=5) as reply:
        metrics = reply.read().decode()
    assert (
        'pulsar_subscription_acks_refused_total{topic="persistent://public/default/acks",'
        'subscription="shared"} 2' in metrics
    )
    sock.close()
    # The subscription still delivers everything to a real client.
    consumer = client.subscribe("acks", "shared", consumer_type=pulsar.ConsumerType.Shared)
    assert sorted(_drain(consumer)) == [_body(i) for i in range(5)]
    client.close()


def _topic_dir(broker: BrokerProcess, topic: str):
    from urllib.parse import quote

    return broker.data_dir / "topics" / quote(f"persistent://public/default/{topic}", safe="")


def test_a_flipped_byte_mid_ledger_loses_that_entry_only_and_cursors_keep_their_place(running):
    broker = running.broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    acked = client.subscribe("flip", "acked", consumer_type=pulsar.ConsumerType.Exclusive)
    client.subscribe("flip", "idle", consumer_type=pulsar.ConsumerType.Exclusive).close()
    producer = client.create_producer("flip", batching_enabled=False)
    ids = [producer.send(_body(i) * 100) for i in range(20)]
    for _ in range(5):
        acked.acknowledge(acked.receive(timeout_millis=5000))
    _eventually(lambda: _stats(broker, "flip")["subscriptions"]["acked"]["msgBacklog"] == 15)
    client.close()  # the broker's stop saves the cursors
    broker.stop()

    ledgers = _topic_dir(broker, "flip") / "ledgers"
    path = ledgers / f"ledger-{ids[10].ledger_id()}.log"
    data = bytearray(path.read_bytes())
    offset = 0
    for _ in range(ids[10].entry_id()):  # records: [u32 length][u32 crc][body]
        offset += 8 + (int.from_bytes(data[offset : offset + 4], "big") & 0x7FFF_FFFF)
    data[offset + 8 + 40] ^= 0x01  # one bit inside entry 10's body
    path.write_bytes(bytes(data))

    logged = broker.log_path.stat().st_size
    broker = running.broker = broker.restart()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    expected = [_body(i) * 100 for i in range(20) if i != 10]
    acked = client.subscribe("flip", "acked", consumer_type=pulsar.ConsumerType.Exclusive)
    assert _drain(acked) == expected[5:]
    # The topic opened with the first subscribe: its recovery is in the broker's log.
    lost = f"lost 1 damaged: {ids[10].ledger_id()}:{ids[10].entry_id()}"
    recovered = [line for line in _log_since(broker, logged) if lost in line]
    assert len(recovered) == 1 and "persistent://public/default/flip" in recovered[0]
    idle = client.subscribe("flip", "idle", consumer_type=pulsar.ConsumerType.Exclusive)
    assert _drain(idle) == expected
    client.close()


def test_a_truncated_cursor_log_leaves_the_topic_usable(running):
    broker = running.broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    consumer = client.subscribe("cut", "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer("cut", batching_enabled=False)
    for i in range(5):
        producer.send(_body(i))
    assert _drain(consumer) == [_body(i) for i in range(5)]
    _eventually(lambda: _stats(broker, "cut")["subscriptions"]["s"]["msgBacklog"] == 0)
    client.close()  # the broker's stop saves the cursors
    broker.stop()
    cursor_log = _topic_dir(broker, "cut") / "cursors" / "cursors.log"
    cursor_log.write_bytes(cursor_log.read_bytes()[:7])

    logged = broker.log_path.stat().st_size
    broker = running.broker = broker.restart()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    consumer = client.subscribe(
        "cut",
        "s",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer("cut", batching_enabled=False)
    producer.send(b"after")
    # The subscription's saved place is gone: it starts again, nothing is lost.
    assert _drain(consumer) == [*[_body(i) for i in range(5)], b"after"]
    cut = [line for line in _log_since(broker, logged) if "cut a torn tail" in line]
    assert len(cut) == 1 and str(cursor_log) in cut[0], cut
    client.close()


def test_named_broadcast_consumers_resume_after_a_clean_restart(running):
    """A stopping broker closes its connections: the consumers' cursors must be saved as
    departed ones, not dropped, by the final save."""
    broker = running.broker
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    fast = _subscribe(client, "bc-stop", "fast")
    late = _subscribe(client, "bc-stop", "late")
    producer = client.create_producer("bc-stop", batching_enabled=False)
    for i in range(10):
        producer.send(_body(i))
    assert _drain(fast) == [_body(i) for i in range(10)]
    for _ in range(3):
        late.acknowledge(late.receive(timeout_millis=5000))
    _eventually(lambda: _unacked(broker, "bc-stop", "late") == 7)  # its 3 acks are in
    # (the broker's save of the cursors is left to its stop)
    broker = running.broker = broker.restart()
    with contextlib.suppress(pulsar.NotConnected):
        client.close()

    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    assert _drain(_subscribe(client, "bc-stop", "fast")) == []
    assert _drain(_subscribe(client, "bc-stop", "late")) == [_body(i) for i in range(3, 10)]
    client.close()
