"""Who may join a topic, and what a client may do there: the checks a request passes before
the broker acts on it, in Pulsar's order (ServerCnx.validateTopicName, handleProducer,
handleSubscribe, handleUnsubscribe, the publish path's delivery delay), each answered with the
ServerError a client understands. The server connection only translates: it asks here, and
answers a refusal or goes on to do what was admitted.
"""

from __future__ import annotations

from broker.core.consumer import ConsumerSubscription
from broker.core.limits import (
    LimitsConfig,
    Refusal,
    consumer_refusal,
    producer_refusal,
    subscription_refusal,
)
from broker.core.positions import start_of_subscription
from broker.core.schemas import SchemaRefused, SchemaRegistry, schema_topic
from broker.core.topic import Topic
from broker.core.topic_name import InvalidTopicName, parse_topic
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.requests import InitialPosition, Schema, Subscribe


def topic_refusal(name: str) -> Refusal | None:
    """A request naming `name` (LOOKUP, PRODUCER, SUBSCRIBE, ...): refused when it is no topic
    name (Pulsar's validateTopicName), before anything is looked up or created."""
    try:
        parse_topic(name)
    except InvalidTopicName as exc:
        return Refusal(pb.InvalidTopicName, str(exc))
    return None


def producer_admission(
    config: LimitsConfig, schemas: SchemaRegistry, topic: Topic, schema: Schema | None
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
    schema: Schema | None,
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


def subscription_start(topic: Topic, req: Subscribe) -> int:
    """The first index a subscription that `req` creates reads: Pulsar honours a start id for
    non-durable subscriptions only (Readers), else the initial position."""
    start_id = req.start_message_id if not req.durable else None
    earliest = req.initial_position is InitialPosition.EARLIEST
    return start_of_subscription(topic.log, start_id, earliest)


def unsubscribe_refusal(sub: ConsumerSubscription, force: bool) -> Refusal | None:
    """A consumer unsubscribing: refused while others are connected, unless forced."""
    if len(sub.consumers) > 1 and not force:
        return Refusal(pb.ConsumerBusy, "other consumers are connected")
    return None


def delivery_delay_refusal(
    topic: Topic, deliver_at_ms: int, publish_time_ms: int
) -> Refusal | None:
    """A delayed message past the topic's maximum delivery delay: Pulsar refuses it before it
    is stored (PIP-315); that SEND fails, not the producer, and the next ones go on."""
    limit = topic.max_delivery_delay_ms
    if limit and deliver_at_ms - publish_time_ms > limit:
        return Refusal(
            pb.NotAllowedError, f"Exceeds max allowed delivery delay of {limit} milliseconds"
        )
    return None
