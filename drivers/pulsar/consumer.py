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
from typing import Any, Protocol

import gevent
from gevent.pool import Group

from drivers.base import ConsumerSpec, DriverError
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.client_commands import GroupSubscribeTemplate
from pulsar_protocol.commands import T, command
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


def subscribe_template(spec: ConsumerSpec, topic: str | None = None) -> GroupSubscribeTemplate:
    """The SUBSCRIBEs `subscribe_command` makes for `spec` on `topic`, as a template of bytes
    (one per subscription, topic and type: the consumers of a subscription share it, and a
    group's are written from it at once: GroupSubscribeTemplate.frames)."""
    _check_mode(spec)
    return _template(topic or spec.topic, spec.subscription, spec.subscription_type)


@lru_cache(maxsize=256)
def _template(topic: str, subscription: str, mode: str) -> GroupSubscribeTemplate:
    return GroupSubscribeTemplate(
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


PACE_TICK_S = 0.1
"""How often paced consumers get back the permits of what they took meanwhile."""


class PacedLink(Protocol):
    """What the pacer needs of a connection (drivers.pulsar.connection.Connection)."""

    @property
    def closed(self) -> bool: ...

    def send_soon(self, *events: ev.Event) -> None: ...


class Pacer:
    """Slow consumers (a workload's `slowConsumers`): a consumer paced by the codec
    (ConsumerPacing) gets no permits back as messages arrive; here, every PACE_TICK_S, each gets
    back those of what it may have taken at its rate meanwhile (its credit), so once its receiver
    queue is full the broker sends it that rate. One greenlet for the process; a consumer
    whose connection closed is dropped (subscribed again, it is paced again)."""

    def __init__(self, group: Group) -> None:
        self._group = group
        self._paced: dict[tuple[PacedLink, int], list[float]] = {}
        """(connection, consumer id) → [rate, credit]."""
        self._greenlet: gevent.Greenlet | None = None

    def pace(self, conn: PacedLink, consumer_ids: list[int], spec: ConsumerSpec) -> None:
        """Tell the codec how `spec`'s consumers consume (as their SUBSCRIBE answered), and
        give the slow ones their rate."""
        paced = spec.read_rate is not None
        if not paced and not spec.ack_skip_every:
            return
        conn.send_soon(
            *(ev.ConsumerPacing(cid, paced, spec.ack_skip_every) for cid in consumer_ids)
        )
        if spec.read_rate:
            for cid in consumer_ids:
                self._paced[conn, cid] = [spec.read_rate, 0.0]
            if self._greenlet is None:
                self._greenlet = self._group.spawn(self._run)

    def _run(self) -> None:
        while True:
            gevent.sleep(PACE_TICK_S)
            for key, state in list(self._paced.items()):
                conn, cid = key
                if conn.closed:
                    del self._paced[key]
                    continue
                state[1] += state[0] * PACE_TICK_S
                permits = int(state[1])
                if permits:
                    state[1] -= permits
                    try:
                        conn.send_soon(ev.PermitsBack(cid, permits))
                    except DriverError:
                        del self._paced[key]


class Consumers(dict[int, ConsumerState]):
    """A connection's subscribed consumers by consumer id (the ones deliveries go to), in the
    order they subscribed, which is the order the broker dispatches a broadcast to them: a
    run of them one after another (a MessageRun, whole or cut by a read) finds its indexes as
    one slice of a list kept for the run (`run_indexes`), not a dict lookup per consumer. Every
    change drops that list; the next run makes it again."""

    __slots__ = ("_ids", "_indexes")

    def __init__(self) -> None:
        super().__init__()
        self._ids: tuple[int, ...] | None = None
        self._indexes: list[int] = []

    def run_indexes(self, consumer_ids: tuple[int, ...]) -> list[int] | None:
        """The indexes of `consumer_ids` when they are consumers here one after another, in
        order; else None (one is gone, or they come in another order)."""
        ids = self._ids
        if ids is None:
            ids = self._ids = tuple(self)
            self._indexes = [state.index for state in self.values()]
        at = ev.run_position(ids, consumer_ids)
        return None if at < 0 else self._indexes[at : at + len(consumer_ids)]

    def __setitem__(self, consumer_id: int, state: ConsumerState) -> None:
        self._ids = None
        super().__setitem__(consumer_id, state)

    def __delitem__(self, consumer_id: int) -> None:
        self._ids = None
        super().__delitem__(consumer_id)

    def pop(self, consumer_id: int, *default: Any) -> Any:
        self._ids = None
        return super().pop(consumer_id, *default)

    def popitem(self) -> tuple[int, ConsumerState]:
        self._ids = None
        return super().popitem()

    def clear(self) -> None:
        self._ids = None
        super().clear()

    def setdefault(self, consumer_id: int, state: ConsumerState) -> ConsumerState:
        self._ids = None
        return super().setdefault(consumer_id, state)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._ids = None
        super().update(*args, **kwargs)

    def __ior__(self, other: Any) -> Consumers:  # type: ignore[override,misc]
        self.update(other)
        return self
