"""The NATS driver against a real nats-server: small fan-out runs through the real harness
(the server started by the harness from drivers/nats.yaml), each consumer's deliveries checked,
and the driver in process against a server the test runs (a driver file's serviceUrl)."""

from __future__ import annotations

import csv
from pathlib import Path

import gevent
import pytest

from drivers.base import ConsumerSpec
from drivers.nats.driver import NatsConfig, NatsDriver
from drivers.peer.settings import ClientConfig
from tests.conftest import ROOT
from tests.peers import assert_every_consumer_got_every_message, program, run_workload, running

pytestmark = pytest.mark.integration

DRIVER_FILE = ROOT / "drivers" / "nats.yaml"


def test_broadcast_through_the_harness_every_consumer_gets_every_message(tmp_path: Path) -> None:
    program("nats")
    run = run_workload(tmp_path, DRIVER_FILE, consumers=30, per_connection=8)
    assert_every_consumer_got_every_message(run, 30)
    broker = run.manifest["broker"]
    assert broker["name"] == "nats-server" and broker["started_by_harness"] is True
    assert broker["version"].startswith("nats-server: v")
    # consumersPerConnection SUBs share a connection: 30 consumers on 4 connections.
    with open(next(run.run_dir.glob("raw/*/connections.csv")), newline="") as f:
        assert len({row["connection"] for row in csv.DictReader(f)}) == 4


def test_shared_is_a_queue_group_each_message_reaches_one_member(tmp_path: Path) -> None:
    program("nats")
    run = run_workload(
        tmp_path, DRIVER_FILE, consumers=6, subscription_type="Shared", layout="single"
    )
    assert run.manifest["partial"] is False
    received = [n for n, _ in run.deliveries.values()]
    assert len(received) == 6 and sum(received) == run.sent >= 20
    assert sum(1 for n in received if n) > 1  # the group spreads them
    assert all(late == 0 for _, late in run.deliveries.values())


class Deliveries:
    def __init__(self) -> None:
        self.by_consumer: dict[int, list[bytes]] = {}
        self.times: list[tuple[int, int, object]] = []

    def message_received(self, index, payload, receive_us, stamps, kernel_us) -> None:
        self.messages_received([index], payload, receive_us, stamps, kernel_us)

    def messages_received(self, indexes, payload, receive_us, stamps, kernel_us) -> None:
        self.times.append((receive_us, kernel_us, stamps))
        for index in indexes:
            self.by_consumer.setdefault(index, []).append(payload)


def test_the_driver_against_a_running_server_one_queue_group_per_subscription(tmp_path) -> None:
    """The seed's baseline layout: Shared, one consumer per subscription, so each is alone in
    its queue group and gets every message; a publish is acknowledged once processed."""
    with running("nats", tmp_path) as server:
        driver = NatsDriver()
        deliveries = Deliveries()
        config = NatsConfig(client=ClientConfig(service_url=server.url))
        driver.check_reachable(server.url, 2.0)
        driver.initialize(config, deliveries, consumers_per_connection=4, service_url=server.url)
        try:
            jobs = [
                gevent.spawn(
                    driver.subscribe, ConsumerSpec(i, f"c{i}", "fanout-x", f"sub-{i}", "Shared")
                )
                for i in range(10)
            ]
            gevent.joinall(jobs, timeout=10)
            assert all(job.get().ok for job in jobs)
            producer = driver.create_producer("fanout-x")
            acks: list[Exception | None] = []
            messages = [b"%03d" % k * 100 for k in range(5)]
            for message in messages:
                producer.send_async(None, message, acks.append)
            with gevent.Timeout(10, False):  # type: ignore[arg-type]
                while sum(map(len, deliveries.by_consumer.values())) < 50 or len(acks) < 5:
                    gevent.sleep(0.01)
            assert acks == [None] * 5
            assert deliveries.by_consumer == {i: messages for i in range(10)}
            # The kernel's receive time comes with a read (Linux may start stamping a moment
            # after the first); it is never later than the read.
            assert all(
                stamps is None and kernel <= read for read, kernel, stamps in deliveries.times
            )
            assert any(kernel for _, kernel, _ in deliveries.times)
        finally:
            driver.close()
