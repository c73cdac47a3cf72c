"""A test double driver: every message reaches every consumer exactly delayMs after it was
sent, and the callback then runs lagMs later, as if the worker were busy.

A harness that takes the receive timestamp at the wire records delayMs; one that reads the
clock when the callback runs records delayMs + lagMs. The double owns its settings, as any
driver does: a `delay:` section of the driver file, which it checks itself, e.g.

    name: delay-double
    driverClass: tests.doubles.delay_driver:DelayDriver
    delay:
      delayMs: 40
      lagMs: 150

It has no broker, so the harness starts none and has nothing to reach.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.event import Event

from drivers.base import BrokerStamps, ConsumerCallback, ConsumerSpec, SubscribeResult
from drivers.config import Parser, check_keys, integer, parse_section
from results_contract.clock import now_us

IN_PROCESS = "delay-double://in-process"
"""The double's "broker": not the bundled one (which a None service URL would start)."""

_KEYS: dict[str, tuple[str, Parser]] = {
    "delayMs": ("delay_ms", integer(minimum=0)),
    "lagMs": ("lag_ms", integer(minimum=0)),
}


@dataclass(frozen=True, slots=True)
class DelayConfig:
    delay_ms: int = 50
    lag_ms: int = 0

    @classmethod
    def parse(cls, sections: Mapping[Any, object], where: str) -> DelayConfig:
        check_keys(sections, ["delay"], where)
        return cls(**parse_section(sections, "delay", _KEYS, where))

    @property
    def service_url(self) -> str | None:
        return IN_PROCESS

    @property
    def admin_url(self) -> str | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"delay": {"delayMs": self.delay_ms, "lagMs": self.lag_ms}}

    def partitions_problem(self, partitions: int) -> str | None:
        return None  # a topic is a key in a dict: any partition count is the same


class DelayProducer:
    def __init__(self, driver: DelayDriver, topic: str) -> None:
        self.driver = driver
        self.topic = topic

    def send_async(
        self, key: bytes | None, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        gevent.spawn(self.driver.deliver, self.topic, payload, on_done)

    def close(self) -> None:
        pass


class DelayDriver:
    def __init__(self) -> None:
        self.config = DelayConfig()
        self.consumers: dict[str, list[int]] = {}
        self._open = Event()
        self._open.set()

    def parse_config(self, sections: Mapping[Any, object], where: str) -> DelayConfig:
        return DelayConfig.parse(sections, where)

    def topic_name(self, name: str, *, persistent: bool) -> str:
        return name

    def check_reachable(self, service_url: str, timeout: float) -> None:
        pass  # nothing to reach: deliveries happen in this process

    def topic_stats(
        self, topics: list[str], partitions: int, *, admin_url: str | None
    ) -> dict[str, object] | None:
        return None

    def initialize(
        self,
        config: DelayConfig,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        self.config = config
        self.callback = callback

    def create_topic(self, topic: str, partitions: int) -> None:
        pass  # no broker: a topic is a key in self.consumers

    def create_producer(self, topic: str) -> DelayProducer:
        return DelayProducer(self, topic)

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        start = now_us()
        self.consumers.setdefault(spec.topic, []).append(spec.index)
        return SubscribeResult(spec.index, 0, start, now_us(), True)

    def pause_consumers(self, paused: bool) -> None:
        if paused:
            self._open.clear()
        else:
            self._open.set()

    def deliver(
        self, topic: str, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        on_done(None)
        self._open.wait()  # paused consumers: this delivery waits, its send is done
        gevent.sleep(self.config.delay_ms / 1000)
        receive_us = now_us()
        # Busy, not sleeping: the process cannot run the callback any earlier.
        until = time.perf_counter() + self.config.lag_ms / 1000
        while time.perf_counter() < until:
            pass
        stamps = BrokerStamps(
            received_us=receive_us - 1000,
            persist_start_us=receive_us - 900,
            durable_us=receive_us - 800,
            notified_us=receive_us - 700,
            dispatch_us=receive_us - 600,
        )
        indexes = self.consumers.get(topic, [])
        if indexes:
            # One "read" for every consumer of the topic, as a broadcast connection's; the
            # bytes "arrived" when the delay ended: the kernel time is the read time.
            self.callback.messages_received(list(indexes), payload, receive_us, stamps, receive_us)

    def close(self) -> None:
        pass
