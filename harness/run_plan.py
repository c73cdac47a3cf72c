"""What every process of a run needs to know, in one msgpack-able value: workload, driver,
broker URL, topic names, and where each consumer and producer goes.

The driver's config travels as the coordinator parsed it (pickled: its driver's own types),
so a worker neither parses the driver file's sections again nor reads what they name (a
token file) a second time. Unpickling trusts the master no more than a worker already does: it
imports and runs the driver class the master names."""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drivers.base import DriverConfig
from harness.driver_config import DriverFile
from harness.workload import Workload

MAX_CONSUMERS_PER_USER = 100
"""The largest group of consumers one Locust user stands for (RunPlan.consumers_per_user)."""
SPAWNS_PER_SECOND = 10
"""Users a second Locust should start at least, when the workload's spawnRate paces them."""

SOURCE_ADDRESSES_FIELD = "source_addresses"
"""The field of the drivers' `client` section for loopback source addresses (its key is
`sourceAddresses`, docs/workloads.md)."""


def _plain(obj: Any) -> Any:
    """A dataclass as msgpack-able values (Locust ships messages with msgpack)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def workload_from_dict(data: dict[str, Any]) -> Workload:
    values = dict(data)
    if values.get("payload_file"):
        values["payload_file"] = Path(values["payload_file"])
    if "topic_policies" in values:  # msgpack turns its pairs into lists
        values["topic_policies"] = tuple(tuple(pair) for pair in values["topic_policies"])
    for key in ("slow_consumers", "ack_holes"):  # likewise (fraction, amount)
        if values.get(key) is not None:
            values[key] = tuple(values[key])
    return Workload(**values)


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    workload: Workload
    topics: tuple[str, ...]
    """The driver's names of the run's topics (drivers.base.BenchmarkDriver.topic_name)."""
    driver_class: str
    driver_config: DriverConfig
    """The driver's sections of the driver file, as the coordinator's driver parsed them:
    each worker's driver is initialized with it, unparsed."""
    service_url: str
    """The broker; "" until the bundled broker has started, when the driver names none."""
    admin_url: str | None = None

    @classmethod
    def make(cls, run_id: str, workload: Workload, driver: DriverFile) -> RunPlan:
        persistent = workload.topic_persistence == "persistent"
        return cls(
            run_id=run_id,
            workload=workload,
            topics=tuple(
                driver.driver.topic_name(f"fanout-{run_id}-{t}", persistent=persistent)
                for t in range(workload.topics)
            ),
            driver_class=driver.driver_class,
            driver_config=driver.config,
            service_url=driver.config.service_url or "",
            admin_url=driver.config.admin_url,
        )

    def with_broker(self, service_url: str, admin_url: str | None) -> RunPlan:
        """The plan aimed at a broker started for it (the bundled one)."""
        return dataclasses.replace(self, service_url=service_url, admin_url=admin_url)

    @property
    def source_addresses(self) -> int:
        """The driver's `client.sourceAddresses` (0 when it has none)."""
        value = getattr(getattr(self.driver_config, "client", None), SOURCE_ADDRESSES_FIELD, 0)
        return value if isinstance(value, int) else 0

    def with_source_addresses(self, count: int) -> RunPlan:
        """The plan with the driver asked to spread its connections over `count` loopback
        source addresses (harness/sockets.py): for a driver whose `client` section has
        `sourceAddresses` (the native and the peer drivers), and only when the driver file
        left it at 0 (a number given there stands). Otherwise the plan unchanged."""
        client = getattr(self.driver_config, "client", None)
        if count <= 0 or getattr(client, SOURCE_ADDRESSES_FIELD, None) != 0:
            return self
        assert dataclasses.is_dataclass(client) and not isinstance(client, type)
        spread = dataclasses.replace(client, **{SOURCE_ADDRESSES_FIELD: count})
        config = dataclasses.replace(self.driver_config, client=spread)  # type: ignore[type-var]
        return dataclasses.replace(self, driver_config=config)

    @property
    def consumers_per_user(self) -> int:
        """How many consumers one Locust user stands for (harness/users.py): a group, so that
        a worker holds a greenlet and a user per group, not per consumer (at 100,000 consumers
        those were two thirds of a worker's 13 KiB per consumer, benchmarks/client_connect.py).
        Whole connections where they fit (a connection of the multiplexed layout holds
        consumersPerConnection consumers; one user's subscribes then share its connections),
        at most MAX_CONSUMERS_PER_USER; fewer when the workload's spawnRate is slow, so that
        Locust still starts about SPAWNS_PER_SECOND users a second and the consumers subscribe
        at an even pace rather than in rare bursts."""
        w = self.workload
        per_connection = max(1, w.consumers_per_connection)
        size = MAX_CONSUMERS_PER_USER // per_connection * per_connection or MAX_CONSUMERS_PER_USER
        if w.spawn_rate > 0:
            size = min(size, max(1, int(w.spawn_rate // SPAWNS_PER_SECOND)))
        return size

    def consumer_users(self, worker_count: int) -> int:
        """Locust consumer users for `worker_count` workers: the same number on each (Locust's
        dispatcher deals users round-robin, so a multiple of the worker count lands evenly),
        enough for the largest share (`worker_share`) in groups of `consumers_per_user`."""
        workers = max(1, worker_count)
        largest = -(-self.workload.total_consumers // workers)
        return workers * -(-largest // self.consumers_per_user)

    def worker_share(self, worker_index: int, worker_count: int) -> range:
        """The global numbers of the consumers worker `worker_index` holds: every
        `worker_count`-th from its index, so workers need no coordination; its n-th local
        consumer is the share's n-th."""
        return range(worker_index, self.workload.total_consumers, max(1, worker_count))

    def consumer_placement(self, global_index: int) -> tuple[str, str]:
        """Consumer number → (topic, subscription), filling subscriptions in order."""
        block, subscription = self._slot(global_index)
        return self.topics[block % self.workload.topics], f"sub-{subscription}"

    def _slot(self, global_index: int) -> tuple[int, int]:
        """Consumer number → (its span of a topic's consumers, counted from the first topic
        without wrapping; its subscription in that topic). Subscriptions fill in order, so
        ascending numbers with the same slot at both ends have it all along."""
        w = self.workload
        per_topic = w.subscriptions_per_topic * w.consumer_per_subscription
        if not per_topic:
            return 0, 0
        return global_index // per_topic, global_index % per_topic // w.consumer_per_subscription

    def consumer_placements(self, global_indexes: Sequence[int]) -> list[tuple[str, str]]:
        """`consumer_placement` of each, the names made once per subscription and shared by
        its consumers (a group subscribes 100 consumers of one subscription at a time)."""
        if isinstance(global_indexes, range) and global_indexes.step > 0 and global_indexes:
            # One placement for a group of one subscription, where one per consumer was 2 %
            # of a storm's CPU (py-spy, benchmarks/client_connect.py).
            if self._slot(global_indexes[0]) == self._slot(global_indexes[-1]):
                return [self.consumer_placement(global_indexes[0])] * len(global_indexes)
        made: dict[tuple[int, int], tuple[str, str]] = {}
        placements = []
        slot, topics, count = self._slot, self.topics, self.workload.topics
        for global_index in global_indexes:
            block, subscription = slot(global_index)
            key = (block % count, subscription)
            found = made.get(key)
            if found is None:
                found = made[key] = (topics[key[0]], f"sub-{subscription}")
            placements.append(found)
        return placements

    def producer_topic(self, global_index: int) -> str:
        return self.topics[global_index % len(self.topics)]

    def payload_bytes(self) -> bytes | None:
        path = self.workload.payload_file
        if path and os.path.exists(path):
            return Path(path).read_bytes()
        return None

    def key_source(self, producer_index: int) -> Iterator[bytes | None]:
        """Message keys as OMB's keyDistributor makes them."""
        kind = self.workload.key_distributor
        if kind == "KEY_ROUND_ROBIN":
            return (f"key-{i % 1000}".encode() for i in itertools.count())
        if kind == "RANDOM_NANO":
            rng = random.Random(producer_index)
            return (f"{rng.getrandbits(63)}".encode() for _ in itertools.count())
        return itertools.repeat(None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workload": _plain(self.workload),
            "topics": list(self.topics),
            "driver_class": self.driver_class,
            "driver_config": pickle.dumps(self.driver_config),
            "service_url": self.service_url,
            "admin_url": self.admin_url,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPlan:
        return cls(
            run_id=data["run_id"],
            workload=workload_from_dict(data["workload"]),
            topics=tuple(data["topics"]),
            driver_class=data["driver_class"],
            driver_config=pickle.loads(data["driver_config"]),
            service_url=data["service_url"],
            admin_url=data.get("admin_url"),
        )
