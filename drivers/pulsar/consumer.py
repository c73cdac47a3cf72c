"""One consumer on a connection: how it subscribes, and what the driver keeps of it.

Permits and acknowledgements are the protocol's (pulsar_protocol.connection): the broker
starts with receiverQueueSize permits, and once half of those have been delivered (to the
harness, inline) the codec gives them back in one FLOW. Acknowledgements are grouped: the
connection's ack flusher asks the codec for them every ackGroupTimeMs, one ACK per consumer,
cumulative (the latest delivered id) or individual (every id delivered since the last flush).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from drivers.base import ConsumerSpec, DriverError
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import SubscribeTemplate, T, command
from pulsar_protocol.extensions import SUBSCRIPTION_MODES, mode_property, wire_subtype


def _check_mode(spec: ConsumerSpec) -> None:
    if spec.subscription_type not in SUBSCRIPTION_MODES:
        raise DriverError(
            f"consumer {spec.name}: unknown subscription type {spec.subscription_type!r} "
            f"(one of {', '.join(SUBSCRIPTION_MODES)})"
        )


def _mode_fields(mode: str) -> dict[str, Any]:
    """The fields `mode` adds to a SUBSCRIBE besides its subType."""
    # The wire has no fifth subType: a broker picks Broadcast from a subscription property.
    prop = mode_property(mode)
    if prop is not None:
        return {"metadata": [prop]}
    if mode == "Key_Shared":
        return {"keySharedMeta": pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT)}
    return {}


def subscribe_command(
    spec: ConsumerSpec, consumer_id: int, request_id: int, topic: str | None = None
) -> pb.BaseCommand:
    """SUBSCRIBE for `spec`, on `topic` when given (one partition of spec.topic), as a
    protobuf object (the reference `subscribe_template` is checked against)."""
    _check_mode(spec)
    mode = spec.subscription_type
    fields = _mode_fields(mode)
    return command(
        T.SUBSCRIBE,
        topic=topic or spec.topic,
        subscription=spec.subscription,
        subType=wire_subtype(mode),
        consumer_id=consumer_id,
        request_id=request_id,
        consumer_name=spec.name,
        durable=True,
        initialPosition=pb.CommandSubscribe.Latest,
        **fields,
    )


def subscribe_template(spec: ConsumerSpec, topic: str | None = None) -> SubscribeTemplate:
    """The SUBSCRIBEs `subscribe_command` makes for `spec` on `topic`, as a template of bytes
    (one per subscription, topic and type: the consumers of a subscription share it)."""
    _check_mode(spec)
    return _template(topic or spec.topic, spec.subscription, spec.subscription_type)


@lru_cache(maxsize=256)
def _template(topic: str, subscription: str, mode: str) -> SubscribeTemplate:
    return SubscribeTemplate(
        pb.CommandSubscribe(topic=topic, subscription=subscription, subType=wire_subtype(mode)),
        pb.CommandSubscribe(
            durable=True, initialPosition=pb.CommandSubscribe.Latest, **_mode_fields(mode)
        ),
    )


@dataclass(slots=True)
class ConsumerState:
    """A subscribed consumer as the driver knows it: whom to hand its deliveries to, and what
    to subscribe again after a lost connection. Its wire state is the codec's
    (`Connection.consumer_state`); a connection lists only consumers whose SUBSCRIBE
    succeeded, so being listed is what "connected" means to the harness."""

    index: int
    consumer_id: int
    spec: ConsumerSpec | None = None
    topic: str = ""
    """spec.topic or one partition of it."""
