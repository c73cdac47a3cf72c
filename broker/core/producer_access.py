"""Who may produce to a topic: producer names unique per topic, and Pulsar's access modes.

As Pulsar's AbstractTopic (internalAddProducer, incrementTopicEpochIfNeeded,
handleProducerRemoved):

- a name is one producer's: another producer with it is refused with ProducerBusy, unless it
  is the same producer (same connection and id) coming back with a higher `epoch`;
- Shared (the default) is refused with ProducerBusy while an exclusive producer is there or
  waiting;
- Exclusive is refused with ProducerFenced while any other producer is there or waiting, or
  when it comes back with a topic epoch older than the topic's;
- ExclusiveWithFencing closes every other producer (and refuses the waiting ones) and takes
  the topic;
- WaitForExclusive waits while any producer is there: its client hears "not ready yet" (a
  PRODUCER_SUCCESS with producer_ready=false) and then "ready" once the topic is free.

Each exclusive admission moves the topic epoch (from 0), which the client keeps and sends
back when it reconnects. The epoch lives in memory (Pulsar keeps it in the topic's metadata).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from pulsar_protocol import pulsar_api_pb2 as pb

SHARED = 0
EXCLUSIVE = 1
WAIT_FOR_EXCLUSIVE = 2
EXCLUSIVE_WITH_FENCING = 3
"""CommandProducer.producer_access_mode (Pulsar's ProducerAccessMode)."""


class ProducerRefused(Exception):
    def __init__(self, server_error: int, message: str) -> None:
        super().__init__(message)
        self.server_error = server_error


class AccessProducer(Protocol):
    """What access control reads of a producer (broker.core.topic.Producer)."""

    @property
    def name(self) -> str: ...

    @property
    def producer_id(self) -> int: ...

    @property
    def access_mode(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def owner(self) -> object: ...

    def fenced(self) -> None: ...


P = TypeVar("P", bound=AccessProducer)
Ready = Callable[[int | None, ProducerRefused | None], None]
"""Called once for a waiting producer: (topic epoch, None) when it got the topic, or
(None, why) when it was refused meanwhile."""


class ProducerAccess(Generic[P]):
    """One topic's producers (the dict the topic reports on, by id(producer)) and who waits."""

    def __init__(self, producers: dict[int, P]) -> None:
        self._producers = producers
        self.topic_epoch: int | None = None
        self._exclusive: P | None = None
        self._waiting: list[tuple[P, int | None, Ready]] = []

    def admit(self, producer: P, topic_epoch: int | None, ready: Ready) -> tuple[bool, int | None]:
        """(True, the topic epoch for an exclusive producer) once `producer` is in; (False,
        None) when it waits (WaitForExclusive: `ready` says how that ends). Raises
        ProducerRefused."""
        self._check_name(producer)
        mode = producer.access_mode
        busy = self._exclusive is not None or bool(self._waiting)
        if mode == SHARED:
            if busy:
                raise ProducerRefused(pb.ProducerBusy, self._exclusive_message())
            self._producers[id(producer)] = producer
            return True, None
        if mode == EXCLUSIVE:
            if busy:
                raise ProducerRefused(pb.ProducerFenced, self._exclusive_message())
            if self._producers:
                raise ProducerRefused(pb.ProducerFenced, "Topic has existing shared producers")
        elif mode == EXCLUSIVE_WITH_FENCING:
            self._check_epoch(topic_epoch)
            waiting, self._waiting = self._waiting, []
            for _, _, told in waiting:
                told(None, ProducerRefused(pb.ProducerFenced, "Fenced out"))
            for other in list(self._producers.values()):
                self._producers.pop(id(other), None)
                other.fenced()
            self._exclusive = None
        elif mode == WAIT_FOR_EXCLUSIVE:
            if busy or self._producers:
                self._waiting.append((producer, topic_epoch, ready))
                return False, None
        else:
            raise ProducerRefused(pb.NotAllowedError, f"unknown producer access mode {mode}")
        return True, self._take(producer, topic_epoch)

    def remove(self, producer: P) -> None:
        """`producer` closed or left (or gave up waiting); the next waiting one may go."""
        self._waiting = [w for w in self._waiting if w[0] is not producer]
        if self._producers.pop(id(producer), None) is None:
            return
        if self._exclusive is producer:
            self._exclusive = None
        if self._waiting and not self._producers:
            waiting, topic_epoch, ready = self._waiting.pop(0)
            try:
                self._check_name(waiting)
                epoch = self._take(waiting, topic_epoch)
            except ProducerRefused as refused:
                ready(None, refused)
            else:
                ready(epoch, None)

    def _take(self, producer: P, topic_epoch: int | None) -> int:
        """`producer` holds the topic alone: the epoch moves (or is its own on a return)."""
        self._check_epoch(topic_epoch)
        if topic_epoch is not None:
            self.topic_epoch = topic_epoch
        else:
            self.topic_epoch = 0 if self.topic_epoch is None else self.topic_epoch + 1
        self._exclusive = producer
        self._producers[id(producer)] = producer
        return self.topic_epoch

    def _check_epoch(self, topic_epoch: int | None) -> None:
        if topic_epoch is not None and topic_epoch < (self.topic_epoch or 0):
            raise ProducerRefused(
                pb.ProducerFenced,
                f"Topic epoch has already moved. Current epoch: {self.topic_epoch}, "
                f"Producer epoch: {topic_epoch}",
            )

    def _check_name(self, producer: P) -> None:
        for other in list(self._producers.values()):
            if other.name != producer.name:
                continue
            successor = (
                other.owner is producer.owner
                and other.producer_id == producer.producer_id
                and other.epoch < producer.epoch
            )
            if not successor:
                raise ProducerRefused(
                    pb.ProducerBusy,
                    f"Producer with name '{producer.name}' is already connected to topic",
                )
            self._producers.pop(id(other), None)  # replaced by its successor, not fenced
            if self._exclusive is other:
                self._exclusive = None

    def _exclusive_message(self) -> str:
        holder = self._exclusive or (self._waiting[0][0] if self._waiting else None)
        name = holder.name if holder is not None else ""
        return f"Topic has an existing exclusive producer: {name}"
