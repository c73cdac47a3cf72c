"""The Redis pub/sub driver against a real redis-server: a small fan-out run through the real
harness (the server started by the harness from drivers/redis.yaml), each consumer's deliveries
checked, and the driver in process against a server the test runs."""

from __future__ import annotations

from pathlib import Path

import gevent
import pytest

from drivers.base import ConsumerSpec, DriverError
from drivers.peer.settings import ClientConfig
from drivers.redis.driver import RedisConfig, RedisDriver
from tests.conftest import ROOT
from tests.peers import assert_every_consumer_got_every_message, program, run_workload, running

pytestmark = pytest.mark.integration


def test_broadcast_through_the_harness_every_consumer_gets_every_message(tmp_path: Path) -> None:
    program("redis")
    run = run_workload(tmp_path, ROOT / "drivers" / "redis.yaml", consumers=30)
    assert_every_consumer_got_every_message(run, 30)
    broker = run.manifest["broker"]
    assert broker["name"] == "redis-server" and broker["version"].startswith("Redis server v=")


def test_the_driver_against_a_running_server(tmp_path: Path) -> None:
    with running("redis", tmp_path) as server:
        driver = RedisDriver()
        got: dict[int, list[bytes]] = {}

        class Callback:
            def message_received(self, index, payload, receive_us, stamps, kernel_us) -> None:
                got.setdefault(index, []).append(payload)

            def messages_received(self, indexes, payload, receive_us, stamps, kernel_us):
                for index in indexes:
                    got.setdefault(index, []).append(payload)

        config = RedisConfig(client=ClientConfig(service_url=server.url))
        driver.initialize(config, Callback(), consumers_per_connection=100, service_url=server.url)
        try:
            jobs = [
                gevent.spawn(
                    driver.subscribe, ConsumerSpec(i, f"c{i}", "fanout-r", "sub-0", "Broadcast")
                )
                for i in range(5)
            ]
            gevent.joinall(jobs, timeout=10)
            # Redis sends a connection one copy of a message: one connection per consumer.
            assert sorted(job.get().connection for job in jobs) == [0, 1, 2, 3, 4]
            with pytest.raises(DriverError, match="no consumer groups"):
                driver.subscribe(ConsumerSpec(9, "c9", "fanout-r", "sub-1", "Shared"))
            producer = driver.create_producer("fanout-r")
            acks: list[Exception | None] = []
            for k in range(4):
                producer.send_async(None, b"m%d" % k, acks.append)
            with gevent.Timeout(10, False):  # type: ignore[arg-type]
                while sum(map(len, got.values())) < 20 or len(acks) < 4:
                    gevent.sleep(0.01)
            assert acks == [None] * 4
            assert got == {i: [b"m0", b"m1", b"m2", b"m3"] for i in range(5)}
        finally:
            driver.close()
