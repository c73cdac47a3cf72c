"""Partitioned topics on the client side: partition names, message routing, the producer.

A partitioned topic is N plain topics named `<topic>-partition-<i>` plus a partition count the
broker keeps as metadata. Clients do the rest: a consumer subscribes to every partition, and a
producer picks one partition per message.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from drivers.base import BenchmarkProducer
from pulsar_protocol.extensions import key_partition
from pulsar_protocol.topic_names import partition_names

__all__ = ["PartitionedProducer", "key_partition", "partition_names"]


class PartitionedProducer:
    """One producer per partition; keyed messages go by key hash, others round robin (Pulsar's
    RoundRobinPartition routing without batching: one message per partition in turn)."""

    def __init__(self, topic: str, producers: Sequence[BenchmarkProducer]) -> None:
        self.topic = topic
        self._producers = list(producers)
        self._turn = itertools.cycle(range(len(self._producers)))

    def send_async(
        self, key: bytes | None, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        n = len(self._producers)
        index = key_partition(key, n) if key is not None else next(self._turn)
        self._producers[index].send_async(key, payload, on_done)

    def close(self) -> None:
        for producer in self._producers:
            producer.close()
