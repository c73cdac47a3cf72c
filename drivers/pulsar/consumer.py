"""One consumer on a connection: how it subscribes, its permits, its pending acknowledgement.

Permits work as in the official clients: the broker starts with receiverQueueSize of them, and
once half of those have been delivered (to the harness, inline) they are given back in one
FLOW. Acknowledgements are grouped: the connection's ack flusher collects them every
ackGroupTimeMs, one ACK per consumer, cumulative (the latest delivered id) or individual (every
id delivered since the last flush, in one command).
"""

from __future__ import annotations

from drivers.base import ConsumerSpec, DriverError
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.extensions import SUBSCRIPTION_MODE_PROPERTY
from pulsar_protocol.frames import encode_frame

SUB_TYPES = {
    "Exclusive": pb.CommandSubscribe.Exclusive,
    "Shared": pb.CommandSubscribe.Shared,
    "Failover": pb.CommandSubscribe.Failover,
    "Key_Shared": pb.CommandSubscribe.Key_Shared,
    # The wire has no fifth subType: the bundled broker picks Broadcast from this property.
    "Broadcast": pb.CommandSubscribe.Shared,
}
BROADCAST_PROPERTY = pb.KeyValue(key=SUBSCRIPTION_MODE_PROPERTY, value="broadcast")


def subscribe_command(
    spec: ConsumerSpec, consumer_id: int, request_id: int, topic: str | None = None
) -> pb.BaseCommand:
    """SUBSCRIBE for `spec`, on `topic` when given (one partition of spec.topic)."""
    try:
        sub_type = SUB_TYPES[spec.subscription_type]
    except KeyError:
        raise DriverError(
            f"consumer {spec.name}: unknown subscription type {spec.subscription_type!r} "
            f"(one of {', '.join(SUB_TYPES)})"
        ) from None
    fields: dict = {}
    if spec.subscription_type == "Broadcast":
        fields["metadata"] = [BROADCAST_PROPERTY]
    elif spec.subscription_type == "Key_Shared":
        fields["keySharedMeta"] = pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT)
    return command(
        T.SUBSCRIBE,
        topic=topic or spec.topic,
        subscription=spec.subscription,
        subType=sub_type,
        consumer_id=consumer_id,
        request_id=request_id,
        consumer_name=spec.name,
        durable=True,
        initialPosition=pb.CommandSubscribe.Latest,
        **fields,
    )


def flow_frame(consumer_id: int, permits: int) -> bytes:
    return encode_frame(command(T.FLOW, consumer_id=consumer_id, messagePermits=permits))


class ConsumerState:
    """Bookkeeping of one consumer, touched by its connection's reader and ack flusher only."""

    __slots__ = (
        "index",
        "consumer_id",
        "spec",
        "topic",
        "established",
        "ack_queued",
        "_refill_at",
        "_delivered",
        "_individual",
        "_last",
    )

    def __init__(
        self,
        index: int,
        consumer_id: int,
        receiver_queue_size: int,
        individual_acks: bool,
        spec: ConsumerSpec | None = None,
        topic: str = "",
    ) -> None:
        self.index = index
        self.consumer_id = consumer_id
        self.spec = spec
        self.topic = topic
        """What to subscribe again after a lost connection: spec.topic or one partition."""
        self.established = False
        """SUBSCRIBE was answered with SUCCESS: a consumer the harness counts as connected."""
        self.ack_queued = False
        """Already in the connection's list of consumers with an acknowledgement to send."""
        self._refill_at = max(1, receiver_queue_size // 2)
        self._delivered = 0
        self._individual: list[pb.MessageIdData] | None = [] if individual_acks else None
        self._last: pb.MessageIdData | None = None

    def delivered(self, message_id: pb.MessageIdData, messages: int) -> bytes | None:
        """Record an entry handed to the harness; returns a FLOW frame when permits are due.

        `message_id` is the MESSAGE command's own (kept, not copied: acks are rarer than
        deliveries)."""
        self._last = message_id
        if self._individual is not None:
            self._individual.append(message_id)
        self._delivered += messages
        if self._delivered < self._refill_at:
            return None
        permits, self._delivered = self._delivered, 0
        return flow_frame(self.consumer_id, permits)

    def take_ack(self) -> bytes | None:
        """The ACK frame for everything delivered since the last call, or None."""
        self.ack_queued = False
        if self._individual is not None:
            ids, self._individual = self._individual, []
            ack_type = pb.CommandAck.Individual
        else:
            ids = [self._last] if self._last is not None else []
            self._last = None
            ack_type = pb.CommandAck.Cumulative
        if not ids:
            return None
        return encode_frame(
            command(
                T.ACK,
                consumer_id=self.consumer_id,
                ack_type=ack_type,
                message_id=ids,
            )
        )
