"""Slow and non-acknowledging consumers of the native Pulsar driver (ConsumerSpec.read_rate and
ack_skip_every, the workload's `slowConsumers` and `ackHoles`), against the bundled broker, with
the official pulsar-client publishing: what the broker's stats see of them."""

from __future__ import annotations

import time

import gevent
import pulsar
import pytest

from drivers.base import ConsumerSpec
from drivers.pulsar.driver import PulsarDriver
from tests.conftest import start_broker
from tests.integration.test_native_driver import Deliveries, at_most, config, stats, subscribe_all

pytestmark = pytest.mark.integration

QUEUE = 10


def _wait_stats(broker, topic: str, check, timeout_s: float = 10) -> dict:
    with at_most(timeout_s):
        while True:
            found = stats(broker, topic)
            if check(found):
                return found
            gevent.sleep(0.1)
    return stats(broker, topic)


def test_stalled_slow_and_hole_leaving_consumers(tmp_path):
    broker = start_broker(tmp_path / "data", extra=("--set", "journalSyncData=false"))
    driver, deliveries = PulsarDriver(), Deliveries()
    client = None
    try:
        # Cumulative acks in the driver file: the hole-leaving consumer acks individually anyway.
        driver.initialize(
            config(receiver_queue_size=QUEUE, ack_mode="cumulative"),
            deliveries,
            consumers_per_connection=4,
            service_url=broker.url,
            admin_url=broker.admin,
        )
        specs = [
            ConsumerSpec(0, "normal", "paced", "normal", "Shared"),
            ConsumerSpec(1, "stalled", "paced", "stalled", "Shared", read_rate=0, ack_skip_every=1),
            ConsumerSpec(2, "slow", "paced", "slow", "Shared", read_rate=5.0),
            ConsumerSpec(3, "holes", "paced", "holes", "Shared", ack_skip_every=4),
        ]
        assert all(r.ok for r in subscribe_all(driver, specs))

        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        producer = client.create_producer("paced", batching_enabled=False)
        for i in range(40):
            producer.send(f"m{i:02d}".encode())
        sent = time.monotonic()

        def received(index: int) -> int:
            return len(deliveries.by_consumer.get(index, []))

        with at_most(10):
            while received(0) < 40 or received(3) < 40:
                gevent.sleep(0.05)
        assert received(0) == 40 and received(3) == 40

        # Every 4th message of "holes" stays unacknowledged, the rest acked one by one: 10 in
        # the backlog, nine of them holes below an acknowledged range (the 10th is the last).
        subs = _wait_stats(
            broker, "paced", lambda s: s["subscriptions"]["holes"]["msgBacklog"] == 10
        )["subscriptions"]
        assert subs["holes"]["msgBacklog"] == 10
        assert subs["holes"]["nonContiguousDeletedMessagesRanges"] == 9
        assert subs["normal"]["msgBacklog"] == 0

        # "stalled" took its receiver queue and nothing more, acknowledging none of it.
        gevent.sleep(1.0)
        assert received(1) == QUEUE
        subs = stats(broker, "paced")["subscriptions"]
        assert subs["stalled"]["msgBacklog"] == 40
        assert subs["stalled"]["consumers"][0]["unackedMessages"] == QUEUE

        # "slow" took its queue at once, then about 5 a second: never more than its permits.
        with at_most(12):
            while received(2) < 40:
                elapsed = time.monotonic() - sent
                assert received(2) <= QUEUE + 5 * (elapsed + 0.5), (received(2), elapsed)
                gevent.sleep(0.05)
        elapsed = time.monotonic() - sent
        assert received(2) == 40
        assert elapsed >= (40 - QUEUE) / 5 - 1.0  # ~6 s, not at once
        subs = _wait_stats(
            broker, "paced", lambda s: s["subscriptions"]["slow"]["msgBacklog"] == 0
        )["subscriptions"]
        assert subs["slow"]["msgBacklog"] == 0  # it acknowledges what it takes
    finally:
        if client is not None:
            client.close()
        driver.close()
        broker.stop()
