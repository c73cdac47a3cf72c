"""The broker's count limits, with Pulsar's setting names, defaults and refusals.

Pulsar checks these where a producer, a subscription or a consumer is added (its
AbstractTopic.isProducersExceeded, PersistentTopic's subscription check, the dispatchers'
isConsumersExceededOnSubscription) and answers with the ServerError a client understands:
ProducerBusy, NotAllowedError, ConsumerBusy. 0 means no limit, as in Pulsar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pulsar_protocol import pulsar_api_pb2 as pb


class LimitsConfig(Protocol):
    """The settings read here (broker.config.BrokerConfig has them)."""

    @property
    def maxProducersPerTopic(self) -> int: ...

    @property
    def maxSubscriptionsPerTopic(self) -> int: ...

    @property
    def maxConsumersPerSubscription(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Refusal:
    server_error: int
    message: str


def producer_refusal(config: LimitsConfig, producers: int) -> Refusal | None:
    """A producer more on a topic that has `producers`: refused past maxProducersPerTopic."""
    limit = config.maxProducersPerTopic
    if limit > 0 and producers >= limit:
        return Refusal(pb.ProducerBusy, f"Topic reached max producers limit ({limit})")
    return None


def subscription_refusal(config: LimitsConfig, subscriptions: int) -> Refusal | None:
    """A new subscription on a topic that has `subscriptions`: maxSubscriptionsPerTopic."""
    limit = config.maxSubscriptionsPerTopic
    if limit > 0 and subscriptions >= limit:
        return Refusal(
            pb.NotAllowedError,
            f"Exceed the maximum number of subscriptions of the topic ({limit})",
        )
    return None


def consumer_refusal(config: LimitsConfig, consumers: int) -> Refusal | None:
    """A consumer more on a subscription that has `consumers`: maxConsumersPerSubscription."""
    limit = config.maxConsumersPerSubscription
    if limit > 0 and consumers >= limit:
        return Refusal(pb.ConsumerBusy, f"Subscription reached max consumers limit ({limit})")
    return None
