"""The MQTT driver against a real mosquitto: small fan-out runs through the real harness (the
broker started by the harness from drivers/mqtt.yaml), each consumer's deliveries checked, at
QoS 0 and 1, MQTT 5 and 3.1.1, Broadcast and `$share` Shared."""

from __future__ import annotations

from pathlib import Path

import gevent
import pytest
import yaml

from drivers.base import ConsumerSpec
from drivers.mqtt.driver import MqttClientConfig, MqttConfig, MqttDriver, QosConfig
from tests.conftest import ROOT
from tests.peers import assert_every_consumer_got_every_message, program, run_workload, running

pytestmark = pytest.mark.integration


def driver_file(tmp_path: Path, version: str, qos: int) -> Path:
    """drivers/mqtt.yaml at another protocol version and QoS."""
    data = yaml.safe_load((ROOT / "drivers" / "mqtt.yaml").read_text())
    data["client"]["protocolVersion"] = version
    data["producer"]["qos"] = data["consumer"]["qos"] = qos
    path = tmp_path / "mqtt.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_broadcast_at_qos_1_every_consumer_gets_every_message(tmp_path: Path) -> None:
    program("mqtt")
    run = run_workload(tmp_path, driver_file(tmp_path, "5", 1), consumers=30)
    assert_every_consumer_got_every_message(run, 30)
    broker = run.manifest["broker"]
    assert broker["name"] == "mosquitto" and broker["version"].startswith("mosquitto version")


def test_shared_from_a_3_1_1_client_each_message_reaches_one_member(tmp_path: Path) -> None:
    """mosquitto 2 takes `$share/` from 3.1.1 clients too (shared subscriptions are MQTT 5's)."""
    program("mqtt")
    run = run_workload(
        tmp_path,
        driver_file(tmp_path, "3.1.1", 0),
        consumers=6,
        subscription_type="Shared",
        layout="single",
    )
    assert run.manifest["partial"] is False
    received = [n for n, _ in run.deliveries.values()]
    assert len(received) == 6 and sum(received) == run.sent >= 20
    assert sum(1 for n in received if n) > 1
    assert all(late == 0 for _, late in run.deliveries.values())


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_the_driver_against_a_running_broker_shared_at_qos_1(tmp_path, version) -> None:
    with running("mqtt", tmp_path) as server:
        driver = MqttDriver()
        got: dict[int, list[bytes]] = {}

        class Callback:
            def message_received(self, index, payload, receive_us, stamps, kernel_us) -> None:
                got.setdefault(index, []).append(payload)

            def messages_received(self, indexes, payload, receive_us, stamps, kernel_us):
                for index in indexes:
                    got.setdefault(index, []).append(payload)

        config = MqttConfig(
            client=MqttClientConfig(service_url=server.url, protocol_version=version),
            producer=QosConfig(qos=1),
            consumer=QosConfig(qos=1),
        )
        driver.initialize(config, Callback(), consumers_per_connection=10, service_url=server.url)
        try:
            specs = [ConsumerSpec(i, f"c{i}", "fanout-m", "sub-0", "Shared") for i in range(3)]
            specs.append(ConsumerSpec(3, "c3", "fanout-m", "sub-1", "Shared"))  # alone in sub-1
            jobs = [gevent.spawn(driver.subscribe, spec) for spec in specs]
            gevent.joinall(jobs, timeout=10)
            results = [job.get() for job in jobs]
            assert all(result.ok for result in results), results
            producer = driver.create_producer("fanout-m")
            acks: list[Exception | None] = []
            messages = [b"m%d" % k for k in range(9)]
            for message in messages:
                producer.send_async(None, message, acks.append)
            with gevent.Timeout(10, False):  # type: ignore[arg-type]
                while sum(map(len, got.values())) < 18 or len(acks) < 9:
                    gevent.sleep(0.01)
            assert acks == [None] * 9
            assert got[3] == messages  # the share of one gets everything
            share = sorted(m for i in range(3) for m in got.get(i, []))
            assert share == sorted(messages)  # the share of three: each message once
        finally:
            driver.close()
