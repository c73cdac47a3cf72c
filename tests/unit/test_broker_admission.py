"""Who may join a topic and act there (broker.core.admission), decided without a connection:
topic names, limits, a backlog quota refusing producers, schemas, a subscription's mode and
durability and where a new one starts, unsubscribing, and a delayed message's delay."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.config import BrokerConfig
from broker.core.admission import (
    consumer_admission,
    delivery_delay_refusal,
    producer_admission,
    subscription_start,
    topic_refusal,
    unsubscribe_refusal,
)
from broker.core.consumer import Consumer
from broker.core.limits import Refusal
from broker.core.schemas import JSON, STRING
from broker.server.service import BrokerService
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol import requests as rq
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.requests import Schema

TOPIC = "persistent://public/default/admitted"


class Gate:
    """A publish gate whose backlog quota refuses producers."""

    def admit(self, messages: int, size: int, reader: Any) -> None:
        pass

    def refusal(self) -> tuple[int, str] | None:
        return pb.ProducerBlockedQuotaExceededException, "backlog quota exceeded"


def _service(**settings: Any) -> BrokerService:
    service = BrokerService(BrokerConfig(**settings))
    service.loop = asyncio.get_running_loop()
    return service


def _consumer(n: int) -> Consumer:
    return Consumer(consumer_id=n, name=f"c{n}", wire=None, priority=0)  # type: ignore[arg-type]


def test_a_producer_is_refused_past_the_limit_or_the_quota_and_gets_its_schema_version() -> None:
    async def go() -> None:
        service = _service(maxProducersPerTopic=1)
        topic = service.topic(TOPIC)
        string = Schema(name="s", type=STRING, data=b"")
        version = producer_admission(service.config, service.schemas, topic, string)
        assert isinstance(version, bytes)
        assert producer_admission(service.config, service.schemas, topic, None) is None

        topic.publish_gate = Gate()
        refused = producer_admission(service.config, service.schemas, topic, None)
        assert refused == Refusal(
            pb.ProducerBlockedQuotaExceededException, "backlog quota exceeded"
        )

        topic.publish_gate = None
        topic.producers[1] = object()  # type: ignore[assignment]
        refused = producer_admission(service.config, service.schemas, topic, None)
        assert isinstance(refused, Refusal) and refused.server_error == pb.ProducerBusy

    asyncio.run(go())


def test_a_producer_with_another_schema_type_is_refused() -> None:
    async def go() -> None:
        service = _service()
        topic = service.topic(TOPIC)
        string = Schema(name="s", type=STRING, data=b"")
        assert isinstance(producer_admission(service.config, service.schemas, topic, string), bytes)
        json_schema = Schema(name="s", type=JSON, data=b"{}")
        refused = producer_admission(service.config, service.schemas, topic, json_schema)
        assert isinstance(refused, Refusal) and refused.server_error == pb.IncompatibleSchema

    asyncio.run(go())


def test_a_consumer_must_match_the_subscriptions_mode_and_durability_and_its_limits() -> None:
    async def go() -> None:
        service = _service(maxSubscriptionsPerTopic=2, maxConsumersPerSubscription=1)
        topic = service.topic(TOPIC)

        def admit(sub: str, mode: str, durable: bool = True) -> Refusal | None:
            return consumer_admission(
                service.config, service.schemas, topic, sub, mode, durable, None
            )

        assert admit("shared", "Shared") is None  # new: created by the caller
        topic.subscription("shared", "Shared", False, durable=True)
        assert admit("shared", "Shared") is None
        refused = admit("shared", "Exclusive")
        assert refused is not None and refused.server_error == pb.ConsumerBusy
        assert "is Shared, not Exclusive" in refused.message
        refused = admit("shared", "Shared", durable=False)
        assert refused is not None and refused.server_error == pb.NotAllowedError
        assert "a durable subscription 'shared' exists already" == refused.message

        # Broadcast takes the official client's Shared or Failover, never Exclusive.
        topic.subscription("all", "Broadcast", False, durable=True)
        assert admit("all", "Shared") is None and admit("all", "Failover") is None
        refused = admit("all", "Exclusive")
        assert refused is not None and refused.server_error == pb.ConsumerBusy

        refused = admit("third", "Shared")  # two subscriptions already
        assert refused is not None and refused.server_error == pb.NotAllowedError
        topic.subscriptions["shared"].add_consumer(_consumer(1))
        refused = admit("shared", "Shared")  # one consumer already
        assert refused is not None and refused.server_error == pb.ConsumerBusy
        for topic_ in service.topics.values():
            topic_.close()

    asyncio.run(go())


def test_a_name_that_is_no_topic_is_refused_before_anything_is_looked_up() -> None:
    assert topic_refusal("persistent://public/default/t") is None
    assert topic_refusal("t") is None  # a short name, expanded as the clients expand it
    for bad in ("persistent://public/default/", "ftp://public/default/t", "x" * 300):
        refused = topic_refusal(bad)
        assert refused is not None and refused.server_error == pb.InvalidTopicName


def test_a_new_subscription_starts_at_a_readers_id_or_its_initial_position() -> None:
    async def go() -> None:
        service = _service()
        topic = service.topic(TOPIC)
        meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        for _ in range(3):
            await topic.publish(encode_payload(meta, b"x"), b"", 0, 1)

        def start(**fields: Any) -> int:
            return subscription_start(
                topic, rq.Subscribe(1, TOPIC, "s", rq.SubType.EXCLUSIVE, 1, **fields)
            )

        assert start() == 3  # latest: after what is there
        assert start(initial_position=rq.InitialPosition.EARLIEST) == 0
        second = rq.MessageId(*topic.log.position_of(1))
        # A start id is honoured for a non-durable subscription (a Reader's) only.
        assert start(durable=False, start_message_id=second) == 1
        assert start(durable=True, start_message_id=second) == 3
        for topic_ in service.topics.values():
            topic_.close()

    asyncio.run(go())


def test_unsubscribing_is_refused_while_others_are_connected_unless_forced() -> None:
    async def go() -> None:
        service = _service()
        topic = service.topic(TOPIC)
        sub = topic.subscription("s", "Shared", False, durable=True)
        sub.add_consumer(_consumer(1))
        assert unsubscribe_refusal(sub, force=False) is None
        sub.add_consumer(_consumer(2))
        refused = unsubscribe_refusal(sub, force=False)
        assert refused is not None and refused.server_error == pb.ConsumerBusy
        assert unsubscribe_refusal(sub, force=True) is None
        for topic_ in service.topics.values():
            topic_.close()

    asyncio.run(go())


def test_a_delayed_message_past_the_topics_maximum_delay_is_refused() -> None:
    async def go() -> None:
        topic = _service().topic(TOPIC)
        assert delivery_delay_refusal(topic, 10_000_000, 0) is None  # no maximum: anything goes
        topic.max_delivery_delay_ms = 1000
        assert delivery_delay_refusal(topic, 1_500, 500) is None  # exactly the maximum
        refused = delivery_delay_refusal(topic, 1_501, 500)
        assert refused == Refusal(
            pb.NotAllowedError, "Exceeds max allowed delivery delay of 1000 milliseconds"
        )
        topic.close()

    asyncio.run(go())
