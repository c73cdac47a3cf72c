"""A test double driver: every message reaches every consumer exactly DELAY_MS after it was
sent, and the callback then runs LAG_MS later, as if the worker were busy.

A harness that takes the receive timestamp at the wire records DELAY_MS; one that reads the
clock when the callback runs records DELAY_MS + LAG_MS. The delays come from the driver YAML's
`broker` section (the double has no broker), so a test sets them per run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent

from drivers.base import BrokerStamps, ConsumerSpec, SubscribeResult


def _now_us() -> int:
    return time.time_ns() // 1000


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
    def initialize(
        self,
        config,
        callback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        self.callback = callback
        settings = dict(config.broker)
        self.delay_s = float(settings.get("delayMs", 50)) / 1000
        self.lag_s = float(settings.get("lagMs", 0)) / 1000
        self.consumers: dict[str, list[int]] = {}

    def create_topic(self, topic: str, partitions: int) -> None:
        pass  # no broker: a topic is a key in self.consumers

    def create_producer(self, topic: str) -> DelayProducer:
        return DelayProducer(self, topic)

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        start = _now_us()
        self.consumers.setdefault(spec.topic, []).append(spec.index)
        return SubscribeResult(spec.index, 0, start, _now_us(), True)

    def deliver(self, topic: str, payload: bytes, on_done) -> None:
        on_done(None)
        gevent.sleep(self.delay_s)
        receive_us = _now_us()
        # Busy, not sleeping: the process cannot run the callback any earlier.
        until = time.perf_counter() + self.lag_s
        while time.perf_counter() < until:
            pass
        stamps = BrokerStamps(
            received_us=receive_us - 1000,
            persist_start_us=receive_us - 900,
            durable_us=receive_us - 800,
            notified_us=receive_us - 700,
            dispatch_us=receive_us - 600,
        )
        for index in self.consumers.get(topic, []):
            self.callback.message_received(index, payload, receive_us, stamps)

    def close(self) -> None:
        pass
