"""What every process of a run needs to know, in one picklable value: workload, driver,
broker URL, topic names, and where each consumer and producer goes."""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.driver_config import ClientConfig, ConsumerConfig, DriverConfig, ProducerConfig
from harness.workload import Workload


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
    return Workload(**values)


def driver_from_dict(data: dict[str, Any]) -> DriverConfig:
    values = dict(data)
    values["client"] = ClientConfig(**values["client"])
    values["producer"] = ProducerConfig(**values["producer"])
    values["consumer"] = ConsumerConfig(**values["consumer"])
    values["broker"] = MappingProxyType(dict(values["broker"]))
    return DriverConfig(**values)


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    workload: Workload
    driver: DriverConfig
    service_url: str
    admin_url: str | None = None

    def topic_name(self, t: int) -> str:
        w = self.workload
        return f"{w.topic_persistence}://public/default/fanout-{self.run_id}-{t}"

    def consumer_placement(self, global_index: int) -> tuple[str, str]:
        """Consumer number → (topic, subscription), filling subscriptions in order."""
        w = self.workload
        per_topic = w.subscriptions_per_topic * w.consumer_per_subscription
        topic = (global_index // per_topic) % w.topics if per_topic else 0
        within = global_index % per_topic if per_topic else 0
        subscription = within // w.consumer_per_subscription
        return self.topic_name(topic), f"sub-{subscription}"

    def topic_names(self) -> list[str]:
        return [self.topic_name(t) for t in range(self.workload.topics)]

    def producer_topic(self, global_index: int) -> str:
        return self.topic_name(global_index % self.workload.topics)

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
            "driver": _plain(self.driver),
            "service_url": self.service_url,
            "admin_url": self.admin_url,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPlan:
        return cls(
            run_id=data["run_id"],
            workload=workload_from_dict(data["workload"]),
            driver=driver_from_dict(data["driver"]),
            service_url=data["service_url"],
            admin_url=data.get("admin_url"),
        )
