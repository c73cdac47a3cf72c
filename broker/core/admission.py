"""Who may join a topic: the checks a producer or a consumer passes before it is added, in
Pulsar's order (ServerCnx.handleProducer, handleSubscribe), each answered with the ServerError
a client understands. The server connection only translates: it asks here, and answers a
refusal or goes on to add what was admitted.
"""

from __future__ import annotations

from broker.core.limits import (
    LimitsConfig,
    Refusal,
    consumer_refusal,
    producer_refusal,
    subscription_refusal,
)
from broker.core.schemas import SchemaRefused, SchemaRegistry, schema_topic
from broker.core.topic import Topic
from pulsar_protocol import pulsar_api_pb2 as pb


def producer_admission(
    config: LimitsConfig, schemas: SchemaRegistry, topic: Topic, schema: pb.Schema | None
) -> Refusal | bytes | None:
    """A new producer on `topic`: its refusal, or the schema version its messages carry
    (None without a schema). The access mode (exclusive, fencing) is decided after this, by
    the topic's ProducerAccess, which may make it wait."""
    refused = producer_refusal(config, len(topic.producers))
    if refused is not None:
        return refused
    gate = topic.publish_gate
    if gate is not None and (quota := gate.refusal()) is not None:
        return Refusal(*quota)  # a backlog quota's producer_exception
    try:
        return schemas.for_producer(schema_topic(topic.name), schema)
    except SchemaRefused as exc:
        return Refusal(exc.server_error, str(exc))


def consumer_admission(
    config: LimitsConfig,
    schemas: SchemaRegistry,
    topic: Topic,
    subscription: str,
    mode: str,
    durable: bool,
    schema: pb.Schema | None,
) -> Refusal | None:
    """A new consumer of `subscription` (in `mode`, durable or not) on `topic`: its refusal,
    or None when it may be added (creating the subscription if it is new)."""
    if schema is not None:
        try:
            schemas.for_consumer(schema_topic(topic.name), schema, in_use(topic))
        except SchemaRefused as exc:
            return Refusal(exc.server_error, str(exc))
    sub = topic.subscriptions.get(subscription)
    if sub is None:
        return subscription_refusal(config, len(topic.subscriptions))
    if sub.durable != durable:
        kind = "durable" if sub.durable else "non-durable"
        return Refusal(pb.NotAllowedError, f"a {kind} subscription {subscription!r} exists already")
    # A Broadcast subscription takes any mode but Exclusive: the official client cannot ask
    # for Broadcast, so its consumers join with the subType they have (docs/architecture.md).
    if sub.mode != mode and not (sub.mode == "Broadcast" and mode != "Exclusive"):
        return Refusal(pb.ConsumerBusy, f"subscription {subscription!r} is {sub.mode}, not {mode}")
    return consumer_refusal(config, len(sub.consumers))


def in_use(topic: Topic) -> bool:
    """Pulsar's test before a consumer's schema may become the topic's: a producer, a
    consumer or an entry."""
    return (
        bool(topic.producers)
        or topic.log.next_index > topic.log.first_index
        or any(sub.consumers for sub in topic.subscriptions.values())
    )
