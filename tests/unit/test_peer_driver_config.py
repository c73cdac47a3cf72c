"""The peer drivers' settings, checked at the edge (unknown keys and bad values stop a run
before it starts, naming the key), their files as shipped, and the subscription types each
refuses (with a message saying why, before any connection is made)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.base import ConsumerSpec, DriverError
from drivers.config import ConfigError
from drivers.mqtt.driver import MqttConfig, MqttDriver
from drivers.nats.driver import NatsConfig, NatsDriver
from drivers.redis.driver import RedisConfig, RedisDriver
from harness.driver_config import load_driver_file
from tests.peers import program

ROOT = Path(__file__).resolve().parents[2]
W = "f.yaml: "


@pytest.mark.parametrize(
    "name, driver_class, types",
    [
        ("nats", NatsDriver, ["Broadcast", "Shared"]),
        ("redis", RedisDriver, ["Broadcast"]),
        ("mqtt", MqttDriver, ["Broadcast", "Shared"]),
    ],
)
def test_the_shipped_files_load_start_their_server_and_round_trip(name, driver_class, types):
    program(name)  # the file names its server program: skips, saying what to install
    driver_file = load_driver_file(ROOT / "drivers" / f"{name}.yaml")
    assert isinstance(driver_file.driver, driver_class)
    assert driver_file.config.service_url is None  # embedded: the harness starts the server
    assert driver_file.embedded is not None
    assert driver_file.embedded.to_dict()["subscriptionTypes"] == types
    sections = {
        k: v for k, v in driver_file.to_dict().items() if k in ("client", "producer", "consumer")
    }
    assert driver_file.driver.parse_config(sections, W) == driver_file.config


@pytest.mark.parametrize("config", [NatsConfig, RedisConfig, MqttConfig])
def test_an_unknown_key_is_named_with_the_closest_known_one(config) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'client.serviceURL'.*'client.serviceUrl'"):
        config.parse({"client": {"serviceURL": "x://127.0.0.1:1"}}, W)
    with pytest.raises(ConfigError, match="unknown key 'clients'"):
        config.parse({"clients": {}}, W)


@pytest.mark.parametrize(
    "config, url",
    [(NatsConfig, "redis://127.0.0.1:1"), (RedisConfig, "nats://127.0.0.1:1")],
)
def test_a_service_url_of_another_scheme_is_refused(config, url) -> None:
    with pytest.raises(ConfigError, match="client.serviceUrl"):
        config.parse({"client": {"serviceUrl": url}}, W)


def test_source_addresses_need_a_loopback_broker() -> None:
    with pytest.raises(ConfigError, match="sourceAddresses"):
        NatsConfig.parse(
            {"client": {"serviceUrl": "nats://10.1.2.3:4222", "sourceAddresses": 2}}, W
        )
    config = NatsConfig.parse(
        {"client": {"serviceUrl": "nats://127.0.0.1:4222", "sourceAddresses": 2}}, W
    )
    assert config.client.source_addresses == 2


def test_mqtt_versions_and_qos() -> None:
    assert MqttConfig.parse({"client": {"protocolVersion": 5}}, W).version == 5
    assert MqttConfig.parse({"client": {"protocolVersion": "3.1.1"}}, W).version == 4
    with pytest.raises(ConfigError, match="'client.protocolVersion'.*3.1.1"):
        MqttConfig.parse({"client": {"protocolVersion": 3.1}}, W)
    with pytest.raises(ConfigError, match="'consumer.qos': QoS 2 is not measured"):
        MqttConfig.parse({"consumer": {"qos": 2}}, W)
    with pytest.raises(ConfigError, match="'producer.qos'"):
        MqttConfig.parse({"producer": {"qos": True}}, W)


@pytest.mark.parametrize("config", [NatsConfig(), RedisConfig(), MqttConfig()])
def test_partitions_are_refused_before_a_run(config) -> None:
    assert config.partitions_problem(1) is None
    assert "no partitions" in (config.partitions_problem(4) or "")


@pytest.mark.parametrize(
    "driver, url, mode, reason",
    [
        (NatsDriver(), "nats://127.0.0.1:1", "Exclusive", "no exclusive subscription"),
        (NatsDriver(), "nats://127.0.0.1:1", "Key_Shared", "do not route by key"),
        (RedisDriver(), "redis://127.0.0.1:1", "Shared", "no consumer groups"),
        (RedisDriver(), "redis://127.0.0.1:1", "Failover", "no active/standby"),
        (MqttDriver(), "mqtt://127.0.0.1:1", "Failover", "no active/standby"),
        (MqttDriver(), "mqtt://127.0.0.1:1", "Exclusive", "never refuses a second"),
    ],
)
def test_a_subscription_type_the_system_lacks_is_refused_not_emulated(driver, url, mode, reason):
    driver.initialize(
        driver.parse_config({}, W), _NoCallback(), consumers_per_connection=10, service_url=url
    )
    try:
        with pytest.raises(DriverError, match=f"subscription type {mode}: .*{reason}"):
            driver.subscribe(ConsumerSpec(0, "c0", "fanout-1", "sub-0", mode))
        assert not driver._ready().live  # refused before any connection was made
    finally:
        driver.close()


def test_a_pulsar_url_from_the_bundled_broker_says_what_the_file_lacks() -> None:
    """No serviceUrl and no embeddedBroker: the harness started the bundled Pulsar broker."""
    with pytest.raises(DriverError, match="embeddedBroker"):
        NatsDriver().check_reachable("pulsar://127.0.0.1:6650", 1.0)


class _NoCallback:
    def message_received(self, *args) -> None:
        raise AssertionError("no delivery expected")

    def messages_received(self, *args) -> None:
        raise AssertionError("no delivery expected")
