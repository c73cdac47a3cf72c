"""Topic policies against a clock the test moves (tests/doubles/fake_clock.py): publish and
dispatch rate windows, relative dispatch rates, delayed delivery, the TTL and the backlog
quota's hold, each observed on the wire of an in-process broker connection, window by window,
with no broker process and no real waiting. The official client checks the same features on a
real broker in tests/integration/test_topic_policies.py (a few per feature)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from broker.admin.stats import topic_stats
from broker.config import BrokerConfig
from broker.core.topic import Topic
from broker.policies.topic_policies import (
    DELAYED_DELIVERY,
    DISPATCH_RATE,
    MESSAGE_TTL,
    PUBLISH_RATE,
    SUBSCRIPTION_DISPATCH_RATE,
)
from broker.server.connection import ServerConnection
from broker.server.service import BrokerService
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.frames import encode_frame, encode_raw_frame
from pulsar_protocol.payload import encode_payload
from tests.doubles.fake_clock import START, FakeClock
from tests.unit.test_broker_connection import FakeTransport

TOPIC = "persistent://public/default/limited"


class PausableTransport(FakeTransport):
    """Records whether the broker stopped reading it (a publish limit, a backlog hold)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Client:
    """One client connection to the broker: what it sends, and what the broker wrote back."""

    def __init__(self, service: BrokerService) -> None:
        self.conn = ServerConnection(service)
        self.transport = PausableTransport()
        self.conn.connection_made(self.transport)
        (connected,) = self.send(command(T.CONNECT, client_version="test", protocol_version=20))
        assert connected.type == T.CONNECTED

    def send(self, cmd: pb.BaseCommand) -> list[pb.BaseCommand]:
        self.conn.data_received(encode_raw_frame(cmd.SerializeToString()))
        return self.transport.take()


class Broker:
    """A broker service in this process, on a fake clock, without storage."""

    def __init__(self, clock: FakeClock, **settings: Any) -> None:
        self.clock = clock
        self.service = BrokerService(BrokerConfig(**settings), clock=clock)
        self.service.loop = asyncio.get_running_loop()

    def client(self) -> Client:
        return Client(self.service)

    def topic(self) -> Topic:
        return self.service.topics[TOPIC]

    def set(self, kind: str, value: Any) -> None:
        self.service.policies.set(TOPIC, kind, value)


async def settle() -> None:
    """Let the loop run what the broker scheduled (stores, dispatches): no time passes."""
    for _ in range(30):
        await asyncio.sleep(0)


def run(test: Callable[[FakeClock], Coroutine[Any, Any, None]]) -> None:
    # Half way into a window: a test's steps of 1 s then fall between the windows' edges.
    asyncio.run(test(FakeClock(START + 0.5)))


def _producer(client: Client, producer_id: int = 1) -> None:
    (ok,) = client.send(command(T.PRODUCER, topic=TOPIC, producer_id=producer_id, request_id=1))
    assert ok.type == T.PRODUCER_SUCCESS


def _sends(clock: FakeClock, first: int, n: int, size: int = 10, deliver_in_s: float = 0) -> bytes:
    """`n` SEND frames (sequence ids from `first`), as a client pipelines them: one write."""
    frames = []
    now_ms = int(clock.now() * 1000)
    for seq in range(first, first + n):
        meta = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=now_ms)
        if deliver_in_s:
            meta.deliver_at_time = now_ms + int(deliver_in_s * 1000)
        body = encode_payload(meta, b"x" * size)
        frames.append(encode_frame(command(T.SEND, producer_id=1, sequence_id=seq), body))
    return b"".join(frames)


def _subscribe(
    client: Client,
    sub: str,
    mode: int = pb.CommandSubscribe.Shared,
    consumer_id: int = 1,
    permits: int = 10_000,
) -> None:
    (ok,) = client.send(
        command(
            T.SUBSCRIBE,
            topic=TOPIC,
            subscription=sub,
            subType=mode,
            consumer_id=consumer_id,
            request_id=10 + consumer_id,
        )
    )
    assert ok.type == T.SUCCESS, ok
    if permits:
        client.send(command(T.FLOW, consumer_id=consumer_id, messagePermits=permits))


def _count(client: Client, kind: int) -> int:
    return sum(1 for c in client.transport.take() if c.type == kind)


def _messages_per_window(limit: int, relative: bool = False) -> dict[str, Any]:
    return {
        "dispatchThrottlingRateInMsg": limit,
        "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": relative,
        "ratePeriodInSecond": 1,
    }


async def _per_window(broker: Broker, client: Client, kind: int, windows: int) -> list[int]:
    """What `client` received of `kind` in each of the next `windows` 1 s windows."""
    counts = []
    for _ in range(windows):
        await settle()
        counts.append(_count(client, kind))
        broker.clock.advance(1.0)
    return counts


# -- publish rate ---------------------------------------------------------------------------


def test_a_publish_rate_lets_n_sends_a_window_and_holds_the_rest_unread() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock)
        producer = broker.client()
        _producer(producer)
        broker.set(
            PUBLISH_RATE.path, {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}
        )
        producer.conn.data_received(_sends(clock, 0, 65))  # one read, as a pipelining client
        counts = await _per_window(broker, producer, T.SEND_RECEIPT, 5)
        assert counts == [20, 20, 20, 5, 0]
        assert broker.topic().publish_rate_limited_times == 3
        assert producer.transport.reading  # nothing owed: reading again

        # Removed: the rest go at once, and the counter stops.
        broker.service.policies.remove(TOPIC, PUBLISH_RATE.path)
        producer.conn.data_received(_sends(clock, 65, 60))
        await settle()
        assert _count(producer, T.SEND_RECEIPT) == 60
        assert broker.topic().publish_rate_limited_times == 3

    run(go)


def test_a_publish_byte_rate_counts_payload_bytes() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock)
        producer = broker.client()
        _producer(producer)
        body = {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 10 * 1024}
        broker.set(PUBLISH_RATE.path, body)
        producer.conn.data_received(_sends(clock, 0, 30, size=1024))
        counts = await _per_window(broker, producer, T.SEND_RECEIPT, 4)
        # 1 KiB of payload plus its metadata each: the 10th goes over and completes, the
        # window after it pays the excess off.
        assert sum(counts) == 30 and max(counts) <= 10, counts
        assert len([c for c in counts if c]) >= 3, counts

    run(go)


# -- dispatch rate --------------------------------------------------------------------------


def test_a_subscription_dispatch_rate_paces_delivery_window_by_window() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock)
        producer, consumer = broker.client(), broker.client()
        _producer(producer)
        broker.set(SUBSCRIPTION_DISPATCH_RATE.path, _messages_per_window(15))
        _subscribe(consumer, "s")
        producer.conn.data_received(_sends(clock, 0, 50))
        counts = await _per_window(broker, consumer, T.MESSAGE, 5)
        assert counts == [15, 15, 15, 5, 0]
        events = broker.topic().subscriptions["s"].dispatcher.policy_events
        assert events["dispatchThrottledMsgEventsBySubscriptionLimit"] >= 3
        assert "dispatchThrottledMsgEventsByTopicLimit" not in events

    run(go)


def test_a_topic_dispatch_rate_is_one_quota_shared_by_its_subscriptions() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock)
        producer, a, b = broker.client(), broker.client(), broker.client()
        _producer(producer)
        broker.set(DISPATCH_RATE.path, _messages_per_window(20))
        _subscribe(a, "a", pb.CommandSubscribe.Exclusive)
        _subscribe(b, "b", pb.CommandSubscribe.Shared)
        producer.conn.data_received(_sends(clock, 0, 30))
        counts = []
        for _ in range(4):
            await settle()
            counts.append(_count(a, T.MESSAGE) + _count(b, T.MESSAGE))
            clock.advance(1.0)
        assert counts == [20, 20, 20, 0]
        subs = broker.topic().subscriptions.values()
        by_topic = [
            s.dispatcher.policy_events.get("dispatchThrottledMsgEventsByTopicLimit", 0)
            for s in subs
        ]
        assert sum(by_topic) >= 2

    run(go)


def test_a_relative_dispatch_rate_adds_the_publish_rate_to_the_limit() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock)
        producer, consumer = broker.client(), broker.client()
        _producer(producer)
        broker.set(SUBSCRIPTION_DISPATCH_RATE.path, _messages_per_window(5, relative=True))
        _subscribe(consumer, "s", permits=0)
        producer.conn.data_received(_sends(clock, 0, 80))
        await settle()
        topic = broker.topic()
        topic.rate_messages = topic.rate_bytes = 0.0  # msgRateIn: nothing published lately
        consumer.send(command(T.FLOW, consumer_id=1, messagePermits=1000))
        quiet = await _per_window(broker, consumer, T.MESSAGE, 2)
        topic.rate_messages = 25.0  # a producer at 25 msg/s
        busy = await _per_window(broker, consumer, T.MESSAGE, 2)
        assert quiet == [5, 5]
        assert busy == [30, 30]

    run(go)


# -- delayed delivery -----------------------------------------------------------------------


def test_a_delayed_message_is_delivered_no_earlier_than_asked_on_shared_not_held_on_exclusive() -> (
    None
):
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock, delayedDeliveryTickTimeMillis=100)
        producer, shared, exclusive = broker.client(), broker.client(), broker.client()
        _producer(producer)
        _subscribe(shared, "shared", pb.CommandSubscribe.Shared, consumer_id=1)
        _subscribe(exclusive, "excl", pb.CommandSubscribe.Exclusive, consumer_id=2)
        producer.conn.data_received(_sends(clock, 0, 3, deliver_in_s=3.0))
        await settle()
        assert _count(exclusive, T.MESSAGE) == 3  # Pulsar's non-shared dispatchers: at once
        assert _count(shared, T.MESSAGE) == 0
        clock.advance(2.95)
        await settle()
        assert _count(shared, T.MESSAGE) == 0
        clock.advance(0.1)
        await settle()
        assert _count(shared, T.MESSAGE) == 3

    run(go)


def test_delayed_delivery_turned_off_for_the_topic_delivers_at_once() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock)
        producer, shared = broker.client(), broker.client()
        _producer(producer)
        body = {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}
        broker.set(DELAYED_DELIVERY.path, body)
        _subscribe(shared, "shared")
        producer.conn.data_received(_sends(clock, 0, 2, deliver_in_s=60.0))
        await settle()
        assert _count(shared, T.MESSAGE) == 2

    run(go)


# -- TTL ------------------------------------------------------------------------------------


def test_the_ttl_expires_a_backlog_at_the_first_check_after_it_passes() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock, messageExpiryCheckIntervalInMinutes=0.01)  # every 0.6 s
        producer, idle = broker.client(), broker.client()
        _producer(producer)
        _subscribe(idle, "s", permits=0)  # everything stays in the backlog
        broker.set(MESSAGE_TTL, 2)
        producer.conn.data_received(_sends(clock, 0, 25))
        await settle()

        def sub() -> dict[str, Any]:
            stats: dict[str, Any] = topic_stats(broker.topic())["subscriptions"]["s"]
            return stats

        clock.advance(1.9)
        assert sub()["msgBacklog"] == 25
        clock.advance(0.7)  # 2.6 s: the check at 2.4 s found them 2.4 s old
        assert sub()["msgBacklog"] == 0
        assert sub()["totalMsgExpired"] == 25

    run(go)


def test_the_ttl_counts_from_when_a_delayed_message_is_deliverable() -> None:
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock, messageExpiryCheckIntervalInMinutes=0.01)  # every 0.6 s
        producer, idle = broker.client(), broker.client()
        _producer(producer)
        _subscribe(idle, "s", permits=0)
        broker.set(MESSAGE_TTL, 1)
        producer.conn.data_received(_sends(clock, 0, 1, deliver_in_s=4.0))
        await settle()

        def sub() -> dict[str, Any]:
            stats: dict[str, Any] = topic_stats(broker.topic())["subscriptions"]["s"]
            return stats

        clock.advance(4.7)  # published 4.7 s ago, deliverable 0.7 s ago: within its TTL
        assert (sub()["msgBacklog"], sub()["totalMsgExpired"]) == (1, 0)
        clock.advance(0.7)  # the check at 5.4 s: deliverable 1.4 s ago
        assert (sub()["msgBacklog"], sub()["totalMsgExpired"]) == (0, 1)

    run(go)


# -- backlog quota --------------------------------------------------------------------------


def test_a_producer_request_hold_quota_stops_reading_the_producer_until_the_backlog_drains() -> (
    None
):
    async def go(clock: FakeClock) -> None:
        broker = Broker(clock, backlogQuotaCheckIntervalInSeconds=1)
        producer, consumer = broker.client(), broker.client()
        _producer(producer)
        _subscribe(consumer, "s", permits=0)
        quota = {"limitSize": -1, "limitTime": 2, "policy": "producer_request_hold"}
        broker.service.policies.set_backlog_quota(TOPIC, "message_age", quota)
        producer.conn.data_received(_sends(clock, 0, 5))
        await settle()
        assert _count(producer, T.SEND_RECEIPT) == 5
        clock.advance(3.1)  # the check at 3 s finds 3 s old messages unacknowledged
        producer.conn.data_received(_sends(clock, 5, 2))
        await settle()
        # The SEND that found the hold completes; the connection is read no further.
        assert _count(producer, T.SEND_RECEIPT) == 1
        assert not producer.transport.reading
        assert broker.topic().policy_events["backlogQuotaHoldTimes"] == 1

        # The consumer catches up: at the next check the producer is read again.
        consumer.send(command(T.FLOW, consumer_id=1, messagePermits=100))
        await settle()
        messages = [c.message.message_id for c in consumer.transport.take() if c.type == T.MESSAGE]
        assert len(messages) == 6
        consumer.send(
            command(
                T.ACK, consumer_id=1, ack_type=pb.CommandAck.Cumulative, message_id=[messages[-1]]
            )
        )
        clock.advance(1.0)
        await settle()
        assert producer.transport.reading
        assert _count(producer, T.SEND_RECEIPT) == 1

    run(go)
